#!/usr/bin/env bash
# How many of the reference runtime's real applications deploy here and
# answer a read (issue 32). Usage:
#   bench/reference-apps.sh REF_CHECKOUT [BINARY]
# REF_CHECKOUT is a work tree of the reference repository (at least its
# packages/patterns). Every .tsx/.ts file there that has a default export,
# tests and baselines left out, is checked, deployed with an empty argument
# into a fresh space of a real `serve`, and its result read back whole.
# Prints `N/M reference apps deploy and answer a read`, then the failures
# grouped by their first error, most common first. Then it runs every
# `*.test.tsx` there with `spacewake test` and prints `N/M reference pattern
# tests pass under spacewake test` with each failing file's first failure.
# Loopback only; the server and its data are removed at the end.
set -uo pipefail
ref=${1:?usage: bench/reference-apps.sh REF_CHECKOUT [BINARY]}
bin=$(realpath "${2:-target/release/spacewake}")
patterns="$ref/packages/patterns"
[ -d "$patterns" ] || { echo "no packages/patterns under $ref" >&2; exit 2; }
work=$(mktemp -d)
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$work"' EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
addr="127.0.0.1:$port"
"$bin" serve --data "$work/data" --listen "$addr" \
  --space-creates-per-minute 0 --max-spaces-per-identity 0 \
  >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 100); do
  if curl -fsS "http://$addr/api/health/stats" >/dev/null 2>&1; then break; fi
  sleep 0.1
done

mapfile -t entries < <(cd "$patterns" && find . \( -name '*.tsx' -o -name '*.ts' \) \
  -not -name '*.test.*' -not -path '*/test/*' -not -path '*/tests/*' \
  -not -path '*/baselines/*' -print0 | xargs -0 grep -l 'export default' | sort)
total=${#entries[@]}
ok=0
: >"$work/failures"
i=0
for rel in "${entries[@]}"; do
  i=$((i + 1))
  file="$patterns/${rel#./}"
  space="app-$i"
  printf '\r%d/%d %s\033[K' "$i" "$total" "$rel" >&2
  if ! out=$("$bin" check "$file" 2>&1); then
    echo "${rel#./}	check: $(echo "$out" | grep -m1 -E 'error|:[0-9]+:[0-9]+' || echo "$out" | head -1)" >>"$work/failures"
    continue
  fi
  if ! out=$(timeout 60 "$bin" deploy --server "$addr" --space "$space" --key "$work/key" "$file" 2>&1); then
    echo "${rel#./}	deploy: $(echo "$out" | grep -v '^\s*$' | tail -1)" >>"$work/failures"
    continue
  fi
  piece=$(echo "$out" | grep -oE 'pc-[0-9a-f]+|ba[0-9a-z]{20,}' | head -1)
  if [ -z "$piece" ]; then
    echo "${rel#./}	deploy: no piece id in: $(echo "$out" | head -1)" >>"$work/failures"
    continue
  fi
  if ! out=$(timeout 60 "$bin" read --server "$addr" --space "$space" --key "$work/key" --piece "$piece" 2>&1); then
    echo "${rel#./}	read: $(echo "$out" | grep -v '^\s*$' | tail -1)" >>"$work/failures"
    continue
  fi
  ok=$((ok + 1))
done
printf '\r\033[K' >&2
echo "$ok/$total reference apps deploy and answer a read"
if [ -s "$work/failures" ]; then
  echo
  echo "failures by first error (the error with file names and ids blurred):"
  cut -f2 "$work/failures" | sed -E 's/"[^"]*"/"…"/g; s/[0-9a-f]{16,}/…/g; s/:[0-9]+:[0-9]+/:L:C/g' |
    cut -c1-160 | sort | uniq -c | sort -rn | head -40
  echo
  echo "every failure:"
  sort "$work/failures"
fi

# The reference's own pattern tests (`*.test.tsx`), each run by `spacewake
# test`: a file passes when every one of its steps passed.
mapfile -t tests < <(cd "$patterns" && find . -name '*.test.tsx' -not -path '*/baselines/*' | sort)
tests_total=${#tests[@]}
tests_ok=0
: >"$work/test-failures"
i=0
for rel in "${tests[@]}"; do
  i=$((i + 1))
  printf '\r%d/%d %s\033[K' "$i" "$tests_total" "$rel" >&2
  if out=$(cd "$patterns" && timeout 120 "$bin" test "$rel" 2>&1); then
    tests_ok=$((tests_ok + 1))
  else
    first=$(echo "$out" | grep -m1 -A1 '✗' | tr '\n' ' ' | sed -E 's/  +/ /g')
    echo "${rel#./}	${first:-$(echo "$out" | tail -1)}" >>"$work/test-failures"
  fi
done
printf '\r\033[K' >&2
echo
echo "$tests_ok/$tests_total reference pattern tests pass under spacewake test"
if [ -s "$work/test-failures" ]; then
  echo
  echo "failing tests, with their first failure:"
  sort "$work/test-failures" | cut -c1-220
fi
