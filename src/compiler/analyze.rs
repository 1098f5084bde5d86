//! Pass 1: parse one module, run semantic analysis, validate it and plan text edits.
//!
//! Nothing here emits JavaScript. The pass produces an owned [`Analysis`] (no AST lifetimes) so
//! the driver can analyse every module of a program before rendering any schema: schemas may
//! need type declarations from sibling modules.
//!
//! Invariants:
//! - API calls are recognised by symbol, not by spelling: `pattern` is commonfabric's only if the
//!   callee resolves to an import from `"commonfabric"` (aliases work, shadowing is respected);
//! - every edit is a byte range of the original source; edits never overlap except for
//!   insertions at the same point, which keep the order they were planned in;
//! - a module with syntax errors yields only its syntax diagnostics.

use std::collections::{HashMap, HashSet};

use oxc_allocator::Allocator;
use oxc_ast::ast::{
    Argument, ArrowFunctionExpression, CallExpression, Class, Declaration, Expression,
    FormalParameters, Function, IdentifierReference, ImportExpression, JSXElement, JSXFragment,
    ObjectExpression, Program, PropertyKey, ReturnStatement, Statement, TSTypeAnnotation,
    UnaryExpression, UnaryOperator, VariableDeclarationKind,
};
use oxc_ast_visit::{walk, Visit};
use oxc_parser::Parser;
use oxc_semantic::{ScopeFlags, Scoping, SemanticBuilder, SymbolId};
use oxc_span::{GetSpan, SourceType, Span};

use super::closures::{self, ClosureKind};
use super::diagnostics::{codes, RawDiag};
use super::imports::{self, ImportRequest, NamedImport};
use super::lower;
use super::schedule::{self, RawSchedule};
use super::types::{static_value, ConstValue, Ty, TyConv, TypeDecl};
use super::Edit;

/// A schema argument to append to an API call once types can be resolved.
#[derive(Debug, Clone)]
pub(crate) struct PendingMeta {
    /// `pattern`, `handler` or `lift`.
    pub api: &'static str,
    /// The call, for positions in metadata.
    pub call_span: Span,
    /// Byte offset just after the call's last argument.
    pub insert_at: u32,
    /// `("argument", ty)`, `("result", ty)`, `("event", ty)`, `("context", ty)`.
    pub fields: Vec<(&'static str, Ty)>,
    /// `toSchema<T>()`: the call is replaced by the schema of its one field.
    pub replace: bool,
}

/// A `pattern(...)` call found in the module.
#[derive(Debug, Clone)]
pub(crate) struct RawPattern {
    pub call_span: Span,
    pub name: Option<String>,
    pub binding: Option<String>,
    pub exports: Vec<String>,
    pub schedules: Vec<RawSchedule>,
}

/// Whether JSX needs an `h` import injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HBinding {
    /// No module-level `h`: inject `import { h } from "commonfabric"`.
    Missing,
    /// `h` is commonfabric's.
    Commonfabric,
    /// `h` is something else, declared at this span.
    Other(Span),
}

/// Everything pass 1 learns about one module.
#[derive(Debug)]
pub(crate) struct Analysis {
    pub diags: Vec<RawDiag>,
    pub edits: Vec<Edit>,
    pub requests: Vec<ImportRequest>,
    pub named_imports: Vec<NamedImport>,
    pub cf_locals: HashMap<String, String>,
    pub decls: HashMap<String, TypeDecl>,
    /// Exported name → local name.
    pub exports: HashMap<String, String>,
    /// Every name the module's statements export (values and types alike).
    pub export_names: imports::DeclaredExports,
    /// Module-level `const` values for `Default<T, typeof NAME>`.
    pub consts: HashMap<String, ConstValue>,
    pub metas: Vec<PendingMeta>,
    pub patterns: Vec<RawPattern>,
    pub uses_jsx: bool,
    /// Calls of a plain identifier (`Child(...)`, `<Child />`) inside a
    /// pattern body: name and span, to find scheduled patterns instantiated
    /// inside another (`SCHEDULE_NESTED`).
    pub inner_calls: Vec<(String, Span)>,
    pub h_binding: HBinding,
    /// Whether lowering planned edits (the module then imports its helpers).
    pub lowered: bool,
    /// `dataFile("./x.json")` calls, for the driver to attach the files.
    pub data_files: Vec<DataFileCall>,
    /// Names this module exports that are bound to an API result (a handler, a lift, a
    /// pattern, ...): factories an importer calls to build graph, not helpers.
    pub builder_exports: HashSet<String>,
}

/// A `dataFile("path")` call: the driver reads the file (relative to the module) and puts its
/// text in place of the call, so the program carries its data and its hash covers it.
#[derive(Debug, Clone)]
pub(crate) struct DataFileCall {
    /// The whole call, which the text replaces.
    pub call: Span,
    /// The path argument (where a diagnostic about the file goes).
    pub arg: Span,
    pub path: String,
}

pub(crate) fn source_type_for(path: &str) -> SourceType {
    if path.ends_with(".tsx") {
        SourceType::tsx()
    } else {
        SourceType::ts()
    }
}

/// The first label's byte range of an oxc diagnostic (or the start of the file).
fn oxc_span_of(labels: &[oxc_span::LabeledSpan]) -> Span {
    labels.first().map_or(Span::new(0, 0), |l| l.span())
}

