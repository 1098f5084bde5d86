//! Capture rewriting for `computed`, `derive` and `action` closures inside a pattern body.
//!
//! A closure that reads reactive values of the enclosing pattern body would, at run time, see
//! only whatever those names held when the pattern body ran, and the runtime could not know the
//! node's inputs. The compiler makes the captures explicit instead:
//!
//! ```text
//! computed(() => count + 1)            → computed(({ count }) => count + 1, { count })
//! derive(items, (xs) => xs.length + n) → derive(items, (xs, { n }) => xs.length + n, { n })
//! action(() => value.set(1))           → action((__swEvent, { value }) => value.set(1), { value })
//! ```
//!
//! Invariants:
//! - a capture is a reference, inside the closure, to a symbol bound by an enclosing pattern
//!   callback: its parameters (including destructured names) or a `const` declared directly in
//!   its body. Module-level bindings, globals, and names bound inside the closure or in a nested
//!   function between it and the pattern body are never captures;
//! - the captures object is the new last argument of the call, and the destructured parameter
//!   sits at a fixed position: 0 for `computed`, 1 for `derive` (after the input) and `action`
//!   (after the event); missing earlier parameters are padded with `__swInput`/`__swEvent`;
//! - names keep their spelling, so the closure body is not edited at all: the new parameter
//!   shadows the outer binding with the value the runtime passes in;
//! - closures with a rest parameter, or that are not inline function literals, are left as they
//!   are (the runtime then sees them as plain closures).

use std::collections::{BTreeSet, HashMap, HashSet};

use oxc_ast::ast::{
    Argument, ArrowFunctionExpression, CallExpression, Expression, FormalParameters,
    IdentifierReference, StaticMemberExpression,
};
use oxc_ast_visit::{walk, Visit};
use oxc_semantic::{Scoping, SymbolId};
use oxc_span::GetSpan;

use super::lower::{captures_object, CellUses, NS};
use super::Edit;

/// Which closure-taking API a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClosureKind {
    Computed,
    Derive,
    Action,
    /// `lift(fn)` written inline in a pattern body: its captures ride as a tagged argument.
    Lift,
}

impl ClosureKind {
    pub(crate) fn from_api(name: &str) -> Option<Self> {
        match name {
            // `assert(() => ...)` is a derivation of its record, like `computed`.
            "computed" | "assert" => Some(Self::Computed),
            "derive" => Some(Self::Derive),
            "action" => Some(Self::Action),
            "lift" => Some(Self::Lift),
            _ => None,
        }
    }

    /// Index of the closure among the call's arguments.
    fn fn_arg(self) -> usize {
        match self {
            Self::Computed | Self::Action | Self::Lift => 0,
            Self::Derive => 1,
        }
    }

    /// Index of the captures parameter in the closure's parameter list.
    fn captures_param(self) -> usize {
        match self {
            Self::Computed => 0,
            Self::Derive | Self::Action | Self::Lift => 1,
        }
    }

    fn pad_name(self) -> &'static str {
        match self {
            Self::Derive | Self::Lift => "__swInput",
            _ => "__swEvent",
        }
    }
}

/// Collects references to reactive pattern-body symbols, in first-use order.
struct Captures<'s> {
    scoping: &'s Scoping,
    bound: &'s HashSet<SymbolId>,
    seen: HashSet<SymbolId>,
    names: Vec<String>,
    /// The captures built as cells (`Scope::cells`).
    cells: &'s HashSet<SymbolId>,
    cell_names: Vec<String>,
}

impl<'s> Captures<'s> {
    fn new(scope: &Scope<'s>) -> Self {
        Captures {
            scoping: scope.scoping,
            bound: scope.bound,
            seen: HashSet::new(),
            names: vec![],
            cells: scope.cells,
            cell_names: vec![],
        }
    }
}

/// What a closure may capture.
pub(crate) struct Scope<'s> {
    pub scoping: &'s Scoping,
    /// The enclosing pattern bodies' reactive bindings.
    pub bound: &'s HashSet<SymbolId>,
    /// Those built as cells: handed to a helper's call, one is handed on as the cell its
    /// `Writable<T>` type says it is (the reference derives the capture's schema from it).
    pub cells: &'s HashSet<SymbolId>,
}

/// Which of `names` a closure hands, as they are, to a call (`helper(name)`).
struct HandedToCalls<'n> {
    names: &'n [String],
    found: HashSet<String>,
}

