//! Compiler tests: every fixture, schema extraction, closure rewriting, imports and hashing.
//!
//! Fixtures live in `fixtures/patterns/` (each top-level file compiles cleanly and its output
//! re-parses as plain JavaScript) and `fixtures/invalid/` (each `NAME.tsx` has a sibling
//! `NAME.expected.json` with the one diagnostic it must produce).

use std::path::{Path, PathBuf};

use oxc_allocator::Allocator;
use oxc_parser::Parser;
use oxc_span::SourceType;
use serde_json::{json, Value};

use super::*;

fn fixtures(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(kind)
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("ts" | "tsx")))
        .collect();
    out.sort();
    out
}

fn assert_plain_js(name: &str, js: &str) {
    let alloc = Allocator::default();
    let ret = Parser::new(&alloc, js, SourceType::mjs()).parse();
    assert!(
        ret.diagnostics.is_empty() && !ret.panicked,
        "{name}: emitted JS does not parse as plain JS: {:?}\n{js}",
        ret.diagnostics
            .iter()
            .map(|d| d.message.to_string())
            .collect::<Vec<_>>()
    );
}

fn mem(files: &[(&str, &str)]) -> MemorySource {
    files
        .iter()
        .fold(MemorySource::new(), |s, (p, t)| s.with(p, t))
}

fn compile_one(text: &str) -> CompiledProgram {
    compile("p.tsx", &mem(&[("p.tsx", text)]))
        .unwrap_or_else(|d| panic!("unexpected diagnostics:\n{}", render(&d)))
}

fn compile_err(text: &str) -> Vec<Diagnostic> {
    compile("p.tsx", &mem(&[("p.tsx", text)])).expect_err("expected diagnostics")
}

#[test]
fn every_valid_fixture_compiles_to_plain_js() {
    let files = entries(&fixtures("patterns"));
    assert!(
        files.len() >= 10,
        "expected at least 10 valid fixtures, found {}",
        files.len()
    );
    for f in files {
        let path = f.to_str().unwrap();
        let program = compile(path, &FsSource::default())
            .unwrap_or_else(|d| panic!("{path} should compile:\n{}", render(&d)));
        for m in &program.modules {
            assert_plain_js(&m.name, &m.js);
            assert!(
                !m.js.contains("from \"./lib/format\""),
                "relative specifiers are rewritten"
            );
        }
    }
}

#[test]
fn every_invalid_fixture_reports_its_code_line_and_column() {
    let files: Vec<PathBuf> = entries(&fixtures("invalid"));
    assert!(
        files.len() >= 22,
        "expected at least 22 invalid fixtures, found {}",
        files.len()
    );
    let mut seen_codes = std::collections::BTreeSet::new();
    for f in files {
        let path = f.to_str().unwrap();
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(f.with_extension("expected.json"))
                .unwrap_or_else(|_| panic!("{path} needs a sibling .expected.json")),
        )
        .unwrap();
        let diags = compile(path, &FsSource::default())
            .err()
            .unwrap_or_else(|| panic!("{path} should be rejected"));
        assert_eq!(
            diags.len(),
            1,
            "{path}: expected exactly one diagnostic:\n{}",
            render(&diags)
        );
        let d = &diags[0];
        let got = json!({"code": d.code, "line": d.line, "column": d.col});
        // `typecheck` and `typecheckLine` are tsc's verdict (tests/tooling.rs).
        let want = json!({
            "code": expected["code"],
            "line": expected["line"],
            "column": expected["column"],
        });
        assert_eq!(got, want, "{path}:\n{}", render(&diags));
        assert!(!d.message.is_empty() && d.file == path);
        seen_codes.insert(d.code);
    }
    // The required rejection rules are each represented.
    for code in [
        codes::SYNTAX,
        codes::IMPORT_FORBIDDEN,
        codes::IMPORT_NOT_FOUND,
        codes::SCHEDULE_NOT_ARRAY,
        codes::SCHEDULE_TOO_MANY,
        codes::SCHEDULE_SPREAD,
        codes::SCHEDULE_UNKNOWN_KEY,
        codes::SCHEDULE_MISSING_KEY,
        codes::SCHEDULE_INTERVAL_TOO_SMALL,
        codes::SCHEDULE_INTERVAL_NOT_INTEGER,
        codes::SCHEDULE_INTERVAL_NOT_DECIMAL,
        codes::SCHEDULE_INTERVAL_NOT_NUMBER,
        codes::SCHEDULE_INTERVAL_NOT_LITERAL,
        codes::SCHEDULE_NOT_ROOT,
        codes::SCHEDULE_DUPLICATE,
        codes::SCHEDULE_CALLBACK_UNBOUND,
        codes::SCHEDULE_CALLBACK_UNDEFINED,
        codes::NAME_UNDEFINED,
        codes::IMPORT_UNKNOWN_EXPORT,
    ] {
        assert!(seen_codes.contains(code), "no invalid fixture for {code}");
    }
}