/// Run pass 1 over one module.
pub(crate) fn analyze(module: usize, path: &str, text: &str) -> Analysis {
    analyze_knowing(module, path, text, &HashSet::new())
}

/// [`analyze`], knowing which of the names the module imports from its program's other modules
/// are factories there (`imported_builders`, local names): calls of them build graph.
pub(crate) fn analyze_knowing(
    module: usize,
    path: &str,
    text: &str,
    imported_builders: &HashSet<String>,
) -> Analysis {
    let mut out = Analysis {
        diags: vec![],
        edits: vec![],
        requests: vec![],
        named_imports: vec![],
        cf_locals: HashMap::new(),
        decls: HashMap::new(),
        exports: HashMap::new(),
        export_names: imports::DeclaredExports::default(),
        consts: HashMap::new(),
        metas: vec![],
        patterns: vec![],
        uses_jsx: false,
        h_binding: HBinding::Missing,
        inner_calls: vec![],
        lowered: false,
        data_files: vec![],
        builder_exports: HashSet::new(),
    };
    let alloc = Allocator::default();
    let parsed = Parser::new(&alloc, text, source_type_for(path)).parse();
    if parsed.panicked || !parsed.diagnostics.is_empty() {
        for d in parsed.diagnostics.iter() {
            out.diags.push(RawDiag::new(
                codes::SYNTAX,
                oxc_span_of(&d.labels),
                format!("syntax error: {}", d.message),
            ));
        }
        if out.diags.is_empty() {
            out.diags
                .push(RawDiag::new(codes::SYNTAX, Span::new(0, 0), "syntax error"));
        }
        return out;
    }
    let program = parsed.program;
    let sem = SemanticBuilder::new()
        .with_check_syntax_error(true)
        .build(&program);
    if !sem.diagnostics.is_empty() {
        for d in sem.diagnostics.iter() {
            out.diags.push(RawDiag::new(
                codes::SYNTAX,
                oxc_span_of(&d.labels),
                format!("syntax error: {}", d.message),
            ));
        }
        return out;
    }
    let scoping = sem.semantic.scoping();

    let imp = imports::collect(&program);
    out.diags.extend(imp.diags);
    out.diags.extend(unknown_api_imports(&imp.api, scoping));
    out.data_files = data_file_calls(&program, scoping, &imp.cf_symbols, &mut out.diags);
    out.requests = imp.requests;
    out.named_imports = imp.named;
    for n in &mut out.named_imports {
        n.as_value = n
            .symbol
            .is_some_and(|s| scoping.get_resolved_references(s).any(|r| r.is_value()));
    }
    out.export_names = imports::declared_exports(&program);
    out.cf_locals = imp.cf_locals;

    let conv = TyConv { module, text };
    collect_decls(&program, &conv, &mut out);
    let bindings = pattern_bindings(&program);

    let mut builders = builder_bindings(&program, scoping, &imp.cf_symbols);
    out.builder_exports = {
        let names: HashSet<&str> = builders.iter().map(|&s| scoping.symbol_name(s)).collect();
        out.exports
            .iter()
            .filter(|(_, local)| names.contains(local.as_str()))
            .map(|(exported, _)| exported.clone())
            .collect()
    };
    if !imported_builders.is_empty() {
        let root = scoping.root_scope_id();
        builders.extend(scoping.symbol_ids().filter(|&s| {
            scoping.symbol_scope_id(s) == root && imported_builders.contains(scoping.symbol_name(s))
        }));
    }
    let mut an = Analyzer {
        text,
        scoping,
        cf: &imp.cf_symbols,
        builders: &builders,
        conv: &conv,
        stack: vec![],
        cells: HashSet::new(),
        roots: HashMap::new(),
        out: &mut out,
    };
    an.visit_program(&program);
    let undefined = undefined_names(&program, scoping, &imp.cf_symbols, &out.diags);
    out.diags.extend(undefined);
    if out.lowered {
        out.edits.push(super::Edit::insert(
            0,
            format!("import * as {} from \"commonfabric\"; ", lower::NS),
        ));
    }

    // Name each pattern by the const it is bound to and the names it is exported under.
    for p in &mut out.patterns {
        if let Some((binding, is_default)) = bindings.get(&p.call_span.start) {
            if *is_default {
                p.exports.push("default".to_string());
            } else {
                p.binding = Some(binding.clone());
                let mut names: Vec<String> = out
                    .exports
                    .iter()
                    .filter(|(_, local)| *local == binding)
                    .map(|(exported, _)| exported.clone())
                    .collect();
                names.sort();
                p.exports = names;
            }
        }
    }

    out.h_binding = if out.cf_locals.get("h").map(String::as_str) == Some("h") {
        HBinding::Commonfabric
    } else {
        let root = scoping.root_scope_id();
        scoping
            .symbol_ids()
            .find(|&s| scoping.symbol_scope_id(s) == root && scoping.symbol_name(s) == "h")
            .map_or(HBinding::Missing, |s| {
                HBinding::Other(scoping.symbol_span(s))
            })
    };
    out
}