impl<'a> Visit<'a> for HandedToCalls<'_> {
    fn visit_call_expression(&mut self, it: &CallExpression<'a>) {
        for a in &it.arguments {
            if let Some(Expression::Identifier(id)) =
                a.as_expression().map(|e| e.get_inner_expression())
            {
                if self.names.iter().any(|n| n == id.name.as_str()) {
                    self.found.insert(id.name.to_string());
                }
            }
        }
        walk::walk_call_expression(self, it);
    }
}

impl<'a> Visit<'a> for Captures<'_> {
    fn visit_identifier_reference(&mut self, it: &IdentifierReference<'a>) {
        let Some(rid) = it.reference_id.get() else {
            return;
        };
        let Some(sym) = self.scoping.get_reference(rid).symbol_id() else {
            return;
        };
        if self.bound.contains(&sym) && self.seen.insert(sym) {
            self.names.push(it.name.to_string());
            if self.cells.contains(&sym) {
                self.cell_names.push(it.name.to_string());
            }
        }
    }
}

/// The edits that make a closure's captures explicit, or nothing when it has none (or cannot
/// be rewritten safely). Captures (and a `derive`'s input) that the closure uses as cells are
/// passed as cells; the second value says whether the edits call the lowering helpers.
/// `{ a, b: { x: b.x } }`: [`captures_object`], with the captures read only
/// through fields given as those fields.
fn captures_object_with_paths(
    names: &[String],
    cells: &HashSet<String>,
    paths: &HashMap<String, BTreeSet<String>>,
) -> String {
    let given: Vec<String> = names
        .iter()
        .map(|n| match paths.get(n) {
            Some(fields) if !cells.contains(n) => {
                let inner: Vec<String> = fields
                    .iter()
                    .map(|f| match f.starts_with('[') {
                        true => format!("{f}: {n}{f}"),
                        false => format!("{f}: {n}.{f}"),
                    })
                    .collect();
                format!("{n}: {{ {} }}", inner.join(", "))
            }
            _ if cells.contains(n) => format!("{n}: {NS}.__asCell({n})"),
            _ => n.clone(),
        })
        .collect();
    format!("{{ {} }}", given.join(", "))
}

pub(crate) fn rewrite(
    kind: ClosureKind,
    call: &CallExpression,
    scope: Scope,
    text: &str,
    is_builder: &dyn Fn(&oxc_ast::ast::Expression) -> bool,
) -> (Vec<Edit>, bool) {
    let Some(arg) = call.arguments.get(kind.fn_arg()) else {
        return (vec![], false);
    };
    let mut edits = vec![];
    let mut helpers = false;
    // `derive(cell, (c) => c.get())`: the input is a cell for the callback.
    if let (ClosureKind::Derive, Some(input)) = (kind, call.arguments.first()) {
        let first = match arg {
            Argument::ArrowFunctionExpression(f) => f.params.items.first(),
            Argument::FunctionExpression(f) => f.params.items.first(),
            _ => None,
        };
        if let Some(name) = first.and_then(|p| p.pattern.get_binding_identifier()) {
            if !used_as_cells(arg, &[name.name.to_string()], is_builder).is_empty() {
                edits.push(Edit::insert(input.span().start, format!("{NS}.__asCell(")));
                edits.push(Edit::insert(input.span().end, ")".to_string()));
                helpers = true;
            }
        }
    }
    let mut cap = Captures::new(&scope);
    let params: &FormalParameters = match arg {
        Argument::ArrowFunctionExpression(f) => {
            cap.visit_arrow_function_expression(f);
            &f.params
        }
        Argument::FunctionExpression(f) => {
            walk::walk_function(&mut cap, f, oxc_semantic::ScopeFlags::Function);
            &f.params
        }
        _ => return (edits, helpers),
    };
    if cap.names.is_empty() || params.rest.is_some() {
        return (edits, helpers);
    }
    let destructure = format!("{{ {} }}", cap.names.join(", "));
    // Captures used as cells are passed as cells. (An action's other captures
    // are cells too, but for derived values, which it gets as values: the
    // runtime tells them apart.)
    let cells = {
        let mut cells = used_as_cells(arg, &cap.names, is_builder);
        let mut handed = HandedToCalls {
            names: &cap.cell_names,
            found: HashSet::new(),
        };
        visit_closure(&mut handed, arg);
        cells.extend(handed.found);
        cells
    };
    helpers |= !cells.is_empty();
    let given = if matches!(kind, ClosureKind::Computed | ClosureKind::Action) {
        let paths = path_captures(arg, &scope, &cap.names, kind == ClosureKind::Action);
        captures_object_with_paths(&cap.names, &cells, &paths)
    } else {
        captures_object(&cap.names, &cells)
    };
    let mut list: Vec<String> = params
        .items
        .iter()
        .map(|p| p.span.source_text(text).to_string())
        .collect();
    while list.len() < kind.captures_param() {
        list.push(kind.pad_name().to_string());
    }
    list.push(destructure.clone());
    let last_end = call
        .arguments
        .last()
        .map_or(arg.span().end, |a| a.span().end);
    edits.push(Edit::replace(params.span, format!("({})", list.join(", "))));
    if kind == ClosureKind::Lift {
        // Tagged: a lift's trailing arguments may also be its schema.
        edits.push(Edit::insert(
            last_end,
            format!(", {NS}.__captures({given})"),
        ));
        helpers = true;
    } else {
        edits.push(Edit::insert(last_end, format!(", {given}")));
    }
    (edits, helpers)
}

