//! Import policy and module naming.
//!
//! A pattern may import exactly two kinds of thing: the authoring API `"commonfabric"`, and its
//! own files by relative path (`./x`, `../x`, with or without `.ts`/`.tsx`). Everything else
//! (`"fs"`, `"npm:foo"`, URLs, bare names, absolute paths, `import()`) is a diagnostic, so a
//! pattern's whole program is known at compile time and can be hashed and cached.
//!
//! Invariants:
//! - paths are '/'-separated and lexically normalised ([`normalize`]); the filesystem is never
//!   consulted for symlinks or case, so the same sources always give the same names and hash;
//! - a module's canonical name is its path relative to the entry file's directory, starting with
//!   `./` or `../` (e.g. `./counter.tsx`, `./lib/util.ts`); emitted JS imports a sibling module
//!   by its path relative to the importer's own directory ([`module_name`] of the importer's
//!   directory), so a loader that registers each module at its canonical name under one root
//!   resolves a specifier by joining it to the importer's path, as `check` resolved it.

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use oxc_allocator::Allocator;
use oxc_ast::ast::{Declaration, ImportDeclarationSpecifier, ModuleExportName, Program, Statement};
use oxc_parser::Parser;
use oxc_semantic::SymbolId;
use oxc_span::{GetSpan, SourceType, Span};

use super::diagnostics::{codes, RawDiag};

/// The one non-relative module a pattern may import (with its subpaths, [`is_api_subpath`]).
pub const COMMONFABRIC: &str = "commonfabric";

/// How an import specifier is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpecKind {
    Commonfabric,
    /// `"commonfabric/cfc"` and the API's other subpath modules.
    ApiSubpath,
    Relative,
    Forbidden,
}

/// Whether `spec` names one of the API's subpath modules the runtime provides.
pub(crate) fn is_api_subpath(spec: &str) -> bool {
    crate::runtime::COMMONFABRIC_JS
        .subpaths
        .iter()
        .any(|(name, _)| *name == spec)
}

pub(crate) fn classify(spec: &str) -> SpecKind {
    if spec == COMMONFABRIC {
        SpecKind::Commonfabric
    } else if is_api_subpath(spec) {
        SpecKind::ApiSubpath
    } else if spec.starts_with("./") || spec.starts_with("../") {
        SpecKind::Relative
    } else {
        SpecKind::Forbidden
    }
}

/// Lexically normalise a '/'-separated path: drop `.` and empty segments, fold `..`.
pub fn normalize(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut out: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => match out.last() {
                Some(&last) if last != ".." => {
                    out.pop();
                }
                // Above the root of an absolute path there is nothing: stay at the root.
                _ if absolute => {}
                _ => out.push(".."),
            },
            s => out.push(s),
        }
    }
    let joined = out.join("/");
    if absolute {
        format!("/{joined}")
    } else {
        joined
    }
}

/// The directory part of a normalised path ("" for a bare file name).
pub(crate) fn dir_of(path: &str) -> String {
    match path.rfind('/') {
        Some(0) => "/".to_string(),
        Some(i) => path[..i].to_string(),
        None => String::new(),
    }
}

pub(crate) fn join(dir: &str, rel: &str) -> String {
    if dir.is_empty() {
        normalize(rel)
    } else {
        normalize(&format!("{dir}/{rel}"))
    }
}