/// The `dataFile(...)` calls of a module (commonfabric's `dataFile`, under any local name).
fn data_file_calls(
    program: &Program,
    scoping: &Scoping,
    cf: &HashMap<SymbolId, String>,
    diags: &mut Vec<RawDiag>,
) -> Vec<DataFileCall> {
    struct Calls<'s> {
        scoping: &'s Scoping,
        cf: &'s HashMap<SymbolId, String>,
        found: Vec<DataFileCall>,
        diags: Vec<RawDiag>,
    }
    impl<'a> Visit<'a> for Calls<'_> {
        fn visit_call_expression(&mut self, c: &oxc_ast::ast::CallExpression<'a>) {
            let is_data_file = matches!(c.callee.get_inner_expression(), Expression::Identifier(id)
                if id.reference_id.get()
                    .and_then(|r| self.scoping.get_reference(r).symbol_id())
                    .and_then(|s| self.cf.get(&s))
                    .is_some_and(|api| api == "dataFile"));
            if is_data_file {
                let path = match c.arguments.first().and_then(|a| a.as_expression()) {
                    Some(Expression::StringLiteral(s)) => Some((s.value.to_string(), s.span)),
                    Some(Expression::TemplateLiteral(t)) if t.expressions.is_empty() => t
                        .quasis
                        .first()
                        .and_then(|q| q.value.cooked.as_ref())
                        .map(|v| (v.to_string(), t.span)),
                    _ => None,
                };
                match path {
                    Some((path, arg)) => self.found.push(DataFileCall {
                        call: c.span,
                        arg,
                        path,
                    }),
                    None => self.diags.push(RawDiag::new(
                        codes::DATA_FILE_NOT_LITERAL,
                        c.span,
                        "dataFile takes one string literal naming a file of the program \
                         (relative to this module), so the program carries the file",
                    )),
                }
            }
            walk::walk_call_expression(self, c);
        }
    }
    let mut v = Calls {
        scoping,
        cf,
        found: vec![],
        diags: vec![],
    };
    v.visit_program(program);
    diags.append(&mut v.diags);
    v.found
}

/// Names imported from the API and used as values that the runtime module does not export
/// (an import used only as a type is erased, as TypeScript erases it).
fn unknown_api_imports(imports: &[imports::ApiImport], scoping: &Scoping) -> Vec<RawDiag> {
    let mut out = Vec::new();
    for i in imports {
        let Some(exports) = imports::api_exports(&i.spec) else {
            continue;
        };
        if exports.contains(&i.imported) {
            continue;
        }
        let used_as_value = i
            .symbol
            .is_some_and(|s| scoping.get_resolved_references(s).any(|r| r.is_value()));
        if !used_as_value {
            continue;
        }
        let hint = match imports::did_you_mean(&i.imported, exports.iter()) {
            Some(n) => format!("; did you mean `{n}`?"),
            None => String::new(),
        };
        out.push(RawDiag::new(
            codes::IMPORT_UNKNOWN_EXPORT,
            i.span,
            format!(
                "\"{}\" does not export `{}` in spacewake{hint}",
                i.spec, i.imported
            ),
        ));
    }
    out
}

/// Module-level `interface`/`type` declarations and the module's export map.
fn collect_decls(program: &Program, conv: &TyConv, out: &mut Analysis) {
    let add = |d: &Declaration, exported: bool, out: &mut Analysis| match d {
        Declaration::TSInterfaceDeclaration(i) => {
            let own = Ty::Obj(conv.members(&i.body.body));
            let body = if i.extends.is_empty() {
                own
            } else {
                let mut parts: Vec<Ty> = i
                    .extends
                    .iter()
                    .map(|h| {
                        let (args, arg_spans) = match &h.type_arguments {
                            Some(a) => (
                                a.params.iter().map(|t| conv.convert(t)).collect(),
                                a.params
                                    .iter()
                                    .map(|t| (t.span().start, t.span().end))
                                    .collect(),
                            ),
                            None => (vec![], vec![]),
                        };
                        let name = h.type_name.span().source_text(conv.text).to_string();
                        Ty::Ref(super::types::RefTy {
                            name,
                            args,
                            arg_spans,
                            module: conv.module,
                        })
                    })
                    .collect();
                parts.push(own);
                Ty::Inter(parts)
            };
            let name = i.id.name.to_string();
            if exported {
                out.exports.insert(name.clone(), name.clone());
            }
            out.decls.insert(
                name,
                TypeDecl {
                    params: conv.params(i.type_parameters.as_deref()),
                    body,
                },
            );
        }
        Declaration::TSTypeAliasDeclaration(t) => {
            let name = t.id.name.to_string();
            if exported {
                out.exports.insert(name.clone(), name.clone());
            }
            out.decls.insert(
                name,
                TypeDecl {
                    params: conv.params(t.type_parameters.as_deref()),
                    body: conv.convert(&t.type_annotation),
                },
            );
        }
        Declaration::VariableDeclaration(v) => {
            for d in &v.declarations {
                if exported {
                    for id in d.id.get_binding_identifiers() {
                        out.exports.insert(id.name.to_string(), id.name.to_string());
                    }
                }
                let value = match (&d.init, v.kind) {
                    (Some(init), VariableDeclarationKind::Const) => {
                        static_value(init, conv.text, &out.consts, 0)
                    }
                    (_, kind) => Err(format!(
                        "declared with `{}`, so its value can change",
                        kind.as_str()
                    )),
                };
                for id in d.id.get_binding_identifiers() {
                    out.consts.insert(id.name.to_string(), value.clone());
                }
            }
        }
        Declaration::FunctionDeclaration(f) if exported => {
            if let Some(id) = &f.id {
                out.exports.insert(id.name.to_string(), id.name.to_string());
            }
        }
        _ => {}
    };
    for stmt in &program.body {
        match stmt {
            Statement::TSInterfaceDeclaration(_)
            | Statement::TSTypeAliasDeclaration(_)
            | Statement::VariableDeclaration(_) => {
                if let Some(d) = stmt.as_declaration() {
                    add(d, false, out);
                }
            }
            Statement::ExportDeclaration(e) => add(&e.declaration, true, out),
            // `export default feed;` exports the binding `feed` as `default`.
            Statement::ExportDefaultDeclaration(e) => {
                if let Some(Expression::Identifier(id)) = e.declaration.as_expression() {
                    out.exports
                        .insert("default".to_string(), id.name.to_string());
                }
            }
            _ => {}
        }
    }
    for (local, exported) in imports::export_specifiers(program) {
        out.exports.insert(exported, local);
    }
}

