//! The pattern compiler: TypeScript/TSX patterns in, plain JavaScript ES modules plus the
//! metadata the runtime needs out, without running any pattern code.
//!
//! # API
//!
//! ```ignore
//! let program = compile("patterns/counter.tsx", &FsSource::default())?;   // Err(Vec<Diagnostic>)
//! eprintln!("{}", render(&diags));                                       // file:line:col: error[CODE]: ...
//! let cache = CompileCache::new();
//! let shared: Arc<CompiledProgram> = cache.compile("patterns/counter.tsx", &src)?;
//! ```
//!
//! - [`compile`] reads the entry and, recursively, its relative imports through a
//!   [`ModuleSource`] ([`FsSource`], [`MemorySource`]), validates everything, and returns a
//!   [`CompiledProgram`] whose `modules` list the entry first. All diagnostics of all modules
//!   are returned together, ordered by module then position.
//! - [`CompiledProgram::hash`] is blake3 over a compiler-version tag and every module's canonical
//!   name and source text, in module order: stable across runs and machines.
//! - [`CompileCache`] is a host-wide cache keyed by that hash.
//!
//! # The emitted-JavaScript contract (what `commonfabric` must provide)
//!
//! Each [`CompiledModule::js`] is an ES module. It imports only `"commonfabric"` and sibling
//! modules, each by its path relative to the importing module's folder (`"../lib/util.ts"`
//! from `./ui/view.tsx`); a loader that places every module at its canonical name under one
//! root (see [`imports`]) resolves a specifier by joining it to the importer's path. Types
//! are gone.
//!
//! - **JSX** is lowered with the classic runtime to `h(tag, props, ...children)`: `tag` is a
//!   string for intrinsic elements (`"div"`) or the referenced value for capitalised tags
//!   (a pattern, a function); `props` is an object or `null`; children are the already-lowered
//!   children (strings for text, with JSX whitespace rules applied). Fragments are
//!   `h(h.fragment, null, ...children)`, so `h` must carry a `fragment` property (any sentinel
//!   the runtime recognises). `h` is imported from `"commonfabric"`; the compiler injects
//!   `import { h } from "commonfabric"` when a module uses JSX without importing it. The runtime
//!   implements `h` to return plain data `{ type: "vnode", name, props, children }`.
//! - **Schemas** (see [`types`] for the dialect) are appended as one extra trailing argument, an
//!   object literal, to calls whose types are known, from type arguments or, failing those, from
//!   the callback's parameter and return annotations:
//!   - `pattern(fn, { argument, result? })`, `pattern("name", fn, { argument, result? })`;
//!   - `handler(fn, { event?, context? })`;
//!   - `lift(fn, { argument?, result? })`.
//!
//!   Untyped calls get no extra argument. The meta argument is always a plain object and always
//!   follows the function, so `typeof last === "object"` after the function identifies it.
//!   `asCell: true` on a context/argument property means "pass a cell", `asStream: true` a
//!   stream, `default` the value to use when the argument omits the property. The same objects
//!   are listed in [`CompiledModule::schemas`].
//! - **Closures**: `computed`, `derive` and `action` calls inside a pattern body whose function
//!   literal reads reactive names of that body get their captures made explicit (see
//!   [`closures`]): `computed(({ a, b }) => ..., { a, b })`,
//!   `derive(input, (v, { a }) => ..., { a })`, `action((event, { a }) => ..., { a })`. The
//!   trailing object maps each captured name to its pattern-body value (cell/reference); the
//!   runtime calls the function with an object of the same keys in the position shown:
//!   current values for `computed`/`derive` (recording reads), writable cells for `action`.
//!   Calls without captures are emitted unchanged.
//! - **Reserved keys**: `[NAME]`, `[UI]`, `[SCHEDULE]` stay computed keys whose values come from
//!   commonfabric's exports (`"$NAME"`, `"$UI"`, `"$SCHEDULE"`). A validated schedule is also
//!   reported in [`PatternInfo::schedules`] so the runtime can cross-check the stored result.

pub mod cache;
mod closures;
pub mod diagnostics;
mod emit;
pub mod imports;
mod lower;
pub mod schedule;
pub mod source;
mod types;

mod analyze;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};

use serde::Serialize;