#[test]
fn validation_doc_lists_every_code() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("spec/patterns.md"))
            .unwrap();
    for code in codes::ALL {
        assert!(
            doc.contains(&format!("`{code}`")),
            "VALIDATION.md does not document {code}"
        );
    }
}

#[test]
fn diagnostics_render_with_caret() {
    let src = "import { pattern, SCHEDULE } from \"commonfabric\";\nexport default pattern(() => ({\n  [SCHEDULE]: [{ intervalMinutes: 30, callback: x }],\n}));\nconst x = 1;\n";
    let d = compile_err(src);
    let r = render(&d);
    assert!(
        r.starts_with("p.tsx:3:35: error[SCHEDULE_INTERVAL_TOO_SMALL]: intervalMinutes must be at least 60 (got 30)\n"),
        "{r}"
    );
    assert!(
        r.contains("3 |   [SCHEDULE]: [{ intervalMinutes: 30, callback: x }],\n"),
        "{r}"
    );
    assert!(r.contains(&format!("  | {}^~\n", " ".repeat(34))), "{r}");
}

// ---------------------------------------------------------------- schema extraction

fn schemas(text: &str) -> Vec<CallSchema> {
    compile_one(text).modules.remove(0).schemas
}

#[test]
fn default_values_of_every_json_type() {
    let s = schemas(
        r#"import { pattern, Default } from "commonfabric";
interface Args {
  n: Default<number, 42>;
  neg: Default<number, -3>;
  f: Default<number, 2.5>;
  s: Default<string, "hi">;
  t: Default<boolean, true>;
  z: Default<string | null, null>;
  a: Default<string[], ["x", "y"]>;
  e: Default<number[], []>;
  o: Default<{ k: string; deep: { on: boolean } }, { k: "v"; deep: { on: false } }>;
  tup: Default<[number, string], [1, "one"]>;
  plain: string;
  opt?: number;
}
export default pattern<Args>((args) => args);
"#,
    );
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].api, "pattern");
    let arg = &s[0].meta["argument"];
    assert_eq!(arg["type"], "object");
    let p = &arg["properties"];
    assert_eq!(p["n"], json!({"type": "number", "default": 42}));
    assert_eq!(p["neg"]["default"], json!(-3));
    assert_eq!(p["f"]["default"], json!(2.5));
    assert_eq!(p["s"], json!({"type": "string", "default": "hi"}));
    assert_eq!(p["t"], json!({"type": "boolean", "default": true}));
    assert_eq!(p["z"]["default"], Value::Null);
    assert_eq!(
        p["a"],
        json!({"type": "array", "items": {"type": "string"}, "default": ["x", "y"]})
    );
    assert_eq!(p["e"]["default"], json!([]));
    assert_eq!(p["o"]["default"], json!({"k": "v", "deep": {"on": false}}));
    assert_eq!(p["tup"]["default"], json!([1, "one"]));
    // Properties with defaults, and optional ones, are not required.
    assert_eq!(arg["required"], json!(["plain"]));
}

#[test]
fn cell_writable_stream_fields_and_handler_shape() {
    let s = schemas(
        r#"import { handler, Cell, Writable, Stream, Default } from "commonfabric";
type Ctx = { count: Cell<number>; list: Writable<Default<string[], []>>; plain: number; out: Stream<{ id: string }> };
export const h1 = handler<{ amount?: number }, Ctx>((ev, ctx) => {});
export const h2 = handler((ev: { x: number }, ctx: { c: Cell<string> }) => {});
export const h3 = handler((ev, ctx) => {});
"#,
    );
    assert_eq!(s.len(), 2, "the untyped handler gets no schema");
    let ctx = &s[0].meta["context"]["properties"];
    assert_eq!(ctx["count"], json!({"type": "number", "asCell": true}));
    assert_eq!(
        ctx["list"],
        json!({"type": "array", "items": {"type": "string"}, "default": [], "asCell": true})
    );
    assert_eq!(ctx["plain"], json!({"type": "number"}));
    assert_eq!(ctx["out"]["asStream"], json!(true));
    assert_eq!(
        s[0].meta["event"]["properties"]["amount"],
        json!({"type": "number"})
    );
    // Annotations on the callback's parameters are used when there are no type arguments.
    assert_eq!(
        s[1].meta["context"]["properties"]["c"]["asCell"],
        json!(true)
    );
    assert_eq!(s[1].meta["event"]["required"], json!(["x"]));
}