/// An event handler written inline in JSX (`onClick={() => count.increment(1)}`) becomes
/// an action, as the reference's transformer makes it: `__cf.__inlineAction((ev, { count })
/// => …, { count }, ["count"])`, the captures it uses as cells named. Nothing when the
/// function takes a rest parameter.
pub(crate) fn inline_handler(f: &ArrowFunctionExpression, scope: Scope, text: &str) -> Vec<Edit> {
    let mut cap = Captures::new(&scope);
    cap.visit_arrow_function_expression(f);
    if f.params.rest.is_some() {
        return vec![];
    }
    let mut edits = vec![Edit::insert(f.span.start, format!("{NS}.__inlineAction("))];
    if cap.names.is_empty() {
        edits.push(Edit::insert(f.span.end, ")".to_string()));
        return edits;
    }
    // Captures it uses as cells (or built as cells) are cells; the rest values.
    let mut cells = CellUses {
        names: &cap.names,
        found: HashSet::new(),
        is_builder: &|_| false,
    };
    cells.visit_arrow_function_expression(f);
    let mut cell_names: Vec<&String> = cap
        .names
        .iter()
        .filter(|n| cells.found.contains(*n) || cap.cell_names.contains(n))
        .collect();
    cell_names.dedup();
    let mut list: Vec<String> = f
        .params
        .items
        .iter()
        .map(|p| p.span.source_text(text).to_string())
        .collect();
    if list.is_empty() {
        list.push(ClosureKind::Action.pad_name().to_string());
    }
    list.truncate(1);
    list.push(format!("{{ {} }}", cap.names.join(", ")));
    edits.push(Edit::replace(
        f.params.span,
        format!("({})", list.join(", ")),
    ));
    let given = captures_object(&cap.names, &HashSet::new());
    let cells = serde_json::to_string(&cell_names).expect("names serialise");
    edits.push(Edit::insert(f.span.end, format!(", {given}, {cells})")));
    edits
}

/// For each capture the closure reads only through static fields
/// (`subject.title`, `subject?.items`), never whole, never calling a
/// method on it: those fields. Such a capture is handed over as an object
/// of its fields' references, so the derivation reads (and depends on)
/// what it uses, not the whole document behind the name: a piece's result
/// read for one field does not compute its UI, as in the reference, whose
/// transformer captures paths.
struct PathUses<'s> {
    scoping: &'s Scoping,
    /// Capture symbol → its name.
    names: HashMap<SymbolId, String>,
    fields: HashMap<String, BTreeSet<String>>,
    whole: HashSet<String>,
    /// An action's: a field used as a cell needs the whole capture.
    fields_as_cells: bool,
}

impl PathUses<'_> {
    /// Whether `id` names a module-level binding (so it reads the same where
    /// the captures object is built).
    fn module_level(&self, id: &IdentifierReference) -> bool {
        id.reference_id
            .get()
            .and_then(|r| self.scoping.get_reference(r).symbol_id())
            .is_some_and(|sym| self.scoping.symbol_scope_id(sym) == self.scoping.root_scope_id())
    }

    fn captured(&self, id: &IdentifierReference) -> Option<String> {
        let sym = self
            .scoping
            .get_reference(id.reference_id.get()?)
            .symbol_id()?;
        self.names.get(&sym).cloned()
    }
}