pub use cache::CompileCache;
pub use diagnostics::{codes, render, Diagnostic};
pub use emit::{JSX_FACTORY, JSX_FRAGMENT};
pub use source::{FsSource, MemorySource, ModuleSource, SourceFile};
pub(crate) use types::json_type;

use analyze::{Analysis, HBinding};
use diagnostics::{line_col, RawDiag};
use types::{ImportTarget, SchemaGen, TypeScope};

/// Bumped whenever emitted output changes for the same input, so cached programs keyed by
/// [`CompiledProgram::hash`] never outlive the compiler that produced them.
pub const COMPILER_VERSION: &str = "spacewake-compiler/1";

/// A program may have at most this many modules; the import that would add
/// one more is a `TOO_MANY_MODULES` diagnostic.
pub const MAX_MODULES: usize = 512;

/// Bytes of one file a program attaches with `dataFile` (its text is inlined into the emitted
/// module, and stored with the program).
pub const MAX_DATA_FILE_BYTES: usize = 4 << 20;

/// A whole compiled pattern program.
#[derive(Debug, Clone, Serialize)]
pub struct CompiledProgram {
    /// Modules, entry first, then in discovery order.
    pub modules: Vec<CompiledModule>,
    /// Files the program reads with `dataFile`, by canonical name, in discovery order.
    pub data_files: Vec<DataFile>,
    /// blake3 of [`COMPILER_VERSION`] and every module's name and source, in order, then every
    /// data file's name and text.
    #[serde(serialize_with = "hex32")]
    pub hash: [u8; 32],
}

fn hex32<S: serde::Serializer>(h: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&to_hex(h))
}

fn to_hex(h: &[u8; 32]) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

impl CompiledProgram {
    /// The entry module.
    pub fn entry(&self) -> &CompiledModule {
        &self.modules[0]
    }

    /// A module by canonical name (what emitted imports use as specifier).
    pub fn module(&self, name: &str) -> Option<&CompiledModule> {
        self.modules.iter().find(|m| m.name == name)
    }

    pub fn hash_hex(&self) -> String {
        to_hex(&self.hash)
    }
}

/// A file a program attaches with `dataFile("...")`.
#[derive(Debug, Clone, Serialize)]
pub struct DataFile {
    /// Canonical name, relative to the entry's directory like a module's (`./data/x.json`).
    pub name: String,
    pub text: String,
}

/// One compiled module.
#[derive(Debug, Clone, Serialize)]
pub struct CompiledModule {
    /// Canonical module id: path relative to the entry's directory, `./`- or `../`-prefixed.
    pub name: String,
    /// The path the source was read from (what diagnostics print).
    pub path: String,
    /// The original TypeScript/TSX source.
    pub source: String,
    /// Plain JavaScript ES module.
    pub js: String,
    /// Canonical names of the sibling modules this one imports.
    pub imports: Vec<String>,
    /// Every `pattern(...)` call in the module, in source order.
    pub patterns: Vec<PatternInfo>,
    /// Every schema argument the compiler appended, in source order.
    pub schemas: Vec<CallSchema>,
    /// Module-level `const`s whose value the compiler evaluated (literals):
    /// what a test runner reads of a test module (`fetchMocks`).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub consts: std::collections::BTreeMap<String, serde_json::Value>,
}

/// The schema argument appended to one `pattern`/`handler`/`lift` call.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CallSchema {
    /// `pattern`, `handler` or `lift`.
    pub api: &'static str,
    pub line: u32,
    pub col: u32,
    /// Exactly the object appended to the call, e.g. `{"argument": {...}, "result": {...}}`.
    pub meta: serde_json::Value,
}

/// Static facts about one `pattern(...)` call.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PatternInfo {
    /// The name given as `pattern("name", fn)`, if any.
    pub name: Option<String>,
    /// The module-level `const` the call initialises, if any.
    pub binding: Option<String>,
    /// Export names of the pattern (`default` for `export default pattern(...)`).
    pub exports: Vec<String>,
    pub line: u32,
    pub col: u32,
    /// One entry per returned root object that declares `[SCHEDULE]` (usually zero or one).
    pub schedules: Vec<ScheduleDecl>,
}

/// A validated `[SCHEDULE]` declaration.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ScheduleDecl {
    pub line: u32,
    pub col: u32,
    pub entries: Vec<ScheduleEntryInfo>,
}