#[test]
fn generics_unions_intersections_and_recursion() {
    let s = schemas(
        r#"import { lift } from "commonfabric";
interface Box<T> { value: T }
type Mode = "a" | "b";
interface Base { id: string }
interface Node extends Base { children: Node[]; mode: Mode; box: Box<number>; bits: Record<string, boolean> }
export const f = lift<Node, Base & { extra: 1 | 2 }>((n) => n);
"#,
    );
    let arg = &s[0].meta["argument"];
    assert_eq!(arg["properties"]["id"], json!({"type": "string"}));
    assert_eq!(
        arg["properties"]["mode"],
        json!({"type": "string", "enum": ["a", "b"]})
    );
    assert_eq!(
        arg["properties"]["box"]["properties"]["value"],
        json!({"type": "number"})
    );
    assert_eq!(
        arg["properties"]["children"]["items"],
        json!({}),
        "recursion is cut"
    );
    assert_eq!(
        arg["properties"]["bits"]["additionalProperties"],
        json!({"type": "boolean"})
    );
    let res = &s[0].meta["result"];
    assert_eq!(
        res["properties"]["extra"],
        json!({"type": "number", "enum": [1, 2]})
    );
    assert_eq!(res["required"], json!(["id", "extra"]));
}

#[test]
fn imported_types_resolve_across_modules() {
    let p = compile(
        "dir/main.ts",
        &mem(&[
            ("dir/main.ts", "import { pattern } from \"commonfabric\";\nimport type { Args } from \"./types\";\nexport default pattern<Args>((a) => a);\n"),
            ("dir/types.ts", "import type { Default } from \"commonfabric\";\nexport interface Args { n: Default<number, 7> }\n"),
        ]),
    )
    .unwrap();
    assert_eq!(p.modules.len(), 2);
    assert_eq!(
        p.modules[0].schemas[0].meta["argument"]["properties"]["n"],
        json!({"type": "number", "default": 7})
    );
    // A type-only import leaves no import in the output.
    assert!(!p.modules[0].js.contains("./types"), "{}", p.modules[0].js);
}

// ---------------------------------------------------------------- closures

