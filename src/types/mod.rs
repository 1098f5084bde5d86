//! Type declarations for the authoring API, shipped with the binary:
//! `spacewake types DIR` writes `commonfabric.d.ts` (and a `tsconfig.json`
//! when the directory has none), so `tsc --noEmit` and an editor check
//! patterns against what this runtime exports.
//!
//! Invariant: the declarations' value exports are exactly the runtime's
//! (`compiler::imports::api_exports`, read from the engine's own module);
//! a test compares them, so neither can change alone.

use std::path::{Path, PathBuf};

/// `commonfabric.d.ts`: the modules `commonfabric`, its subpaths, the
/// global `JSX` namespace and the sandbox's globals.
pub const DECLARATIONS: &str = include_str!("commonfabric.d.ts");

/// The `tsconfig.json` written beside it when none exists.
pub const TSCONFIG: &str = include_str!("tsconfig.json");

/// What [`write`] did with one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    Created(PathBuf),
    Updated(PathBuf),
    Unchanged(PathBuf),
    /// An existing `tsconfig.json`, left as it is.
    KeptExisting(PathBuf),
}

/// Writes the declarations into `dir` (created if missing; an older
/// `commonfabric.d.ts` is replaced) and a `tsconfig.json` if there is none.
pub fn write(dir: &Path) -> std::io::Result<Vec<Written>> {
    std::fs::create_dir_all(dir)?;
    let dts = dir.join("commonfabric.d.ts");
    let first = match std::fs::read_to_string(&dts) {
        Ok(old) if old == DECLARATIONS => Written::Unchanged(dts),
        Ok(_) => {
            std::fs::write(&dts, DECLARATIONS)?;
            Written::Updated(dts)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::write(&dts, DECLARATIONS)?;
            Written::Created(dts)
        }
        Err(e) => return Err(e),
    };
    let cfg = dir.join("tsconfig.json");
    let second = if cfg.exists() {
        Written::KeptExisting(cfg)
    } else {
        std::fs::write(&cfg, TSCONFIG)?;
        Written::Created(cfg)
    };
    Ok(vec![first, second])
}

/// The value exports each `declare module "…"` of `source` declares (types
/// and interfaces left out; `export * from` another declared module
/// followed).
pub fn declared_value_exports(
    source: &str,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    use oxc_allocator::Allocator;
    use oxc_ast::ast::{Declaration, Statement};
    use oxc_parser::Parser;
    use oxc_span::SourceType;
    use std::collections::{BTreeMap, BTreeSet};
    let alloc = Allocator::default();
    let parsed = Parser::new(&alloc, source, SourceType::d_ts()).parse();
    let mut names: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut stars: Vec<(String, String)> = Vec::new();
    for stmt in &parsed.program.body {
        let Statement::TSExternalModuleDeclaration(m) = stmt else {
            continue;
        };
        let module = m.id.value.to_string();
        let out = names.entry(module.clone()).or_default();
        let Some(block) = &m.body else { continue };
        for s in &block.body {
            match s {
                Statement::ExportDeclaration(d) => match &d.declaration {
                    Declaration::VariableDeclaration(v) => {
                        for dec in &v.declarations {
                            for id in dec.id.get_binding_identifiers() {
                                out.insert(id.name.to_string());
                            }
                        }
                    }
                    Declaration::FunctionDeclaration(_)
                    | Declaration::ClassDeclaration(_)
                    | Declaration::TSEnumDeclaration(_) => {
                        if let Some(id) = d.declaration.id() {
                            out.insert(id.name.to_string());
                        }
                    }
                    _ => {}
                },
                Statement::ExportDefaultDeclaration(_) => {
                    out.insert("default".to_string());
                }
                Statement::ExportAllDeclaration(d) if d.exported.is_none() => {
                    stars.push((module.clone(), d.source.value.to_string()));
                }
                _ => {}
            }
        }
    }
    for (into, from) in stars {
        let mut inner = names.get(&from).cloned().unwrap_or_default();
        inner.remove("default");
        names.entry(into).or_default().extend(inner);
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declarations_export_exactly_the_runtime_values() {
        let declared = declared_value_exports(DECLARATIONS);
        for (spec, _) in std::iter::once(&("commonfabric", ""))
            .chain(crate::runtime::COMMONFABRIC_JS.subpaths.iter())
        {
            let runtime = crate::compiler::imports::api_exports(spec).expect(spec);
            let types = declared
                .get(*spec)
                .unwrap_or_else(|| panic!("no `declare module \"{spec}\"`"));
            let missing: Vec<_> = runtime.difference(types).collect();
            let extra: Vec<_> = types.difference(runtime).collect();
            assert!(
                missing.is_empty() && extra.is_empty(),
                "{spec}: declared but not exported at run time: {extra:?}; exported but not declared: {missing:?}"
            );
        }
        assert!(declared["commonfabric"].len() > 100);
    }

    #[test]
    fn types_writes_the_declarations_and_keeps_an_existing_tsconfig() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("patterns");
        let first = write(&d).unwrap();
        assert!(matches!(
            &first[..],
            [Written::Created(_), Written::Created(_)]
        ));
        assert_eq!(
            std::fs::read_to_string(d.join("commonfabric.d.ts")).unwrap(),
            DECLARATIONS
        );
        let cfg: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("tsconfig.json")).unwrap())
                .unwrap();
        assert_eq!(cfg["compilerOptions"]["noEmit"], true);
        std::fs::write(d.join("tsconfig.json"), "{}").unwrap();
        std::fs::write(d.join("commonfabric.d.ts"), "// old").unwrap();
        let again = write(&d).unwrap();
        assert!(matches!(
            &again[..],
            [Written::Updated(_), Written::KeptExisting(_)]
        ));
        assert_eq!(
            std::fs::read_to_string(d.join("tsconfig.json")).unwrap(),
            "{}"
        );
        assert!(matches!(write(&d).unwrap()[0], Written::Unchanged(_)));
    }
}