/// One validated schedule entry.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ScheduleEntryInfo {
    /// Position in the `[SCHEDULE]` list.
    pub index: u32,
    /// 0 for a calendar or one-off entry.
    pub interval_minutes: u32,
    /// A calendar entry's cron expression, as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// A calendar entry's zone, as written (`None`: UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// A one-off entry's field, as written (`state.remindAt`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Source text of the callback expression, e.g. `refresh({ url, items })`.
    pub callback: String,
    /// Byte range of the callback expression in the module source.
    pub callback_span: (u32, u32),
    pub line: u32,
    pub col: u32,
}

/// A planned replacement of `start..end` in the original source (an insertion when empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edit {
    pub start: u32,
    pub end: u32,
    pub text: String,
}

impl Edit {
    pub(crate) fn replace(span: oxc_span::Span, text: String) -> Self {
        Self {
            start: span.start,
            end: span.end,
            text,
        }
    }
    pub(crate) fn insert(at: u32, text: String) -> Self {
        Self {
            start: at,
            end: at,
            text,
        }
    }
}

/// blake3 of the compiler version and each (canonical name, source) in order. Lengths are
/// framed so no two different source sets hash alike by concatenation.
pub fn hash_sources<'a>(modules: impl IntoIterator<Item = (&'a str, &'a str)>) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(COMPILER_VERSION.as_bytes());
    for (name, text) in modules {
        for part in [name, text] {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
    }
    *h.finalize().as_bytes()
}

/// A module read and analysed by pass 1.
struct Unit {
    path: String,
    name: String,
    text: String,
    analysis: Analysis,
    /// Import specifier → module index.
    resolved: HashMap<String, usize>,
    imports: Vec<String>,
    schemas: Vec<CallSchema>,
    /// (path, canonical name, text) of each data file the module reads.
    data: Vec<(String, String, String)>,
}

/// The sources a compile read, by normalised path, with their canonical names, in module order.
pub(crate) type SourceSet = Vec<(String, String, String)>;

/// Compile the pattern program rooted at `entry`.
pub fn compile(entry: &str, src: &dyn ModuleSource) -> Result<CompiledProgram, Vec<Diagnostic>> {
    compile_with_sources(entry, src).map(|(p, _)| p)
}

/// [`compile`], also returning the (path, name, text) of every module read.
pub(crate) fn compile_with_sources(
    entry: &str,
    src: &dyn ModuleSource,
) -> Result<(CompiledProgram, SourceSet), Vec<Diagnostic>> {
    let mut units = load(entry, src)?;
    check_nested_schedules(&units)?;
    plan_late_edits(&mut units)?;
    // Modules, then the data files not already listed (by path), in discovery order: what the
    // hash covers and what the compile cache re-reads.
    let mut sources: SourceSet = units
        .iter()
        .map(|u| (u.path.clone(), u.name.clone(), u.text.clone()))
        .collect();
    let module_count = sources.len();
    for u in &units {
        for (path, name, text) in &u.data {
            if !sources[module_count..].iter().any(|(p, _, _)| p == path) {
                sources.push((path.clone(), name.clone(), text.clone()));
            }
        }
    }
    let hash = hash_sources(sources.iter().map(|(_, n, t)| (n.as_str(), t.as_str())));
    let data_files = sources[module_count..]
        .iter()
        .map(|(_, name, text)| DataFile {
            name: name.clone(),
            text: text.clone(),
        })
        .collect();
    let mut modules = Vec::with_capacity(units.len());
    let mut diags = vec![];
    for u in &units {
        match emit_unit(u) {
            Ok(m) => modules.push(m),
            Err(mut d) => diags.append(&mut d),
        }
    }
    if !diags.is_empty() {
        return Err(diags);
    }
    Ok((
        CompiledProgram {
            modules,
            data_files,
            hash,
        },
        sources,
    ))
}