fn body_js(text: &str) -> String {
    let js = compile_one(text).modules.remove(0).js;
    js.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn computed_captures_become_inputs() {
    let js = body_js(
        r#"import { pattern, computed } from "commonfabric";
const K = 2;
export default pattern<{ count: number }>(({ count }) => {
  const doubled = computed(() => count * K);
  const plus = computed(() => doubled + count + K);
  const none = computed(() => K + Math.random());
  return { doubled, plus, none };
});
"#,
    );
    assert!(
        js.contains("computed(({ count }) => count * K, { count })"),
        "{js}"
    );
    assert!(
        js.contains("computed(({ doubled, count }) => doubled + count + K, { doubled, count })"),
        "{js}"
    );
    assert!(
        js.contains("computed(() => K + Math.random())"),
        "module bindings and globals are not captured: {js}"
    );
}

#[test]
fn derive_and_action_captures_sit_after_the_input_or_event() {
    let js = body_js(
        r#"import { pattern, derive, action } from "commonfabric";
export default pattern(({ items, step }: { items: number[]; step: number }) => {
  const total = derive(items, xs => xs.length * step);
  const add = action(() => items.push(step));
  const withEvent = action((ev: { n: number }) => items.push(ev.n + step));
  const untouched = derive(items, (xs) => xs.length);
  return { total, add, withEvent, untouched };
});
"#,
    );
    assert!(
        js.contains("derive(items, (xs, { step }) => xs.length * step, { step })"),
        "{js}"
    );
    assert!(
        js.contains(
            "action((__swEvent, { items, step }) => items.push(step), { items: __cf.__asCell(items), step })"
        ),
        "{js}"
    );
    assert!(
        js.contains(
            "action((ev, { items, step }) => items.push(ev.n + step), { items: __cf.__asCell(items), step }, \
             { \"actionEvent\": { \"properties\": { \"n\": { \"type\": \"number\" } }"
        ),
        "{js}"
    );
    assert!(js.contains("derive(items, (xs) => xs.length)"), "{js}");
}

#[test]
fn closures_outside_patterns_and_inner_bindings_are_left_alone() {
    let js = body_js(
        r#"import { pattern, computed, lift } from "commonfabric";
const outer = 1;
export const top = computed(() => outer + 1);
export default pattern<{ xs: number[] }>(({ xs }) => {
  let mutable = 1;
  const list = xs.map((x) => computed(() => x + mutable));
  return { list };
});
"#,
    );
    assert!(js.contains("computed(() => outer + 1)"), "{js}");
    // A reactive map whose callback builds graph is a sub-pattern: its element is reactive.
    assert!(
        js.contains("computed(({ x }) => x + mutable, { x })"),
        "let locals are not captures, the element is: {js}"
    );
}

#[test]
fn aliased_imports_are_recognised_and_shadowing_is_respected() {
    let js = body_js(
        r#"import { pattern as p, computed as c } from "commonfabric";
export default p<{ n: number }>(({ n }) => {
  const a = c(() => n + 1);
  const computed = (f: () => number) => f();
  const b = computed(() => n + 2);
  return { a, b };
});
"#,
    );
    assert!(js.contains("c(({ n }) => n + 1, { n })"), "{js}");
    assert!(
        js.contains("computed(() => n + 2)"),
        "a local `computed` is not commonfabric's: {js}"
    );
}

// ---------------------------------------------------------------- JSX, imports, metadata, hash

#[test]
fn jsx_lowers_to_h_calls_and_injects_the_import() {
    let js = body_js(
        r#"import { pattern, UI } from "commonfabric";
export default pattern<{ t: string }>(({ t }) => ({ [UI]: <><p class="x">{t}</p><br /></> }));
"#,
    );
    assert!(
        js.starts_with("import { h } from \"commonfabric\";"),
        "{js}"
    );
    assert!(
        js.contains("h(h.fragment, null, h(\"p\", { class: \"x\" }, t), h(\"br\", null))"),
        "{js}"
    );
    // An explicit import is not duplicated.
    let js2 = body_js(
        "import { pattern, h, UI } from \"commonfabric\";\nexport default pattern(() => ({ [UI]: <i /> }));\n",
    );
    assert_eq!(js2.matches("import").count(), 1, "{js2}");
}

#[test]
fn relative_imports_are_rewritten_to_paths_from_their_importer() {
    let p = compile(
        "app/main.tsx",
        &mem(&[
            ("app/main.tsx", "import { pattern } from \"commonfabric\";\nimport { a } from \"./lib/a\";\nimport { b } from \"../shared/b.ts\";\nexport default pattern(() => ({ v: a + b }));\n"),
            ("app/lib/a.ts", "import { b } from \"../../shared/b\";\nexport const a = b + 1;\n"),
            ("shared/b.ts", "export const b = 1;\n"),
        ]),
    )
    .unwrap();
    let names: Vec<&str> = p.modules.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["./main.tsx", "./lib/a.ts", "../shared/b.ts"]);
    assert!(
        p.modules[0].js.contains("from \"./lib/a.ts\""),
        "{}",
        p.modules[0].js
    );
    assert!(p.modules[0].js.contains("from \"../shared/b.ts\""));
    // From `app/lib/a.ts`, the same module is two folders up: a loader
    // joining the specifier to the importer's path finds it there.
    assert!(
        p.modules[1].js.contains("from \"../../shared/b.ts\""),
        "{}",
        p.modules[1].js
    );
    // What a program's modules import is still named canonically.
    assert_eq!(p.modules[0].imports, ["./lib/a.ts", "../shared/b.ts"]);
    assert_eq!(p.modules[1].imports, ["../shared/b.ts"]);
    assert!(p.module("../shared/b.ts").is_some());
}

#[test]
fn import_cycles_and_reexports_are_fine() {
    let p = compile(
        "a.ts",
        &mem(&[
            (
                "a.ts",
                "import { b } from \"./b\";\nexport const a = () => b();\nexport * from \"./c\";\n",
            ),
            (
                "b.ts",
                "import { a } from \"./a\";\nexport const b = () => 1;\nexport const again = a;\n",
            ),
            ("c.ts", "export const c = 3;\n"),
        ]),
    )
    .unwrap();
    assert_eq!(p.modules.len(), 3);
    assert!(
        p.modules[0].js.contains("export * from \"./c.ts\""),
        "{}",
        p.modules[0].js
    );
}

#[test]
fn every_problem_in_a_file_is_reported_in_order() {
    let d = compile_err(
        r#"import fs from "fs";
import { pattern, SCHEDULE } from "commonfabric";
export default pattern(() => ({
  [SCHEDULE]: [{ intervalMinutes: 59, callback: fs }, { intervalMinutes: 1e2, callback: fs, extra: 1 }],
}));
"#,
    );
    let got: Vec<(&str, u32)> = d.iter().map(|d| (d.code, d.line)).collect();
    assert_eq!(
        got,
        [
            (codes::IMPORT_FORBIDDEN, 1),
            (codes::SCHEDULE_INTERVAL_TOO_SMALL, 4),
            (codes::SCHEDULE_INTERVAL_NOT_DECIMAL, 4),
            (codes::SCHEDULE_UNKNOWN_KEY, 4),
        ]
    );
}

