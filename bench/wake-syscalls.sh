#!/usr/bin/env bash
# System calls per scheduled wake, counted by strace (repeatable on a busy
# machine, unlike time): two runs of `bench schedule --only instructions`,
# one with a round of wakes more than the other; the difference per wake,
# every thread included. A wake's cost past its instructions is mostly
# kernel work per file (WAL frames written and read back, locks, fsyncs),
# which callgrind does not see. Usage: bench/wake-syscalls.sh [BINARY]
set -euo pipefail
bin=${1:-target/release/spacewake}
spaces=${SPACES:-200}
scale=$(python3 -c "print($spaces/200)")
out=$(mktemp -d)
count() {
  strace -f -c -o "$out/sc.$1" "$bin" bench schedule \
    --only instructions --scale "$scale" --wake-rounds "$1" >/dev/null 2>&1
}
count 1
count 2
python3 - "$out/sc.1" "$out/sc.2" "$spaces" <<'PY'
import sys
def calls(path):
    out = {}
    for line in open(path):
        f = line.split()
        # % time, seconds, usecs/call, calls, [errors], syscall
        if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
            out[f[-1]] = int(f[3])
    return out
a, b, n = calls(sys.argv[1]), calls(sys.argv[2]), int(sys.argv[3])
per = {k: (b.get(k, 0) - a.get(k, 0)) / n for k in set(a) | set(b)}
rows = sorted(((v, k) for k, v in per.items() if v >= 0.05), reverse=True)
print(f"system calls per wake ({n} wakes): " + ", ".join(f"{k} {v:.1f}" for v, k in rows))
print(f"total {sum(v for v, _ in rows):.1f}")
PY
rm -rf "$out"