/// Read and analyse the entry and everything it imports relatively, breadth first.
fn load(entry: &str, src: &dyn ModuleSource) -> Result<Vec<Unit>, Vec<Diagnostic>> {
    let entry_path = imports::normalize(entry);
    let root_dir = imports::dir_of(&entry_path);
    let text = src.read(&entry_path).map_err(|e| {
        vec![Diagnostic::at(
            codes::MODULE_UNREADABLE,
            entry,
            "",
            (0, 0),
            format!("cannot read pattern file: {e}"),
        )]
    })?;
    let mut pending: Vec<(String, String)> = vec![(entry_path.clone(), text)];
    let mut index: HashMap<String, usize> = HashMap::from([(entry_path, 0)]);
    let mut units: Vec<Unit> = vec![];
    let mut diags: Vec<Diagnostic> = vec![];
    while units.len() < pending.len() {
        let i = units.len();
        let (path, text) = pending[i].clone();
        let mut analysis = analyze::analyze(i, &path, &text);
        let mut resolved = HashMap::new();
        let mut deps = vec![];
        let dir = imports::dir_of(&path);
        for req in std::mem::take(&mut analysis.requests) {
            let found = match imports::candidates(&dir, &req.spec) {
                Err(msg) => {
                    analysis
                        .diags
                        .push(RawDiag::new(codes::IMPORT_EXTENSION, req.span, msg));
                    continue;
                }
                Ok(cands) => {
                    let mut found = None;
                    let mut too_many = false;
                    for c in &cands {
                        if let Some(&j) = index.get(c) {
                            found = Some(j);
                            break;
                        }
                        if let Ok(t) = src.read(c) {
                            if pending.len() >= MAX_MODULES {
                                too_many = true;
                                break;
                            }
                            let j = pending.len();
                            pending.push((c.clone(), t));
                            index.insert(c.clone(), j);
                            found = Some(j);
                            break;
                        }
                    }
                    if too_many {
                        analysis.diags.push(RawDiag::new(
                            codes::TOO_MANY_MODULES,
                            req.span,
                            format!(
                                "this import would be module {} of the program; a program may \
                                 have at most {MAX_MODULES} modules",
                                MAX_MODULES + 1
                            ),
                        ));
                        continue;
                    }
                    found.ok_or(cands)
                }
            };
            match found {
                Ok(j) => {
                    let name = imports::module_name(&root_dir, &pending[j].0);
                    analysis
                        .edits
                        .push(specifier_edit(&dir, &pending[j].0, req.span));
                    resolved.insert(req.spec.clone(), j);
                    if !deps.contains(&name) {
                        deps.push(name);
                    }
                }
                Err(cands) => {
                    let looked: Vec<String> = cands
                        .iter()
                        .map(|c| imports::module_name(&dir, c))
                        .collect();
                    analysis.diags.push(RawDiag::new(
                        codes::IMPORT_NOT_FOUND,
                        req.span,
                        format!(
                            "cannot find module \"{}\" (looked for {})",
                            req.spec,
                            looked.join(" and ")
                        ),
                    ));
                }
            }
        }
        let data = attach_data_files(&mut analysis, &dir, &root_dir, src);
        let mut raw = std::mem::take(&mut analysis.diags);
        raw.sort_by_key(|d| (d.start, d.end));
        diags.extend(
            raw.into_iter()
                .map(|d| Diagnostic::from_raw(d, &path, &text)),
        );
        let name = imports::module_name(&root_dir, &path);
        units.push(Unit {
            path,
            name,
            text,
            analysis,
            resolved,
            imports: deps,
            schemas: vec![],
            data,
        });
    }
    diags.extend(unknown_local_imports(&units));
    if !diags.is_empty() {
        return Err(diags);
    }
    reanalyze_importers_of_factories(&mut units, &pending)?;
    Ok(units)
}

/// Named imports, used as values, of a name the program's own module does not export: the
/// engine would refuse to link the program. A module with an `export *` is taken at its word.
fn unknown_local_imports(units: &[Unit]) -> Vec<Diagnostic> {
    let mut out = vec![];
    for u in units {
        for n in u.analysis.named_imports.iter().filter(|n| n.as_value) {
            let Some(&j) = u.resolved.get(&n.spec) else {
                continue;
            };
            let exports = &units[j].analysis.export_names;
            if n.imported == "*" || !exports.stars.is_empty() || exports.names.contains(&n.imported)
            {
                continue;
            }
            let hint = match imports::did_you_mean(&n.imported, exports.names.iter()) {
                Some(close) => format!("; did you mean `{close}`?"),
                None => String::new(),
            };
            let what = if n.imported == "default" {
                "a default export".to_string()
            } else {
                format!("`{}`", n.imported)
            };
            out.push(Diagnostic::from_raw(
                RawDiag::new(
                    codes::IMPORT_UNKNOWN_EXPORT,
                    n.span,
                    format!("\"{}\" does not export {what}{hint}", n.spec),
                ),
                &u.path,
                &u.text,
            ));
        }
    }
    out
}