#[test]
fn schedule_metadata_is_reported_per_pattern() {
    let path = fixtures("patterns").join("counter.tsx");
    let p = compile(path.to_str().unwrap(), &FsSource::default()).unwrap();
    let pat = &p.entry().patterns[0];
    assert_eq!(pat.exports, ["default"]);
    assert_eq!(pat.schedules.len(), 1);
    let e = &pat.schedules[0].entries;
    assert_eq!(e.len(), 2);
    assert_eq!(
        (e[0].index, e[0].interval_minutes, e[0].callback.as_str()),
        (0, 120, "increment({ value })")
    );
    assert_eq!(
        (e[1].index, e[1].interval_minutes, e[1].callback.as_str()),
        (1, 60, "bump")
    );
    let src = &p.entry().source;
    assert_eq!(
        &src[e[1].callback_span.0 as usize..e[1].callback_span.1 as usize],
        "bump"
    );

    let named = fixtures("patterns").join("schedule-one.tsx");
    let p = compile(named.to_str().unwrap(), &FsSource::default()).unwrap();
    let pat = &p.entry().patterns[0];
    assert_eq!(pat.name.as_deref(), Some("feed"));
    assert_eq!(pat.binding.as_deref(), Some("feed"));
    assert_eq!(pat.exports, ["default", "feed"]);
    assert_eq!(pat.schedules[0].entries[0].interval_minutes, 44640);
}

#[test]
fn hash_is_stable_and_covers_every_source() {
    let files = [
        ("m.ts", "import { x } from \"./x\";\nexport const y = x;\n"),
        ("x.ts", "export const x = 1;\n"),
    ];
    let a = compile("m.ts", &mem(&files)).unwrap();
    let b = compile("m.ts", &mem(&files)).unwrap();
    assert_eq!(a.hash, b.hash);
    assert_eq!(a.hash_hex().len(), 64);
    let c = compile("m.ts", &mem(&[files[0], ("x.ts", "export const x = 2;\n")])).unwrap();
    assert_ne!(a.hash, c.hash);
    // The same sources under another directory give the same canonical names and hash.
    let d = compile(
        "deep/m.ts",
        &mem(&[("deep/m.ts", files[0].1), ("deep/x.ts", files[1].1)]),
    )
    .unwrap();
    assert_eq!(a.hash, d.hash);
}

#[test]
fn unreadable_entry_is_a_diagnostic() {
    let d = compile("nope.tsx", &MemorySource::new()).unwrap_err();
    assert_eq!(d[0].code, codes::MODULE_UNREADABLE);
    assert!(render(&d).starts_with("nope.tsx:1:1: error[MODULE_UNREADABLE]"));
}

#[test]
fn spread_beside_schedule_and_inline_action_callback_are_fine() {
    let p = compile_one(
        r#"import { pattern, action, SCHEDULE } from "commonfabric";
const base = { kind: "x" };
export default pattern<{ n: number }>(({ n }) => ({
  ...base,
  [SCHEDULE]: [
    { intervalMinutes: 60, callback: action(() => n) },
    { callback: action(() => n + 1), intervalMinutes: 44640 },
  ],
}));
"#,
    );
    let entries = &p.entry().patterns[0].schedules[0].entries;
    assert_eq!(
        entries
            .iter()
            .map(|e| e.interval_minutes)
            .collect::<Vec<_>>(),
        [60, 44640]
    );
    // The inline action's capture is rewritten inside the schedule too.
    assert!(p.entry().js.contains("{ n }"), "{}", p.entry().js);
}

#[test]
fn edit_map_points_back_into_the_original() {
    let text = "abcdef";
    let edits = [
        Edit::insert(0, "XX".into()),
        Edit::replace(oxc_span::Span::new(2, 4), "YYYY".into()),
    ];
    let (out, map) = emit::apply_edits(text, &edits).unwrap();
    assert_eq!(out, "XXabYYYYef");
    assert_eq!(map.to_original(2), 0); // 'a'
    assert_eq!(map.to_original(5), 2); // inside the replacement → its start
    assert_eq!(map.to_original(8), 4); // 'e'
}

#[test]
fn a_program_past_the_module_limit_is_one_located_diagnostic() {
    let n = super::MAX_MODULES + 10;
    let files: Vec<(String, String)> = (0..n)
        .map(|i| {
            let text = if i + 1 < n {
                format!(
                    "import {{ v as next }} from \"./m{}.ts\";\nexport const v = next + 1;\n",
                    i + 1
                )
            } else {
                "export const v = 0;\n".to_string()
            };
            (format!("m{i}.ts"), text)
        })
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let diags = compile("m0.ts", &mem(&refs)).unwrap_err();
    assert_eq!(diags.len(), 1, "{}", render(&diags));
    let d = &diags[0];
    assert_eq!(d.code, codes::TOO_MANY_MODULES);
    assert_eq!((d.line, d.col), (1, 27), "{}", render(&diags));
    assert!(d.message.contains("at most 512 modules"), "{}", d.message);
}