/// Module-level bindings whose initializer is a commonfabric call (`pattern(...)`,
/// `handler(...)`, `lift(...)`): calling them builds graph, so lowering leaves their calls alone.
fn builder_bindings(
    program: &Program,
    scoping: &Scoping,
    cf: &HashMap<SymbolId, String>,
) -> HashSet<SymbolId> {
    fn api_call(e: &Expression, scoping: &Scoping, cf: &HashMap<SymbolId, String>) -> bool {
        let Expression::CallExpression(c) = e.get_inner_expression() else {
            return false;
        };
        match c.callee.get_inner_expression() {
            Expression::Identifier(id) => id
                .reference_id
                .get()
                .and_then(|r| scoping.get_reference(r).symbol_id())
                .is_some_and(|s| cf.contains_key(&s)),
            inner @ Expression::CallExpression(_) => api_call(inner, scoping, cf),
            _ => false,
        }
    }
    let mut out = HashSet::new();
    let mut from_decl = |v: &oxc_ast::ast::VariableDeclaration| {
        for d in &v.declarations {
            if let (Some(init), Some(id)) = (&d.init, d.id.get_binding_identifier()) {
                if api_call(init, scoping, cf) {
                    out.extend(id.symbol_id.get());
                }
            }
        }
    };
    for stmt in &program.body {
        match stmt {
            Statement::VariableDeclaration(v) => from_decl(v),
            Statement::ExportDeclaration(e) => {
                if let Declaration::VariableDeclaration(v) = &e.declaration {
                    from_decl(v);
                }
            }
            _ => {}
        }
    }
    out
}

/// Call-expression start → (const name it initialises, or `default` export).
fn pattern_bindings(program: &Program) -> HashMap<u32, (String, bool)> {
    let mut out = HashMap::new();
    let from_decl = |v: &oxc_ast::ast::VariableDeclaration, out: &mut HashMap<_, _>| {
        for d in &v.declarations {
            if let (Some(init), Some(id)) = (&d.init, d.id.get_binding_identifier()) {
                if let Expression::CallExpression(c) = init.get_inner_expression() {
                    out.insert(c.span.start, (id.name.to_string(), false));
                }
            }
        }
    };
    for stmt in &program.body {
        match stmt {
            Statement::VariableDeclaration(v) => from_decl(v, &mut out),
            Statement::ExportDeclaration(e) => {
                if let Declaration::VariableDeclaration(v) = &e.declaration {
                    from_decl(v, &mut out);
                }
            }
            Statement::ExportDefaultDeclaration(e) => {
                if let Some(Expression::CallExpression(c)) = e
                    .declaration
                    .as_expression()
                    .map(|x| x.get_inner_expression())
                {
                    out.insert(c.span.start, ("default".to_string(), true));
                }
            }
            _ => {}
        }
    }
    out
}

/// Collects the object literals a pattern callback returns at its own level (not from nested
/// functions, whose returns are not the pattern's result).
struct Returns {
    objects: Vec<Span>,
}