/// A module is analysed before the modules it imports, so a handler or lift it imports from one
/// of them looks like a plain function call, which lowering would wrap in a derivation. Once
/// every module is known, each module that imports such a factory is analysed again, knowing.
fn reanalyze_importers_of_factories(
    units: &mut [Unit],
    pending: &[(String, String)],
) -> Result<(), Vec<Diagnostic>> {
    let root_dir = imports::dir_of(&units[0].path);
    let mut diags = vec![];
    for i in 0..units.len() {
        let imported: HashSet<String> = units[i]
            .analysis
            .named_imports
            .iter()
            .filter(|n| {
                units[i]
                    .resolved
                    .get(&n.spec)
                    .is_some_and(|&j| units[j].analysis.builder_exports.contains(&n.imported))
            })
            .map(|n| n.local.clone())
            .collect();
        if imported.is_empty() {
            continue;
        }
        let u = &units[i];
        let mut analysis = analyze::analyze_knowing(i, &u.path, &u.text, &imported);
        let dir = imports::dir_of(&u.path);
        for req in std::mem::take(&mut analysis.requests) {
            if let Some(&j) = u.resolved.get(&req.spec) {
                analysis
                    .edits
                    .push(specifier_edit(&dir, &pending[j].0, req.span));
            }
        }
        // The data files were read in the first pass: attach the same texts.
        let read = u
            .data
            .iter()
            .fold(MemorySource::new(), |s, (path, _, text)| s.with(path, text));
        attach_data_files(&mut analysis, &dir, &root_dir, &read);
        let raw = std::mem::take(&mut analysis.diags);
        diags.extend(
            raw.into_iter()
                .map(|d| Diagnostic::from_raw(d, &u.path, &u.text)),
        );
        units[i].analysis = analysis;
    }
    if diags.is_empty() {
        Ok(())
    } else {
        Err(diags)
    }
}

/// The edit that makes an import of `target` from a module in `dir` name it by its path relative
/// to the importer's own folder: what any loader that resolves relative imports by path (the
/// engine's, at the module's registered path) finds, wherever in the program's tree the importer
/// sits.
fn specifier_edit(dir: &str, target: &str, span: oxc_span::Span) -> Edit {
    let spec = imports::module_name(dir, target);
    Edit::replace(
        span,
        serde_json::to_string(&spec).expect("string serialises"),
    )
}

/// Reads the files a module's `dataFile` calls name (relative to the module's directory `dir`)
/// and puts each text in place of its call; returns (path, canonical name, text) of each.
fn attach_data_files(
    analysis: &mut Analysis,
    dir: &str,
    root_dir: &str,
    src: &dyn ModuleSource,
) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = vec![];
    for call in std::mem::take(&mut analysis.data_files) {
        // As the reference: relative to the module, or with a leading `/` to the program's
        // root (here the entry's folder), never the file system's.
        let path = match call.path.strip_prefix('/') {
            Some(rooted) => imports::join(root_dir, &format!("./{rooted}")),
            None => imports::join(dir, &call.path),
        };
        let name = imports::module_name(root_dir, &path);
        // `deploy` uploads what a program attaches: a pattern from elsewhere must not be able to
        // attach the deployer's other files (`../../.ssh/id_ed25519`, `/../etc/passwd`, `.env`).
        if call.path.starts_with("//")
            || name.starts_with("../")
            || name.split('/').any(|s| s.starts_with('.') && s != ".")
        {
            analysis.diags.push(RawDiag::new(
                codes::DATA_FILE_FORBIDDEN,
                call.arg,
                format!(
                    "cannot attach data file \"{}\": a program attaches only files inside its \
                     entry's folder (a path relative to the module, or from `/`, the entry's \
                     folder), and no hidden ones",
                    call.path
                ),
            ));
            continue;
        }
        let text = match src.read(&path) {
            Ok(t) => t,
            Err(e) => {
                analysis.diags.push(RawDiag::new(
                    codes::DATA_FILE_NOT_FOUND,
                    call.arg,
                    format!(
                        "cannot attach data file \"{}\" ({}): {e}",
                        call.path,
                        imports::module_name(dir, &path)
                    ),
                ));
                continue;
            }
        };
        if text.len() > MAX_DATA_FILE_BYTES {
            analysis.diags.push(RawDiag::new(
                codes::DATA_FILE_TOO_LARGE,
                call.arg,
                format!(
                    "data file \"{}\" has {} bytes; a program may attach files of at most {} \
                     bytes",
                    call.path,
                    text.len(),
                    MAX_DATA_FILE_BYTES
                ),
            ));
            continue;
        }
        let literal = serde_json::to_string(&text).expect("string serialises");
        analysis.edits.push(Edit::replace(call.call, literal));
        if !out.iter().any(|(p, _, _)| *p == path) {
            out.push((path, name, text));
        }
    }
    out
}

