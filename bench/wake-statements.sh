#!/usr/bin/env bash
# The SQL statements one scheduled wake runs, and how many of them a fresh
# connection compiles: two runs of `bench schedule --only instructions`, one
# with a round of wakes more than the other, every statement traced
# (SPACEWAKE_TRACE_SQL); the difference divided by the spaces woken.
# Usage: bench/wake-statements.sh [BINARY]
set -euo pipefail
bin=${1:-target/release/spacewake}
spaces=${SPACES:-50}
scale=$(python3 -c "print($spaces/200)")
out=$(mktemp -d)
for r in 1 2; do
  SPACEWAKE_TRACE_SQL=1 "$bin" bench schedule --only instructions --scale "$scale" \
    --wake-rounds "$r" 2>&1 >/dev/null | sed -n 's/^SQLTRACE //p' | sort | uniq -c > "$out/$r"
done
python3 - "$out/1" "$out/2" "$spaces" <<'PY'
import sys
def load(p):
    d = {}
    for line in open(p):
        n, sql = line.strip().split(" ", 1)
        d[sql] = int(n)
    return d
a, b, n = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
rows = sorted(((b.get(k, 0) - a.get(k, 0)) / n, k) for k in set(a) | set(b))
rows = [r for r in rows if r[0] > 0][::-1]
for per, sql in rows:
    print(f"{per:6.2f}  {sql[:150]}")
print(f"{len(rows)} distinct statements (each compiled once per wake), "
      f"{sum(r[0] for r in rows):.1f} run per wake")
PY
rm -rf "$out"