impl<'a> Visit<'a> for Returns {
    fn visit_return_statement(&mut self, it: &ReturnStatement<'a>) {
        if let Some(Expression::ObjectExpression(o)) =
            it.argument.as_ref().map(|a| a.get_inner_expression())
        {
            self.objects.push(o.span);
        }
    }
    fn visit_function(&mut self, _: &Function<'a>, _: ScopeFlags) {}
    fn visit_arrow_function_expression(&mut self, _: &ArrowFunctionExpression<'a>) {}
    fn visit_class(&mut self, _: &Class<'a>) {}
}

/// A function literal passed to an API call, seen uniformly.
struct FnArg<'b, 'a> {
    params: &'b FormalParameters<'a>,
    return_type: Option<&'b TSTypeAnnotation<'a>>,
    /// Root result objects: the expression body, or the objects returned at top level.
    roots: Vec<Span>,
    body: Option<&'b oxc_ast::ast::FunctionBody<'a>>,
    expression: Option<&'b Expression<'a>>,
}

fn fn_arg<'b, 'a>(call: &'b CallExpression<'a>) -> Option<FnArg<'b, 'a>> {
    call.arguments.iter().find_map(|a| {
        let (params, return_type, body, expression_body) = match a {
            Argument::ArrowFunctionExpression(f) => match f.body.as_function_body() {
                Some(b) => (&*f.params, f.return_type.as_deref(), Some(b), None),
                None => (
                    &*f.params,
                    f.return_type.as_deref(),
                    None,
                    f.body.as_expression(),
                ),
            },
            Argument::FunctionExpression(f) => (
                &*f.params,
                f.return_type.as_deref(),
                f.body.as_deref(),
                None,
            ),
            _ => return None,
        };
        let mut roots = vec![];
        if let Some(Expression::ObjectExpression(o)) =
            expression_body.map(|e| e.get_inner_expression())
        {
            roots.push(o.span);
        }
        if let Some(body) = body {
            {
                let mut r = Returns { objects: vec![] };
                for s in &body.statements {
                    r.visit_statement(s);
                }
                roots = r.objects;
            }
        }
        Some(FnArg {
            params,
            return_type,
            roots,
            body,
            expression: expression_body,
        })
    })
}

/// Where a schema field's type comes from when the call has no type arguments.
#[derive(Clone, Copy)]
enum TySource {
    Param(usize),
    Return,
}

struct Analyzer<'s> {
    text: &'s str,
    scoping: &'s Scoping,
    cf: &'s HashMap<SymbolId, String>,
    /// Module-level bindings to API results (patterns, handlers, lifts).
    builders: &'s HashSet<SymbolId>,
    conv: &'s TyConv<'s>,
    /// Enclosing pattern callbacks: (pattern index, reactive symbols they bind).
    stack: Vec<(usize, HashSet<SymbolId>)>,
    /// The body bindings built as cells, in every pattern seen so far (`Lowered::cells`).
    cells: HashSet<SymbolId>,
    /// Root result object span → pattern index.
    roots: HashMap<(u32, u32), usize>,
    out: &'s mut Analysis,
}

impl Analyzer<'_> {
    /// The commonfabric export an expression names, if it is a reference to such an import.
    fn cf_name(&self, e: &Expression) -> Option<&str> {
        let Expression::Identifier(id) = e else {
            return None;
        };
        let sym = self
            .scoping
            .get_reference(id.reference_id.get()?)
            .symbol_id()?;
        self.cf.get(&sym).map(String::as_str)
    }

    fn plan_meta(
        &mut self,
        api: &'static str,
        call: &CallExpression,
        keys: &[(&'static str, TySource)],
    ) {
        let Some(last) = call.arguments.last() else {
            return;
        };
        let mut fields = vec![];
        if let Some(targs) = &call.type_arguments {
            for (t, (key, _)) in targs.params.iter().zip(keys) {
                fields.push((*key, self.conv.convert(t)));
            }
        } else if let Some(f) = fn_arg(call) {
            for (key, src) in keys {
                let ann = match src {
                    TySource::Param(i) => f
                        .params
                        .items
                        .get(*i)
                        .and_then(|p| p.type_annotation.as_deref()),
                    TySource::Return => f.return_type,
                };
                if let Some(a) = ann {
                    fields.push((*key, self.conv.convert(&a.type_annotation)));
                }
            }
        }
        if !fields.is_empty() {
            self.out.metas.push(PendingMeta {
                api,
                call_span: call.span,
                insert_at: last.span().end,
                fields,
                replace: false,
            });
        }
    }

    fn pattern_call(&mut self, call: &CallExpression<'_>) {
        self.plan_meta(
            "pattern",
            call,
            &[
                ("argument", TySource::Param(0)),
                ("result", TySource::Return),
            ],
        );
        let name = match call.arguments.first() {
            Some(Argument::StringLiteral(s)) => Some(s.value.to_string()),
            _ => None,
        };
        let index = self.out.patterns.len();
        self.out.patterns.push(RawPattern {
            call_span: call.span,
            name,
            binding: None,
            exports: vec![],
            schedules: vec![],
        });
        let mut bound = HashSet::new();
        if let Some(f) = fn_arg(call) {
            let module = lower::Module {
                scoping: self.scoping,
                cf: self.cf,
                builders: self.builders,
            };
            let lowered = lower::pattern_body(&module, f.params, f.body, f.expression);
            if !lowered.edits.is_empty() {
                self.out.lowered = true;
            }
            self.out.edits.extend(lowered.edits);
            self.out.diags.extend(lowered.diags);
            // What closures capture: the body's reactive bindings (not its helper functions
            // or constants, which they close over as usual).
            bound = lowered.reactive;
            self.cells.extend(lowered.cells);
            for r in f.roots {
                self.roots.insert((r.start, r.end), index);
            }
        }
        self.stack.push((index, bound));
        walk::walk_call_expression(self, call);
        self.stack.pop();
    }
}

impl Analyzer<'_> {
    /// `assert(() => a === b)`: the call is given its source (`a === b`) and the operands of its
    /// comparison are recorded as it runs (`__cf.__part(i, a)`), so a failed assertion can say
    /// what each side was, as the reference's transformer arranges.
    fn instrument_assert(&mut self, call: &CallExpression) {
        let Some(Argument::ArrowFunctionExpression(f)) = call.arguments.first() else {
            return;
        };
        let body = match (f.body.as_expression(), f.body.as_function_body()) {
            (Some(e), _) => e,
            (None, Some(b)) => match b.statements.as_slice() {
                [Statement::ReturnStatement(r)] => match &r.argument {
                    Some(e) => e,
                    None => return,
                },
                _ => return,
            },
            _ => return,
        };
        let src = |s: Span| self.text[s.start as usize..s.end as usize].to_string();
        let mut part_sources: Vec<String> = vec![];
        if let Expression::BinaryExpression(b) = body.get_inner_expression() {
            if b.operator.is_equality() || b.operator.is_compare() {
                for operand in [&b.left, &b.right] {
                    if is_literal(operand) {
                        continue;
                    }
                    let s = operand.span();
                    self.out.edits.push(Edit::insert(
                        s.start,
                        format!("{}.__part({}, ", lower::NS, part_sources.len()),
                    ));
                    self.out.edits.push(Edit::insert(s.end, ")".to_string()));
                    part_sources.push(src(s));
                }
            }
        }
        self.out.edits.push(Edit::replace(
            call.callee.span(),
            format!(
                "{}.__assertWith({}, {})",
                lower::NS,
                serde_json::Value::from(src(body.span())),
                serde_json::Value::from(part_sources)
            ),
        ));
        self.out.lowered = true;
    }
}

/// A literal operand (`1`, `"a"`, `true`, `null`, `undefined`): nothing to report about it.
fn is_literal(e: &Expression) -> bool {
    match e.get_inner_expression() {
        Expression::NumericLiteral(_)
        | Expression::StringLiteral(_)
        | Expression::BooleanLiteral(_)
        | Expression::NullLiteral(_)
        | Expression::BigIntLiteral(_) => true,
        Expression::Identifier(id) => id.name == "undefined",
        Expression::UnaryExpression(u) => is_literal(&u.argument),
        Expression::TemplateLiteral(t) => t.expressions.is_empty(),
        _ => false,
    }
}

impl<'a> Visit<'a> for Analyzer<'_> {
    fn visit_jsx_attribute(&mut self, it: &oxc_ast::ast::JSXAttribute<'a>) {
        // `onClick={() => …}` in a pattern body: an inline handler, made an action.
        let is_event = matches!(&it.name, oxc_ast::ast::JSXAttributeName::Identifier(id)
            if id.name.starts_with("on") && id.name.len() > 2);
        if let (true, false, Some(oxc_ast::ast::JSXAttributeValue::ExpressionContainer(c))) =
            (is_event, self.stack.is_empty(), &it.value)
        {
            if let oxc_ast::ast::JSXExpression::ArrowFunctionExpression(f) = &c.expression {
                let bound: HashSet<SymbolId> = self
                    .stack
                    .iter()
                    .flat_map(|(_, b)| b.iter().copied())
                    .collect();
                let edits = closures::inline_handler(
                    f,
                    closures::Scope {
                        scoping: self.scoping,
                        bound: &bound,
                        cells: &self.cells,
                    },
                    self.text,
                );
                if !edits.is_empty() {
                    self.out.lowered = true;
                    self.out.edits.extend(edits);
                }
            }
        }
        walk::walk_jsx_attribute(self, it);
    }

    fn visit_call_expression(&mut self, it: &CallExpression<'a>) {
        let api = self.cf_name(&it.callee).map(str::to_string);
        match api.as_deref() {
            Some("pattern" | "recipe") => return self.pattern_call(it),
            Some("handler") => self.plan_meta(
                "handler",
                it,
                &[
                    ("event", TySource::Param(0)),
                    ("context", TySource::Param(1)),
                ],
            ),
            Some("toSchema") => {
                // `toSchema<T>()` is the schema of `T`, computed here.
                if let Some(t) = it.type_arguments.as_ref().and_then(|a| a.params.first()) {
                    self.out.metas.push(PendingMeta {
                        api: "toSchema",
                        call_span: it.span,
                        insert_at: it.span.end,
                        fields: vec![("schema", self.conv.convert(t))],
                        replace: true,
                    });
                }
            }
            Some(other) => {
                if other == "assert" {
                    self.instrument_assert(it);
                }
                if other == "action" {
                    // Its event type (`action<E>(...)`, or its parameter's
                    // annotation): which payload references are cells.
                    self.plan_meta("action", it, &[("actionEvent", TySource::Param(0))]);
                }
                if other == "fetchJson" || other == "generateObject" {
                    // `fetchJson<T>(...)`, `generateObject<T>(...)`: the
                    // answer is checked against `T`.
                    let api = if other == "fetchJson" {
                        "fetchJson"
                    } else {
                        "generateObject"
                    };
                    self.plan_meta(api, it, &[("__resultSchema", TySource::Return)]);
                }
                if other == "wish" {
                    // `wish<T>(...)`: `T`'s default answers an unanswered wish.
                    self.plan_meta("wish", it, &[("__resultSchema", TySource::Return)]);
                }
                if other == "computed" {
                    // Its declared result type (`computed<T>(...)`, `computed((): T => ...)`):
                    // a reader capturing it gets its `Writable` fields as cells.
                    self.plan_meta("computed", it, &[("__resultSchema", TySource::Return)]);
                }
                if other == "lift" {
                    self.plan_meta(
                        "lift",
                        it,
                        &[
                            ("argument", TySource::Param(0)),
                            ("result", TySource::Return),
                        ],
                    );
                }
                if let (Some(kind), false) = (ClosureKind::from_api(other), self.stack.is_empty()) {
                    let bound: HashSet<SymbolId> = self
                        .stack
                        .iter()
                        .flat_map(|(_, b)| b.iter().copied())
                        .collect();
                    let module = lower::Module {
                        scoping: self.scoping,
                        cf: self.cf,
                        builders: self.builders,
                    };
                    let is_builder = |e: &Expression| module.builder_callee(e);
                    let (edits, helpers) = closures::rewrite(
                        kind,
                        it,
                        closures::Scope {
                            scoping: self.scoping,
                            bound: &bound,
                            cells: &self.cells,
                        },
                        self.text,
                        &is_builder,
                    );
                    self.out.edits.extend(edits);
                    self.out.lowered |= helpers;
                }
            }
            None => {
                if let (Expression::Identifier(id), false) = (&it.callee, self.stack.is_empty()) {
                    self.out.inner_calls.push((id.name.to_string(), it.span));
                }
            }
        }
        walk::walk_call_expression(self, it);
    }

    fn visit_variable_declarator(&mut self, it: &oxc_ast::ast::VariableDeclarator<'a>) {
        // `const sweep = handler(...)` (or a lift, `computed`, `derive`):
        // it keeps its source name, so operators see `sweep`, not only its
        // stream's or node's id.
        if let (Some(Expression::CallExpression(call)), Some(id)) =
            (&it.init, it.id.get_binding_identifier())
        {
            if matches!(
                self.cf_name(&call.callee),
                Some("handler" | "lift" | "computed" | "derive")
            ) {
                self.out.edits.push(Edit::insert(
                    call.span.start,
                    format!(
                        "{}.__named({}, ",
                        lower::NS,
                        serde_json::Value::from(id.name.as_str())
                    ),
                ));
                self.out
                    .edits
                    .push(Edit::insert(call.span.end, ")".to_string()));
                self.out.lowered = true;
            }
        }
        walk::walk_variable_declarator(self, it);
    }

    fn visit_object_expression(&mut self, it: &ObjectExpression<'a>) {
        let root = self.roots.get(&(it.span.start, it.span.end)).copied();
        let (scoping, cf) = (self.scoping, self.cf);
        let reserved_of = |k: &PropertyKey| -> Option<String> {
            let PropertyKey::Identifier(id) = k else {
                return None;
            };
            let sym = scoping.get_reference(id.reference_id.get()?).symbol_id()?;
            let name = cf.get(&sym)?;
            schedule::RESERVED_KEYS
                .iter()
                .any(|(n, _)| n == name)
                .then(|| name.clone())
        };
        let builders = self.builders;
        let names = |e: &Expression| callback_name_problem(e, scoping, builders);
        let sched = schedule::check_object(
            it,
            root.is_some(),
            self.text,
            &reserved_of,
            &names,
            &mut self.out.diags,
        );
        if let (Some(i), Some(s)) = (root, sched) {
            self.out.patterns[i].schedules.push(s);
        }
        walk::walk_object_expression(self, it);
    }

    fn visit_import_expression(&mut self, it: &ImportExpression<'a>) {
        self.out.diags.push(imports::dynamic_import_diag(it.span));
        walk::walk_import_expression(self, it);
    }

    fn visit_jsx_element(&mut self, it: &JSXElement<'a>) {
        self.out.uses_jsx = true;
        if let (oxc_ast::ast::JSXElementName::IdentifierReference(id), false) =
            (&it.opening_element.name, self.stack.is_empty())
        {
            self.out.inner_calls.push((id.name.to_string(), it.span));
        }
        walk::walk_jsx_element(self, it);
    }

    fn visit_jsx_fragment(&mut self, it: &JSXFragment<'a>) {
        self.out.uses_jsx = true;
        walk::walk_jsx_fragment(self, it);
    }
}

/// What the module's bindings say is wrong with a schedule entry's
/// `callback` (`sweep` or `sweep({…})`): a name that is not defined (with the
/// closest defined name, if one is close), or a handler (or another
/// factory) used without binding it to its state.
fn callback_name_problem(
    e: &Expression,
    scoping: &Scoping,
    builders: &HashSet<SymbolId>,
) -> Option<RawDiag> {
    let (id, called) = match e.get_inner_expression() {
        Expression::Identifier(id) => (id, false),
        Expression::CallExpression(c) => match c.callee.get_inner_expression() {
            Expression::Identifier(id) => (id, true),
            _ => return None,
        },
        _ => return None,
    };
    let symbol = id
        .reference_id
        .get()
        .and_then(|r| scoping.get_reference(r).symbol_id());
    match symbol {
        None => {
            let name = id.name.as_str();
            Some(RawDiag::new(
                codes::SCHEDULE_CALLBACK_UNDEFINED,
                id.span,
                format!("`{name}` is not defined{}", undefined_hint(name, scoping)),
            ))
        }
        Some(s) if !called && builders.contains(&s) => Some(RawDiag::new(
            codes::SCHEDULE_CALLBACK_UNBOUND,
            id.span,
            format!(
                "`{0}` is a handler (or another factory) not bound to its state, so it is no \
                 stream and the entry would never fire; bind it: `{0}({{ … }})`",
                id.name
            ),
        )),
        _ => None,
    }
}

/// References to names that are declared nowhere (not in the module, not
/// imported, not a global of the sandbox) in code that runs when the piece
/// is loaded: the module's top level and the bodies of its patterns. Each
/// would throw a `ReferenceError` at load. Code that runs later (handlers,
/// derivations, helpers) is left to `tsc` with `spacewake types`, since a
/// branch that is never taken is not an error there. `typeof x` is how code
/// asks whether a name exists, so it is never reported, nor is a reference
/// already reported at the same place.
fn undefined_names(
    program: &Program,
    scoping: &Scoping,
    cf: &HashMap<SymbolId, String>,
    reported: &[RawDiag],
) -> Vec<RawDiag> {
    struct Finder<'s> {
        scoping: &'s Scoping,
        cf: &'s HashMap<SymbolId, String>,
        /// Start offsets of functions that are pattern bodies.
        bodies: HashSet<u32>,
        /// How many functions that run later enclose the current node.
        deferred: u32,
        found: Vec<RawDiag>,
    }
    impl Finder<'_> {
        /// Whether `e` names the API's `pattern` (or its older name `recipe`).
        fn is_pattern(&self, e: &Expression) -> bool {
            let body_taker = |n: &str| matches!(n, "pattern" | "recipe");
            let symbol_of = |id: &IdentifierReference| {
                id.reference_id
                    .get()
                    .and_then(|r| self.scoping.get_reference(r).symbol_id())
                    .and_then(|s| self.cf.get(&s))
            };
            match e.get_inner_expression() {
                Expression::Identifier(id) => symbol_of(id).is_some_and(|n| body_taker(n)),
                Expression::StaticMemberExpression(m) => match &m.object {
                    Expression::Identifier(ns) => {
                        symbol_of(ns).is_some_and(|n| n == "*") && body_taker(&m.property.name)
                    }
                    _ => false,
                },
                _ => false,
            }
        }
        fn enter(&mut self, start: u32) -> bool {
            let deferred = !self.bodies.contains(&start);
            self.deferred += u32::from(deferred);
            deferred
        }
        fn leave(&mut self, deferred: bool) {
            self.deferred -= u32::from(deferred);
        }
    }
    impl<'a> Visit<'a> for Finder<'_> {
        fn visit_call_expression(&mut self, it: &CallExpression<'a>) {
            if self.is_pattern(&it.callee) {
                if let Some(Argument::ArrowFunctionExpression(f)) = it.arguments.first() {
                    self.bodies.insert(f.span.start);
                } else if let Some(Argument::FunctionExpression(f)) = it.arguments.first() {
                    self.bodies.insert(f.span.start);
                }
            }
            walk::walk_call_expression(self, it);
        }
        fn visit_function(&mut self, it: &Function<'a>, flags: ScopeFlags) {
            let d = self.enter(it.span.start);
            walk::walk_function(self, it, flags);
            self.leave(d);
        }
        fn visit_arrow_function_expression(&mut self, it: &ArrowFunctionExpression<'a>) {
            let d = self.enter(it.span.start);
            walk::walk_arrow_function_expression(self, it);
            self.leave(d);
        }
        fn visit_unary_expression(&mut self, it: &UnaryExpression<'a>) {
            if it.operator == UnaryOperator::Typeof
                && matches!(
                    it.argument.get_inner_expression(),
                    Expression::Identifier(_)
                )
            {
                return;
            }
            walk::walk_unary_expression(self, it);
        }
        fn visit_identifier_reference(&mut self, it: &IdentifierReference<'a>) {
            let Some(r) = it.reference_id.get() else {
                return;
            };
            let reference = self.scoping.get_reference(r);
            let name = it.name.as_str();
            if self.deferred > 0
                || reference.symbol_id().is_some()
                || !reference.is_value()
                || crate::sandbox::GLOBALS.contains(&name)
            {
                return;
            }
            self.found.push(RawDiag::new(
                codes::NAME_UNDEFINED,
                it.span,
                format!(
                    "`{name}` is not defined{}",
                    undefined_hint(name, self.scoping)
                ),
            ));
        }
    }
    if scoping.root_unresolved_references().is_empty() {
        return vec![];
    }
    let mut f = Finder {
        scoping,
        cf,
        bodies: HashSet::new(),
        deferred: 0,
        found: vec![],
    };
    f.visit_program(program);
    f.found
        .retain(|d| !reported.iter().any(|r| r.start == d.start));
    f.found
}

/// What to say after "`name` is not defined": import it, when the API
/// exports that name, or the closest name the module or the sandbox defines.
fn undefined_hint(name: &str, scoping: &Scoping) -> String {
    if let Some(exports) = imports::api_exports(imports::COMMONFABRIC) {
        if exports.contains(name) {
            return format!("; import it: `import {{ {name} }} from \"commonfabric\"`");
        }
    }
    let defined: Vec<String> = scoping
        .symbol_ids()
        .map(|s| scoping.symbol_name(s).to_string())
        .chain(crate::sandbox::GLOBALS.iter().map(|g| g.to_string()))
        .filter(|n| n != name)
        .collect();
    match imports::did_you_mean(name, defined.iter()) {
        Some(n) => format!("; did you mean `{n}`?"),
        None => String::new(),
    }
}
