#!/usr/bin/env bash
# The statements one scheduled wake sends to PostgreSQL, end to end through
# one real host (`bench fleet`'s "wakes (end to end, the host)" with one
# host; every statement traced under SPACEWAKE_TRACE_SQL while it runs),
# divided by the spaces woken. BEGIN and COMMIT are counted as one line.
# Usage: bench/wake-statements-pg.sh [BINARY]   (SPACES=N, default 100)
set -euo pipefail
bin=${1:-target/release/spacewake}
spaces=${SPACES:-100}
scale=$(python3 -c "print($spaces/10000)")
out=$(mktemp)
SPACEWAKE_TRACE_SQL=1 SPACEWAKE_LOG=error "$bin" bench fleet --scale "$scale" 2>&1 >/dev/null \
  | sed -n 's/^PGTRACE //p' | sort | uniq -c > "$out"
python3 - "$out" "$spaces" <<'PY'
import sys
rows, n = [], int(sys.argv[2])
for line in open(sys.argv[1]):
    c, sql = line.strip().split(" ", 1)
    per = int(c) / n * (2 if sql == "BEGIN + COMMIT" else 1)
    rows.append((per, " ".join(sql.split())))
rows.sort(reverse=True)
for per, sql in rows:
    print(f"{per:6.2f}  {sql[:160]}")
print(f"{len(rows)} distinct statements, {sum(r[0] for r in rows):.1f} round trips per wake")
PY
rm -f "$out"