impl<'a> Visit<'a> for PathUses<'_> {
    fn visit_identifier_reference(&mut self, it: &IdentifierReference<'a>) {
        if let Some(n) = self.captured(it) {
            self.whole.insert(n);
        }
    }

    fn visit_static_member_expression(&mut self, it: &StaticMemberExpression<'a>) {
        if let Expression::Identifier(id) = &it.object {
            if let Some(n) = self.captured(id) {
                self.fields
                    .entry(n)
                    .or_default()
                    .insert(it.property.name.to_string());
                return;
            }
        }
        walk::walk_static_member_expression(self, it);
    }

    fn visit_computed_member_expression(
        &mut self,
        it: &oxc_ast::ast::ComputedMemberExpression<'a>,
    ) {
        // `name[NAME]`, `name[UI]`: a field keyed by a module-level symbol
        // (the API's imports), read as a path like a static one.
        if let (Expression::Identifier(id), Expression::Identifier(key)) =
            (&it.object, &it.expression)
        {
            if let (Some(n), true) = (self.captured(id), self.module_level(key)) {
                self.fields
                    .entry(n)
                    .or_default()
                    .insert(format!("[{}]", key.name));
                return;
            }
        }
        walk::walk_computed_member_expression(self, it);
    }

    fn visit_call_expression(&mut self, it: &CallExpression<'a>) {
        // `name.method(...)`: the method needs the value it is called on.
        if let Expression::StaticMemberExpression(m) = it.callee.get_inner_expression() {
            if let Expression::Identifier(id) = &m.object {
                if let Some(n) = self.captured(id) {
                    self.whole.insert(n);
                }
            }
            // An action's `name.field.get()` / `.set(…)`: the field is a cell
            // its type names inside a derived value, which only the whole
            // value hands out (sending to a field's stream is a path read).
            let method = m.property.name.as_str();
            if self.fields_as_cells
                && method != "send"
                && super::lower::CELL_METHODS.contains(&method)
            {
                if let Expression::StaticMemberExpression(inner) = m.object.get_inner_expression() {
                    if let Expression::Identifier(id) = inner.object.get_inner_expression() {
                        if let Some(n) = self.captured(id) {
                            self.whole.insert(n);
                        }
                    }
                }
            }
        }
        walk::walk_call_expression(self, it);
    }

    fn visit_simple_assignment_target(&mut self, it: &oxc_ast::ast::SimpleAssignmentTarget<'a>) {
        // Written to (`name.x = …`): the value itself, as before.
        if let oxc_ast::ast::SimpleAssignmentTarget::StaticMemberExpression(m) = it {
            if let Expression::Identifier(id) = &m.object {
                if let Some(n) = self.captured(id) {
                    self.whole.insert(n);
                }
            }
        }
        walk::walk_simple_assignment_target(self, it);
    }
}

/// The captures of `arg` read only through fields, with those fields.
fn path_captures(
    arg: &Argument,
    scope: &Scope,
    names: &[String],
    fields_as_cells: bool,
) -> HashMap<String, BTreeSet<String>> {
    let mut symbols = HashMap::new();
    for sym in scope.bound.iter() {
        let name = scope.scoping.symbol_name(*sym);
        if names.iter().any(|n| n == name) {
            symbols.insert(*sym, name.to_string());
        }
    }
    let mut uses = PathUses {
        scoping: scope.scoping,
        names: symbols,
        fields: HashMap::new(),
        whole: HashSet::new(),
        fields_as_cells,
    };
    visit_closure(&mut uses, arg);
    let whole = uses.whole;
    uses.fields.retain(|n, _| !whole.contains(n));
    uses.fields
}

/// Walks the closure `arg` (an arrow or a function expression) with `v`.
fn visit_closure<'a>(v: &mut impl Visit<'a>, arg: &Argument<'a>) {
    match arg {
        Argument::ArrowFunctionExpression(f) => v.visit_arrow_function_expression(f),
        Argument::FunctionExpression(f) => {
            walk::walk_function(v, f, oxc_semantic::ScopeFlags::Function)
        }
        _ => {}
    }
}

/// Which of `names` the closure `arg` uses as cells.
fn used_as_cells(
    arg: &Argument,
    names: &[String],
    is_builder: &dyn Fn(&oxc_ast::ast::Expression) -> bool,
) -> HashSet<String> {
    let mut uses = CellUses {
        names,
        found: HashSet::new(),
        is_builder,
    };
    visit_closure(&mut uses, arg);
    uses.found
}