/// A pattern that declares `[SCHEDULE]`, called inside another pattern's
/// body (in its own module or through an import): only a piece's own result
/// is indexed, so its schedule would be stored and never fire.
fn check_nested_schedules(units: &[Unit]) -> Result<(), Vec<Diagnostic>> {
    fn scheduled(u: &Unit, local: Option<&str>, exported: Option<&str>) -> bool {
        u.analysis.patterns.iter().any(|p| {
            !p.schedules.is_empty()
                && (local.is_some() && p.binding.as_deref() == local
                    || exported.is_some_and(|e| p.exports.iter().any(|x| x == e)))
        })
    }
    let mut diags = vec![];
    for u in units {
        for (name, span) in &u.analysis.inner_calls {
            let mut found = scheduled(u, Some(name), None).then(|| name.clone());
            if found.is_none() {
                for n in u.analysis.named_imports.iter().filter(|n| &n.local == name) {
                    if let Some(&m) = u.resolved.get(&n.spec) {
                        if scheduled(&units[m], None, Some(&n.imported)) {
                            found = Some(name.clone());
                        }
                    }
                }
            }
            if let Some(name) = found {
                diags.push(Diagnostic::at(
                    codes::SCHEDULE_NESTED,
                    &u.path,
                    &u.text,
                    (span.start, span.end),
                    format!(
                        "`{name}` declares [SCHEDULE], and a pattern instantiated inside another \
                         never fires its schedule (only a piece's own result is indexed); deploy \
                         it as a piece of its own, or declare the schedule on this pattern"
                    ),
                ));
            }
        }
    }
    if diags.is_empty() {
        Ok(())
    } else {
        Err(diags)
    }
}

