#!/usr/bin/env bash
# Instructions per scheduled wake, counted by callgrind (repeatable on a busy
# machine): two runs of `bench schedule --only instructions`, one with a
# round of wakes more than the other; the difference is what those wakes
# cost, every thread included. Usage: bench/wake-instructions.sh [BINARY]
set -euo pipefail
bin=${1:-target/release/spacewake}
spaces=${SPACES:-200}
scale=$(python3 -c "print($spaces/200)")
out=$(mktemp -d)
count() {
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.$1" "$bin" bench schedule \
    --only instructions --scale "$scale" --wake-rounds "$1" >/dev/null 2>"$out/log.$1"
  grep -E '^(summary|totals):' "$out/cg.$1" | head -1 | awk '{print $2}'
}
a=$(count 1)
b=$(count 2)
echo "instructions: rounds 1 -> $a, rounds 2 -> $b; per wake $(( (b - a) / spaces )) ($spaces wakes)"
rm -rf "$out"