// ---------------------------------------------------------------- typeof defaults

#[test]
fn typeof_const_defaults_are_evaluated_statically() {
    let s = schemas(
        r#"import { pattern, Default } from "commonfabric";
const defaultItems = [{ id: "a", qty: 1, "two words": true }, { id: "b", qty: -2.5, note: null }];
const limits = { max: +10, min: -Infinity, bad: NaN, all: Infinity } as const;
const title = ("Groceries" satisfies string) as string;
const nested = { items: defaultItems, names: [`plain`, 'q'], skip: undefined };
interface Args {
  items: Default<{ id: string; qty: number }[], typeof defaultItems>;
  limits: Default<Record<string, number | null>, typeof limits>;
  title: Default<string, typeof title>;
  nested: Default<object, typeof nested>;
  tally: Default<Record<string, number>, {}>;
  index: Default<{ [k: string]: number }, { [k: string]: number }>;
}
export default pattern<Args>((args) => args);
"#,
    );
    let p = &s[0].meta["argument"]["properties"];
    assert_eq!(
        p["items"]["default"],
        json!([{"id": "a", "qty": 1, "two words": true}, {"id": "b", "qty": -2.5, "note": null}])
    );
    assert_eq!(
        p["limits"]["default"],
        json!({"max": 10, "min": null, "bad": null, "all": null})
    );
    assert_eq!(p["title"]["default"], json!("Groceries"));
    assert_eq!(p["nested"]["default"]["items"][1]["id"], json!("b"));
    assert_eq!(p["nested"]["default"]["names"], json!(["plain", "q"]));
    assert!(p["nested"]["default"].get("skip").is_none());
    assert_eq!(p["tally"]["default"], json!({}));
    assert_eq!(p["index"]["default"], json!({}));
}

#[test]
fn typeof_defaults_follow_imports() {
    let p = compile(
        "dir/main.ts",
        &mem(&[
            ("dir/main.ts", "import { pattern, Default } from \"commonfabric\";\nimport { seed } from \"./seed.ts\";\nexport default pattern<{ xs: Default<number[], typeof seed> }>((a) => a);\n"),
            ("dir/seed.ts", "export const seed = [1, 2, 3];\n"),
        ]),
    )
    .unwrap();
    assert_eq!(
        p.modules[0].schemas[0].meta["argument"]["properties"]["xs"]["default"],
        json!([1, 2, 3])
    );
}

#[test]
fn typeof_defaults_that_cannot_be_evaluated_are_located() {
    for (decl, why) in [
        ("let seed = [1];", "declared with `let`"),
        ("const seed = makeSeed();", "a call"),
        ("const seed = [...other];", "spreads"),
        ("const seed = { n: later };", "not a module-level const"),
    ] {
        let text = format!(
            "import {{ pattern, Default }} from \"commonfabric\";\nfunction makeSeed() {{ return [1]; }}\nconst other = [1];\n{decl}\nexport default pattern<{{ xs: Default<number[], typeof seed> }}>((a) => a);\nconst later = 1;\n"
        );
        let d = compile_err(&text);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].code, "DEFAULT_NOT_LITERAL");
        assert_eq!(d[0].line, 5, "{decl}");
        assert_eq!(d[0].col, 48, "{decl}");
        assert!(d[0].message.contains(why), "{decl}: {}", d[0].message);
    }
}