/// Edits that need the whole program: schema arguments (types may be imported) and the
/// injected `h` import.
fn plan_late_edits(units: &mut [Unit]) -> Result<(), Vec<Diagnostic>> {
    let scopes: Vec<TypeScope> = units
        .iter()
        .map(|u| {
            let mut imports_map = HashMap::new();
            for (local, imported) in &u.analysis.cf_locals {
                imports_map.insert(local.clone(), ImportTarget::Commonfabric(imported.clone()));
            }
            for n in &u.analysis.named_imports {
                if let Some(&m) = u.resolved.get(&n.spec) {
                    imports_map.insert(
                        n.local.clone(),
                        ImportTarget::Module {
                            module: m,
                            name: n.imported.clone(),
                        },
                    );
                }
            }
            TypeScope {
                decls: u.analysis.decls.clone(),
                imports: imports_map,
                exports: u.analysis.exports.clone(),
                consts: u.analysis.consts.clone(),
            }
        })
        .collect();
    let texts: Vec<&str> = units.iter().map(|u| u.text.as_str()).collect();
    let mut gen = SchemaGen::new(&scopes, &texts);
    let mut planned: Vec<Vec<Edit>> = vec![vec![]; units.len()];
    let mut schemas: Vec<Vec<CallSchema>> = vec![vec![]; units.len()];
    let mut diags = vec![];
    for (i, u) in units.iter().enumerate() {
        for meta in &u.analysis.metas {
            if meta.replace {
                let s = meta
                    .fields
                    .first()
                    .map_or(serde_json::json!({}), |(_, ty)| gen.schema(ty));
                let text = serde_json::to_string(&s).expect("schema serialises");
                planned[i].push(Edit::replace(meta.call_span, format!("({text})")));
                continue;
            }
            let mut obj = serde_json::Map::new();
            for (key, ty) in &meta.fields {
                obj.insert((*key).to_string(), gen.schema(ty));
            }
            let json = serde_json::to_string(&obj).expect("schema serialises");
            planned[i].push(Edit::insert(meta.insert_at, format!(", {json}")));
            let (line, col, _) = line_col(&u.text, meta.call_span.start);
            schemas[i].push(CallSchema {
                api: meta.api,
                line,
                col,
                meta: serde_json::Value::Object(obj),
            });
        }
        if u.analysis.uses_jsx {
            match u.analysis.h_binding {
                HBinding::Commonfabric => {}
                HBinding::Missing => planned[i].push(Edit::insert(
                    0,
                    format!("import {{ {JSX_FACTORY} }} from \"commonfabric\"; "),
                )),
                HBinding::Other(span) => diags.push(Diagnostic::at(
                    codes::JSX_H_CONFLICT,
                    &u.path,
                    &u.text,
                    (span.start, span.end),
                    "JSX compiles to calls of commonfabric's `h`, but this module declares its own \
                     `h`; rename it or import { h } from \"commonfabric\"",
                )),
            }
        }
    }
    for e in std::mem::take(&mut gen.errors) {
        let u = &units[e.module];
        diags.push(Diagnostic::at(
            codes::DEFAULT_NOT_LITERAL,
            &u.path,
            &u.text,
            e.span,
            e.message,
        ));
    }
    if !diags.is_empty() {
        diags.dedup();
        return Err(diags);
    }
    for ((u, edits), s) in units.iter_mut().zip(planned).zip(schemas) {
        u.analysis.edits.extend(edits);
        u.schemas = s;
    }
    Ok(())
}

fn emit_unit(u: &Unit) -> Result<CompiledModule, Vec<Diagnostic>> {
    let internal = |offset: u32, message: String| {
        Diagnostic::at(codes::SYNTAX, &u.path, &u.text, (offset, offset), message)
    };
    let (edited, map) =
        emit::apply_edits(&u.text, &u.analysis.edits).map_err(|m| vec![internal(0, m)])?;
    let js = emit::to_js(&u.path, &edited).map_err(|errs| {
        errs.into_iter()
            .map(|(off, msg)| internal(map.to_original(off), msg))
            .collect::<Vec<_>>()
    })?;
    let at = |span: oxc_span::Span| {
        let (line, col, _) = line_col(&u.text, span.start);
        (line, col)
    };
    let patterns = u
        .analysis
        .patterns
        .iter()
        .map(|p| {
            let (line, col) = at(p.call_span);
            PatternInfo {
                name: p.name.clone(),
                binding: p.binding.clone(),
                exports: p.exports.clone(),
                line,
                col,
                schedules: p
                    .schedules
                    .iter()
                    .map(|s| {
                        let (line, col) = at(s.span);
                        ScheduleDecl {
                            line,
                            col,
                            entries: s
                                .entries
                                .iter()
                                .map(|e| {
                                    let (line, col) = at(e.span);
                                    ScheduleEntryInfo {
                                        index: e.index,
                                        interval_minutes: e.interval_minutes,
                                        cron: e.cron.as_ref().map(|c| c.0.clone()),
                                        time_zone: e.cron.as_ref().and_then(|c| c.1.clone()),
                                        at: e.at.map(|s| s.source_text(&u.text).to_string()),
                                        callback: e.callback_span.source_text(&u.text).to_string(),
                                        callback_span: (e.callback_span.start, e.callback_span.end),
                                        line,
                                        col,
                                    }
                                })
                                .collect(),
                        }
                    })
                    .collect(),
            }
        })
        .collect();
    Ok(CompiledModule {
        name: u.name.clone(),
        path: u.path.clone(),
        source: u.text.clone(),
        js,
        imports: u.imports.clone(),
        patterns,
        schemas: u.schemas.clone(),
        consts: u
            .analysis
            .consts
            .iter()
            .filter_map(|(k, v)| v.as_ref().ok().map(|v| (k.clone(), v.clone())))
            .collect(),
    })
}
