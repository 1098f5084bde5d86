#!/usr/bin/env bash
# The reference runtime's generated integration suite, run as scenarios here
# (issue 32, item 7). Usage:
#   bench/reference-integration.sh REF_CHECKOUT [BINARY]
# REF_CHECKOUT is a work tree of the reference repository with
# packages/generated-patterns. Each `*.test.ts` there declares scenario
# objects (name, module, exportName, argument, steps): the shape our scenario
# files take. Its imports and its `describe` block are cut, the rest is
# compiled to JavaScript by `spacewake debug emit` (types stripped), and node
# prints the object as JSON beside a copy of the pattern. Then `spacewake
# scenario` runs them all and prints its lines and `N passed, N failed`.
# Needs node.
set -uo pipefail
ref=${1:?usage: bench/reference-integration.sh REF_CHECKOUT [BINARY]}
bin=$(realpath "${2:-target/release/spacewake}")
dir="$ref/packages/generated-patterns/integration/patterns"
[ -d "$dir" ] || { echo "no packages/generated-patterns/integration/patterns under $ref" >&2; exit 2; }
command -v node >/dev/null || { echo "node is needed to read the scenario objects" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$dir"/*.ts "$work"/
[ -d "$dir/data" ] && cp -r "$dir/data" "$work"/
unread=0
for t in "$work"/*.test.ts; do
  base=${t%.test.ts}
  python3 - "$t" "$base.object.ts" <<'PY' || { unread=$((unread + 1)); echo "no scenario declared in $(basename "$t")" >&2; continue; }
import re, sys
text = open(sys.argv[1]).read()
text = re.sub(r'(?m)^import[\s\S]*?from\s+"[^"]+";\n', "", text)
text = re.sub(r"(?ms)^describe\(.*", "", text)
text = "const fromFileUrl = (u) => u.pathname;\n" + text
# Every scenario the file declares (some declare several).
names = re.findall(r"(?m)^(?:export\s+)?const (\w+)\s*:\s*PatternIntegrationScenario", text)
if not names:
    sys.exit(1)
open(sys.argv[2], "w").write(text + f"\nconsole.log(JSON.stringify([{', '.join(names)}]));\n")
PY
  if "$bin" debug emit "$base.object.ts" | grep -v '^// module' >"$base.object.mjs" &&
    node "$base.object.mjs" >"$base.object.json" 2>/dev/null; then
    python3 -c '
import json, os, sys
def each(v):
    for o in v:
        yield from (each(o) if isinstance(o, list) else [o])
for i, o in enumerate(each(json.load(open(sys.argv[1])))):
    o["module"] = "./" + os.path.basename(o["module"])
    # Data files are attached by the compiler from the pattern source.
    o.pop("dataFiles", None)
    o.pop("dataRoot", None)
    json.dump(o, open(f"{sys.argv[2]}.{i}.scenario.json", "w"), indent=1)' "$base.object.json" "$base"
  else
    unread=$((unread + 1))
    echo "cannot read the scenario in $(basename "$t")" >&2
  fi
done
[ "$unread" -eq 0 ] || echo "$unread test files without a readable scenario" >&2
cd "$work" && "$bin" scenario ./*.scenario.json