/// Every value the reference's `packages/api/index.ts` exports (its runtime builder's object and
/// the module's own constants, at reference head 0c0261df3a), and every value of its
/// `commonfabric/cfc` module: each exists in the runtime module, and `check` knows each.
#[test]
fn every_value_export_of_the_reference_api_exists() {
    const REFERENCE: &[&str] = &[
        "pattern",
        "patternTool",
        "lift",
        "handler",
        "action",
        "computed",
        "assert",
        "str",
        "ifElse",
        "when",
        "unless",
        "uiVariant",
        "llm",
        "llmDialog",
        "generateObject",
        "generateText",
        "fetchBinary",
        "cellFromUrl",
        "fetchText",
        "fetchJson",
        "fetchJsonUnchecked",
        "fetchProgram",
        "streamData",
        "compileAndRun",
        "dataFile",
        "sqliteDatabase",
        "sqliteQuery",
        "table",
        "cfLink",
        "cfSqlite",
        "navigateTo",
        "inspectConfLabel",
        "wish",
        "multiUserTest",
        "cell",
        "equals",
        "Cell",
        "Writable",
        "OpaqueCell",
        "Stream",
        "ComparableCell",
        "ReadonlyCell",
        "WriteonlyCell",
        "byRef",
        "getPatternEnvironment",
        "getEntityId",
        "entityRefToString",
        "SELF",
        "TYPE",
        "NAME",
        "UI",
        "TILE_UI",
        "CHIP_UI",
        "FS",
        "TESTS",
        "schema",
        "toSchema",
        "__cf_data",
        "AuthSchema",
        "WebhookConfigSchema",
        "h",
        "UiAction",
        "UiPromptSlot",
        "UiDisclosure",
        "FabricSpecialObject",
        "FabricInstance",
        "FabricPrimitive",
        "FabricEpochNsec",
        "FabricEpochDay",
        "FabricHash",
        "FabricLink",
        "FabricBytes",
        "FabricRegExp",
        "FabricKeyPair",
        "FabricError",
        "toCompactDebugString",
        "toIndentedDebugString",
        "valueEqual",
        "__cfHelpers",
        "createNodeFactory",
        "FABRIC_SPECIAL_OBJECT_BRAND",
        "MERGEABLE_OP_METHODS",
        "FABRIC_PRIMITIVE_SCHEMA_TYPES",
        "isFabricPrimitiveSchemaType",
        "CFC_CANONICAL_ALIAS_NAMES",
    ];
    const REFERENCE_CFC: &[&str] = &[
        "CFC_ATOM_TYPE",
        "CFC_RUNTIME_SUBJECT",
        "CFC_COMPILED_BY_ATOM_PREFIX",
        "CFC_COMPILED_BY_ATOM",
        "CFC_CONCEPT_KIND",
        "CFC_FUSE_ATOM_CLASS",
        "v",
        "THIS_POLICY",
        "cfcPattern",
        "exchangeRule",
        "exchangeRules",
        "cfcAtom",
        "CFC_CANONICAL_ALIAS_NAMES",
    ];
    // What the engine's module namespaces really hold.
    let sb = crate::sandbox::Sandbox::new(
        crate::sandbox::SandboxConfig::default(),
        &crate::runtime::COMMONFABRIC_JS,
    )
    .unwrap();
    let boot = "import * as cf from 'commonfabric'; import * as cfc from 'commonfabric/cfc'; \
                import * as authoring from 'commonfabric/cfc-authoring'; \
                import * as schema from 'commonfabric/schema'; \
                export const names = [cf, cfc, authoring, schema].map((ns) => Object.keys(ns).sort()); \
                export const defaults = Object.keys(cf.default);";
    let ns = sb.load(&[("boot.js", boot)], "boot.js").unwrap();
    let names = sb.get(ns, "names").unwrap();
    let got: Vec<Vec<String>> = serde_json::from_value(sb.to_json(names).unwrap()).unwrap();
    for (spec, engine, reference) in [
        ("commonfabric", &got[0], REFERENCE),
        ("commonfabric/cfc", &got[1], REFERENCE_CFC),
        ("commonfabric/cfc-authoring", &got[2], REFERENCE_CFC),
    ] {
        let missing: Vec<&&str> = reference
            .iter()
            .filter(|n| !engine.iter().any(|e| e == *n))
            .collect();
        assert!(missing.is_empty(), "{spec} lacks {missing:?}");
        // `check` reads the same list from the module's source.
        let known: Vec<String> = imports::api_exports(spec)
            .unwrap()
            .iter()
            .cloned()
            .collect();
        assert_eq!(&known, engine, "{spec}: check and the engine disagree");
    }
    assert!(got[3].is_empty(), "commonfabric/schema is types only");
    // `import cf from "commonfabric"` offers the same names (the default object is listed apart
    // from the named exports, so this keeps the two lists together).
    let defaults = sb.get(ns, "defaults").unwrap();
    let defaults: Vec<String> = serde_json::from_value(sb.to_json(defaults).unwrap()).unwrap();
    let missing: Vec<&&str> = REFERENCE
        .iter()
        .filter(|n| !defaults.iter().any(|d| d == *n))
        .collect();
    assert!(missing.is_empty(), "the default export lacks {missing:?}");
}