/// Canonical module name of `path` relative to `root_dir` (both normalised).
pub(crate) fn module_name(root_dir: &str, path: &str) -> String {
    let segs = |p: &str| -> Vec<String> {
        p.split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    let root = segs(root_dir);
    let target = segs(path);
    let common = root
        .iter()
        .zip(target.iter())
        .take_while(|(a, b)| a == b)
        .count();
    let ups = root.len() - common;
    let rest = target[common..].join("/");
    if ups == 0 {
        format!("./{rest}")
    } else {
        format!("{}{rest}", "../".repeat(ups))
    }
}

/// The files a relative specifier may name, in the order they are tried, or `Err` with a
/// sentence when the extension can never be a pattern module.
pub(crate) fn candidates(importer_dir: &str, spec: &str) -> Result<Vec<String>, String> {
    if spec.ends_with(".ts") || spec.ends_with(".tsx") {
        return Ok(vec![join(importer_dir, spec)]);
    }
    let last = spec.rsplit('/').next().unwrap_or(spec);
    if let Some((_, ext)) = last.rsplit_once('.') {
        if matches!(
            ext,
            "js" | "jsx" | "mjs" | "cjs" | "mts" | "cts" | "json" | "wasm" | "css"
        ) {
            return Err(format!(
                "cannot import \"{spec}\": a pattern may only import its own .ts or .tsx files \
                 (write the path with .ts/.tsx or without an extension)"
            ));
        }
    }
    Ok(vec![
        join(importer_dir, &format!("{spec}.ts")),
        join(importer_dir, &format!("{spec}.tsx")),
    ])
}

/// A relative import found in a module, to be resolved by the driver.
#[derive(Debug, Clone)]
pub(crate) struct ImportRequest {
    pub spec: String,
    /// Span of the string literal, quotes included: where the rewrite and diagnostics go.
    pub span: Span,
}

/// A name bound by an import from a relative module, as type resolution needs it.
#[derive(Debug, Clone)]
pub(crate) struct NamedImport {
    pub local: String,
    pub spec: String,
    /// The exported name asked for (`default` for a default import, `*` for a namespace).
    pub imported: String,
    /// The name asked for, as written.
    pub span: Span,
    /// The local binding, when the import is not type-only.
    pub symbol: Option<SymbolId>,
    /// Whether the module uses the binding as a value (set by the analysis;
    /// a name used only as a type is erased, as TypeScript erases it).
    pub as_value: bool,
}

/// Everything the import statements of one module say.
#[derive(Debug, Default)]
pub(crate) struct ModuleImports {
    pub requests: Vec<ImportRequest>,
    /// Local symbol → name imported from commonfabric (`pattern`, `SCHEDULE`, ...).
    pub cf_symbols: HashMap<SymbolId, String>,
    /// Local name → name imported from commonfabric, for type references (which have no symbol
    /// after type-only imports are considered).
    pub cf_locals: HashMap<String, String>,
    pub named: Vec<NamedImport>,
    /// Every named import from the API or a subpath of it, to check against what the module
    /// exports.
    pub api: Vec<ApiImport>,
    pub diags: Vec<RawDiag>,
}

/// A name imported from `"commonfabric"` or one of its subpaths.
#[derive(Debug, Clone)]
pub(crate) struct ApiImport {
    pub symbol: Option<SymbolId>,
    pub spec: String,
    pub imported: String,
    /// The imported name as written (`x` of `import { x as y }`).
    pub span: Span,
}

fn export_name(n: &ModuleExportName) -> String {
    match n {
        ModuleExportName::IdentifierName(i) => i.name.to_string(),
        ModuleExportName::IdentifierReference(i) => i.name.to_string(),
        ModuleExportName::StringLiteral(s) => s.value.to_string(),
    }
}

/// Check a module specifier; relative ones become requests.
fn check_spec(out: &mut ModuleImports, spec: &str, span: Span) {
    match classify(spec) {
        SpecKind::Commonfabric | SpecKind::ApiSubpath => {}
        SpecKind::Relative => out.requests.push(ImportRequest {
            spec: spec.to_string(),
            span,
        }),
        SpecKind::Forbidden => out.diags.push(RawDiag::new(
            codes::IMPORT_FORBIDDEN,
            span,
            format!(
                "cannot import \"{spec}\": a pattern may only import \"commonfabric\" (and {}) and \
                 its own files by relative path (./ or ../)",
                api_subpaths_text()
            ),
        )),
    }
}

/// Collect and police the static imports and re-exports of a module.
pub(crate) fn collect(program: &Program) -> ModuleImports {
    let mut out = ModuleImports::default();
    for stmt in &program.body {
        match stmt {
            Statement::ImportDeclaration(decl) => {
                let spec = decl.source.value.as_str();
                check_spec(&mut out, spec, decl.source.span);
                let is_cf = spec == COMMONFABRIC;
                let is_api = is_cf || is_api_subpath(spec);
                for s in decl.specifiers.iter().flatten() {
                    let type_only = decl.import_kind.is_type()
                        || matches!(s, ImportDeclarationSpecifier::ImportSpecifier(s) if s.import_kind.is_type());
                    let (local, imported) = match s {
                        ImportDeclarationSpecifier::ImportSpecifier(s) => {
                            if is_api && !type_only {
                                out.api.push(ApiImport {
                                    symbol: s.local.symbol_id.get(),
                                    spec: spec.to_string(),
                                    imported: export_name(&s.imported),
                                    span: s.imported.span(),
                                });
                            }
                            (&s.local, export_name(&s.imported))
                        }
                        ImportDeclarationSpecifier::ImportDefaultSpecifier(s) => {
                            (&s.local, "default".to_string())
                        }
                        ImportDeclarationSpecifier::ImportNamespaceSpecifier(s) => {
                            (&s.local, "*".to_string())
                        }
                    };
                    if is_cf {
                        if let Some(sym) = local.symbol_id.get() {
                            out.cf_symbols.insert(sym, imported.clone());
                        }
                        out.cf_locals.insert(local.name.to_string(), imported);
                    } else if !is_api {
                        out.named.push(NamedImport {
                            local: local.name.to_string(),
                            spec: spec.to_string(),
                            imported,
                            span: s.span(),
                            symbol: local.symbol_id.get().filter(|_| !type_only),
                            as_value: false,
                        });
                    }
                }
            }
            Statement::ExportFromDeclaration(decl) => {
                check_spec(&mut out, decl.source.value.as_str(), decl.source.span);
            }
            Statement::ExportAllDeclaration(decl) => {
                check_spec(&mut out, decl.source.value.as_str(), decl.source.span);
            }
            _ => {}
        }
    }
    out
}

fn api_subpaths_text() -> String {
    crate::runtime::COMMONFABRIC_JS
        .subpaths
        .iter()
        .map(|(n, _)| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The names `spec` (`"commonfabric"` or a subpath) exports at run time, read from the runtime
/// module's own source by the parser, so `check` and the engine cannot disagree.
pub(crate) fn api_exports(spec: &str) -> Option<&'static BTreeSet<String>> {
    static ALL: OnceLock<HashMap<&'static str, BTreeSet<String>>> = OnceLock::new();
    let all = ALL.get_or_init(|| {
        let js = &crate::runtime::COMMONFABRIC_JS;
        // The public module re-exports the internal one by name (`export { .. } from`), so
        // its own text lists what it exports.
        let mut sources: Vec<(&'static str, &'static str)> = vec![(COMMONFABRIC, js.api)];
        sources.extend(js.subpaths.iter().copied());
        sources
            .iter()
            .map(|(name, _)| (*name, module_exports(name, &sources, 0)))
            .collect()
    });
    all.get(spec)
}

/// The export names of module `name` among `sources`, following `export *` and
/// `export {..} from` between them.
fn module_exports(
    name: &str,
    sources: &[(&'static str, &'static str)],
    depth: usize,
) -> BTreeSet<String> {
    let Some((_, src)) = sources.iter().find(|(n, _)| *n == name) else {
        return BTreeSet::new();
    };
    if depth > 4 {
        return BTreeSet::new();
    }
    let alloc = Allocator::default();
    let parsed = Parser::new(&alloc, src, SourceType::mjs()).parse();
    let declared = declared_exports(&parsed.program);
    let mut out = declared.names;
    for star in declared.stars {
        let mut inner = module_exports(&star, sources, depth + 1);
        inner.remove("default");
        out.extend(inner);
    }
    out
}

/// The names a module's own statements export, and the sources of its
/// `export * from` statements (whose names only those modules know).
#[derive(Debug, Default, Clone)]
pub(crate) struct DeclaredExports {
    pub names: BTreeSet<String>,
    pub stars: Vec<String>,
}

pub(crate) fn declared_exports(program: &Program) -> DeclaredExports {
    let mut out = DeclaredExports::default();
    for stmt in &program.body {
        match stmt {
            Statement::ExportDeclaration(d) => match &d.declaration {
                Declaration::VariableDeclaration(v) => {
                    for dec in &v.declarations {
                        for id in dec.id.get_binding_identifiers() {
                            out.names.insert(id.name.to_string());
                        }
                    }
                }
                decl => {
                    if let Some(id) = decl.id() {
                        out.names.insert(id.name.to_string());
                    }
                }
            },
            Statement::ExportNamedDeclaration(d) => {
                for s in &d.specifiers {
                    out.names.insert(export_name(&s.exported));
                }
            }
            Statement::ExportFromDeclaration(d) => {
                for s in &d.specifiers {
                    out.names.insert(export_name(&s.exported));
                }
            }
            Statement::ExportDefaultDeclaration(_) => {
                out.names.insert("default".to_string());
            }
            Statement::ExportAllDeclaration(d) => match &d.exported {
                Some(n) => {
                    out.names.insert(export_name(n));
                }
                None => out.stars.push(d.source.value.to_string()),
            },
            _ => {}
        }
    }
    out
}

/// The closest of `names` to `name`, when it is close enough to be a likely misspelling.
pub(crate) fn did_you_mean<'a>(
    name: &str,
    names: impl Iterator<Item = &'a String>,
) -> Option<&'a String> {
    let lower = name.to_lowercase();
    names
        // A swap of two neighbours is one edit (optimal string alignment): `lfit` → `lift`.
        .map(|n| (strsim::osa_distance(&lower, &n.to_lowercase()), n))
        .filter(|(d, n)| *d <= (n.chars().count() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n)
}

/// `import(...)` is refused wherever it appears: the module graph must be static.
pub(crate) fn dynamic_import_diag(span: Span) -> RawDiag {
    RawDiag::new(
        codes::IMPORT_DYNAMIC,
        span,
        "dynamic import() is not allowed in a pattern; import modules statically at the top of the file",
    )
}

/// Used by the driver for the export map of a module (`export { a as b }`).
pub(crate) fn export_specifiers(program: &Program) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for stmt in &program.body {
        if let Statement::ExportNamedDeclaration(decl) = stmt {
            for s in &decl.specifiers {
                out.push((export_name(&s.local), export_name(&s.exported)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_folds_dots() {
        assert_eq!(normalize("a/./b/../c.ts"), "a/c.ts");
        assert_eq!(normalize("../x/../../y.ts"), "../../y.ts");
        assert_eq!(normalize("/a/../../b"), "/b");
        assert_eq!(normalize("./p.tsx"), "p.tsx");
    }

    #[test]
    fn module_names_are_relative_to_entry_dir() {
        assert_eq!(module_name("fx/valid", "fx/valid/a.tsx"), "./a.tsx");
        assert_eq!(module_name("fx/valid", "fx/valid/lib/u.ts"), "./lib/u.ts");
        assert_eq!(module_name("fx/valid", "fx/shared/u.ts"), "../shared/u.ts");
        assert_eq!(module_name("", "a.tsx"), "./a.tsx");
    }

    #[test]
    fn specifier_policy() {
        assert_eq!(classify("commonfabric"), SpecKind::Commonfabric);
        assert_eq!(classify("./x"), SpecKind::Relative);
        assert_eq!(classify("../x.ts"), SpecKind::Relative);
        for bad in [
            "fs",
            "npm:foo",
            "https://x/y.ts",
            "lodash",
            "/abs.ts",
            "node:fs",
        ] {
            assert_eq!(classify(bad), SpecKind::Forbidden, "{bad}");
        }
        assert_eq!(candidates("d", "./x").unwrap(), vec!["d/x.ts", "d/x.tsx"]);
        assert_eq!(candidates("d", "../x.tsx").unwrap(), vec!["x.tsx"]);
        assert!(candidates("d", "./x.js").is_err());
    }
}