#[test]
fn api_subpaths_import_and_unknown_api_names_are_located() {
    // Subpath modules and type-only names pass.
    compile_one(
        r#"import { pattern, JSONSchema } from "commonfabric";
import { cfcAtom } from "commonfabric/cfc";
import type { Schema } from "commonfabric/schema";
const s: JSONSchema = {};
type P = Schema<{ type: "number" }>;
export default pattern<{ n: number }>(({ n }) => ({ n, s, atom: cfcAtom.user("u") }));
"#,
    );
    let d = compile_err(
        r#"import { pattern, lfit, Writeable } from "commonfabric";
const f = lfit((n: number) => n);
export default pattern<{ n: number }>(({ n }) => ({ n: f(n), w: new Writeable(0) }));
"#,
    );
    let got: Vec<(&str, u32, u32, &str)> = d
        .iter()
        .map(|d| (d.code, d.line, d.col, d.message.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (
                codes::IMPORT_UNKNOWN_EXPORT,
                1,
                19,
                "\"commonfabric\" does not export `lfit` in spacewake; did you mean `lift`?"
            ),
            (
                codes::IMPORT_UNKNOWN_EXPORT,
                1,
                25,
                "\"commonfabric\" does not export `Writeable` in spacewake; did you mean `Writable`?"
            ),
        ]
    );
}

/// A handler imported from another module of the program is a factory there: binding it in a
/// body is not wrapped in a derivation (the importer is analysed again once its imports are
/// known), while a plain helper imported beside it still is.
#[test]
fn a_handler_imported_from_a_sibling_module_binds_in_the_body() {
    let lib = r#"import { handler, Cell } from "commonfabric";
export const bump = handler<unknown, { count: Cell<number> }>((_e, { count }) => {
  count.set(count.get() + 1);
});
export function label(n: number): string { return `n=${n}`; }
"#;
    let main = r#"import { pattern, Default } from "commonfabric";
import { bump, label } from "./lib.ts";
export default pattern<{ count: Default<number, 0> }>(({ count }) => ({
  count,
  bump: bump({ count }),
  shown: label(count),
}));
"#;
    let p = compile("main.tsx", &mem(&[("main.tsx", main), ("lib.ts", lib)]))
        .unwrap_or_else(|d| panic!("{}", render(&d)));
    let js = &p.entry().js;
    assert!(js.contains("bump: bump({ count })"), "{js}");
    assert!(
        js.contains("__cf.computed(({ count }) => label(count)"),
        "{js}"
    );
}

#[test]
fn an_inline_jsx_event_handler_becomes_an_action_over_what_it_closes_over() {
    let js = body_js(
        r#"import { pattern, UI, Writable } from "commonfabric";
export default pattern(({ count, step }: { count: Writable<number>; step: number }) => ({
  [UI]: <cf-button onClick={() => count.set(count.get() + step)} title="t">+</cf-button>,
  plain: <cf-button onClick={() => console.log("hi")}>log</cf-button>,
}));
"#,
    );
    assert!(
        js.contains(
            "onClick: __cf.__inlineAction((__swEvent, { count, step }) => count.set(count.get() + step), { count, step }, [\"count\"])"
        ),
        "{js}"
    );
    assert!(
        js.contains("onClick: __cf.__inlineAction(() => console.log(\"hi\"))"),
        "{js}"
    );
}

#[test]
fn a_capture_is_a_cell_only_where_a_cell_method_is_called_on_it() {
    let js = body_js(
        r#"import { pattern, UI, Writable } from "commonfabric";
export default pattern(({ n, child }: { n: Writable<number>; child: { update: unknown } }) => ({
  [UI]: <cf-button onClick={() => n.increment(1)}>+</cf-button>,
  other: <cf-button onClick={() => (child.update as any).send({})}>send</cf-button>,
}));
"#,
    );
    assert!(
        js.contains("__cf.__inlineAction((__swEvent, { n }) => n.increment(1), { n }, [\"n\"])"),
        "{js}"
    );
    // `child.update.send()`: `update` is a field here, not a call of `update`.
    assert!(js.contains("{ child }, [])"), "{js}");
}

#[test]
fn a_data_file_may_hold_4_mib_and_not_a_byte_more() {
    let main = r#"import { dataFile, pattern } from "commonfabric";
const words = dataFile("./words.txt");
export default pattern(() => ({ n: words.length }));
"#;
    let fits = "a".repeat(super::MAX_DATA_FILE_BYTES);
    let p = compile(
        "main.tsx",
        &mem(&[("main.tsx", main), ("words.txt", &fits)]),
    )
    .unwrap_or_else(|d| panic!("{}", render(&d)));
    assert_eq!(p.data_files.len(), 1);
    let over = "a".repeat(super::MAX_DATA_FILE_BYTES + 1);
    let d = compile(
        "main.tsx",
        &mem(&[("main.tsx", main), ("words.txt", &over)]),
    )
    .unwrap_err();
    let text = render(&d);
    assert!(
        text.contains("DATA_FILE_TOO_LARGE") && text.contains("4194304"),
        "{text}"
    );
}
