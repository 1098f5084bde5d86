//! Lowering of reactive expressions in a pattern body into derivations.
//!
//! A pattern body runs once, with references (not values) for everything reactive: its
//! parameters, the cells and derivations it creates, and whatever is computed from those. An
//! ordinary expression over such references (`total * 2`, `` `${n} items` ``,
//! `items.filter((i) => i.done).length`, `formatTotal(total)`) would run once on the references
//! themselves. The compiler turns each one into a derivation of the values it reads, as the
//! reference's transformer does:
//!
//! ```text
//! const label = count > 10 ? "many" : "few";
//!   → const label = __cf.computed(({ count }) => (count > 10 ? "many" : "few"), { count });
//! ```
//!
//! Sites lowered (the *value sites* of a pattern body): a `const`/`let` initializer, a returned
//! value (or an arrow's expression body), and inside those, recursively, object property values,
//! array elements, call arguments of API calls, and JSX attribute and child expressions.
//!
//! Not lowered, and why:
//! - a plain reference (`items`, `user.name`, `list[0]`, `items.length`): the reference itself
//!   is already reactive, and reads through it follow links;
//! - function literals: `computed`/`derive`/`lift`/`action`/`handler` callbacks are plain
//!   JavaScript run with values (their captures are made explicit by [`super::closures`]);
//! - calls of the API, of module-level patterns, handlers and lifts, and of capitalised names
//!   (patterns by convention): their arguments are lowered instead, so a pattern instantiated
//!   in the body stays part of the body's graph;
//! - an expression that would build graph (a call as above, a reactive `.map` whose callback
//!   renders JSX or binds handlers) is never wrapped whole: `?:`, `&&` and `||` around such
//!   branches become `ifElse`, `when` and `unless`, and other sites are descended into.
//!
//! A reactive `.map(fn)` whose callback builds graph runs `fn` per element as a sub-pattern
//! (the runtime's map node): its parameters are reactive and its body is lowered like a pattern
//! body. A map whose callback only computes values is an ordinary expression.
//!
//! A capture used as a cell inside the lowered expression (`count.get()`) is passed as a cell
//! (`__cf.__asCell`). A lowered expression may not read the clock or randomness
//! (`NONDETERMINISTIC_CALL`): a derivation must be a function of its inputs.
//!
//! Invariants: edits never overlap (a wrapped expression contains no other lowering edit); the
//! wrapped text is the author's, unchanged, so positions inside it still map back.

use std::collections::{HashMap, HashSet};

use oxc_ast::ast::{
    Argument, ArrayExpressionElement, Expression, FormalParameters, FunctionBody,
    IdentifierReference, JSXAttributeItem, JSXAttributeValue, JSXChild, JSXElement, JSXExpression,
    LogicalOperator, ObjectPropertyKind, Statement, StaticMemberExpression, TSType, TSTypeName,
};
use oxc_ast_visit::{walk, Visit};
use oxc_semantic::{Scoping, SymbolId};
use oxc_span::{GetSpan, Span};

use super::diagnostics::{codes, RawDiag};
use super::Edit;

/// Name of the namespace import the lowered code calls through.
pub(crate) const NS: &str = "__cf";

/// Methods that make a captured value a cell (it is read or written as one).
pub(crate) const CELL_METHODS: &[&str] = &[
    "get",
    "set",
    "update",
    "push",
    "key",
    "send",
    "remove",
    "sample",
    "increment",
    "addUnique",
    "removeByValue",
    "elementById",
    "equals",
    "resolveAsCell",
    "getAsNormalizedFullLink",
];

/// The name a call `name.method(...)` calls a cell method on: only a call counts, so
/// `child.update.send()` (a child's stream named `update`) does not make `child` a cell.
fn cell_method_receiver<'e>(
    call: &'e oxc_ast::ast::CallExpression,
) -> Option<&'e IdentifierReference<'e>> {
    match call.callee.get_inner_expression() {
        Expression::StaticMemberExpression(m)
            if CELL_METHODS.contains(&m.property.name.as_str()) =>
        {
            match m.object.get_inner_expression() {
                Expression::Identifier(id) => Some(id),
                _ => None,
            }
        }
        _ => None,
    }
}

/// What lowering a pattern body produced.
#[derive(Debug, Default)]
pub(crate) struct Lowered {
    pub edits: Vec<Edit>,
    pub diags: Vec<RawDiag>,
    /// Every reactive symbol of the body (and of its map callbacks): what closures capture.
    pub reactive: HashSet<SymbolId>,
    /// The body bindings built as cells (`new Writable(v)`, `Writable.of(v)`, `cell(v)`):
    /// typed `Writable<T>`, so a closure handing one to a helper hands on the cell.
    pub cells: HashSet<SymbolId>,
}

/// The module-level facts lowering needs.
pub(crate) struct Module<'s> {
    pub scoping: &'s Scoping,
    /// Symbols imported from commonfabric → export name.
    pub cf: &'s HashMap<SymbolId, String>,
    /// Module-level bindings to API results (patterns, handlers, lifts).
    pub builders: &'s HashSet<SymbolId>,
}

impl Module<'_> {
    /// Whether a callee builds graph (the API, module-level patterns, handlers and lifts,
    /// capitalised names).
    pub(crate) fn builder_callee(&self, callee: &Expression) -> bool {
        let l = Lower {
            m: self,
            out: Lowered::default(),
            local_builders: HashSet::new(),
            holders: HashSet::new(),
        };
        l.builder_callee(callee)
    }
}

/// Lowers one pattern callback: its parameters are reactive.
pub(crate) fn pattern_body(
    m: &Module,
    params: &FormalParameters,
    body: Option<&FunctionBody>,
    expression: Option<&Expression>,
) -> Lowered {
    let mut l = Lower {
        m,
        out: Lowered::default(),
        local_builders: HashSet::new(),
        holders: HashSet::new(),
    };
    l.callback(params, body, expression);
    l.out
}

struct Lower<'m, 's> {
    m: &'m Module<'s>,
    out: Lowered,
    /// Body bindings to factories (`const inc = handler(...)`).
    local_builders: HashSet<SymbolId>,
    /// Body bindings to plain object literals of references (`const ctx = { a, b }`):
    /// spreading one (`{ ...ctx, kind }`) copies references, so it stays structural.
    holders: HashSet<SymbolId>,
}

impl Lower<'_, '_> {
    fn callback(
        &mut self,
        params: &FormalParameters,
        body: Option<&FunctionBody>,
        expression: Option<&Expression>,
    ) {
        for p in &params.items {
            self.out.reactive.extend(
                p.pattern
                    .get_binding_identifiers()
                    .iter()
                    .filter_map(|b| b.symbol_id.get()),
            );
        }
        if let Some(e) = expression {
            self.site(e);
        }
        for s in body.map(|b| &b.statements).into_iter().flatten() {
            self.statement(s);
        }
    }

    /// A function literal run in the body with plain arguments: its value sites are lowered,
    /// its parameters are not reactive. Anything else is left alone.
    fn plain_function(&mut self, f: &Expression) {
        let (expression, body) = match f.get_inner_expression() {
            Expression::ArrowFunctionExpression(a) => {
                (a.body.as_expression(), a.body.as_function_body())
            }
            Expression::FunctionExpression(fe) => (None, fe.body.as_deref()),
            _ => return,
        };
        if let Some(e) = expression {
            self.site(e);
        }
        for s in body.map(|b| &b.statements).into_iter().flatten() {
            self.statement(s);
        }
    }

    fn statement(&mut self, s: &Statement) {
        match s {
            Statement::VariableDeclaration(v) => {
                for d in &v.declarations {
                    let Some(init) = &d.init else { continue };
                    if self.factory_call(init) {
                        // `const inc = handler(...)` in the body: a factory, called later.
                        self.local_builders.extend(
                            d.id.get_binding_identifiers()
                                .iter()
                                .filter_map(|b| b.symbol_id.get()),
                        );
                        continue;
                    }
                    self.site(init);
                    if let Expression::ObjectExpression(o) = init.get_inner_expression() {
                        if o.properties
                            .iter()
                            .all(|p| matches!(p, ObjectPropertyKind::ObjectProperty(_)))
                        {
                            self.holders.extend(
                                d.id.get_binding_identifiers()
                                    .iter()
                                    .filter_map(|b| b.symbol_id.get()),
                            );
                        }
                    }
                    if self.cell_init(init) {
                        self.out.cells.extend(
                            d.id.get_binding_identifiers()
                                .iter()
                                .filter_map(|b| b.symbol_id.get()),
                        );
                    }
                    if self.reactive_init(init) {
                        self.out.reactive.extend(
                            d.id.get_binding_identifiers()
                                .iter()
                                .filter_map(|b| b.symbol_id.get()),
                        );
                    }
                }
            }
            Statement::ReturnStatement(r) => {
                if let Some(a) = &r.argument {
                    self.site(a);
                }
            }
            _ => {}
        }
    }

    /// `handler(...)`, `lift(...)`, `pattern(...)`: a call of the API that returns a factory.
    fn factory_call(&self, e: &Expression) -> bool {
        let Expression::CallExpression(c) = e.get_inner_expression() else {
            return false;
        };
        let Expression::Identifier(id) = c.callee.get_inner_expression() else {
            return false;
        };
        self.symbol_of(id)
            .and_then(|s| self.m.cf.get(&s))
            .is_some_and(|api| matches!(api.as_str(), "handler" | "lift" | "pattern" | "recipe"))
    }

    /// Whether a body binding holds something reactive: not a function, and computed from
    /// something reactive or by a call (an API call, a pattern, a helper: all may be).
    fn reactive_init(&self, e: &Expression) -> bool {
        match e.get_inner_expression() {
            Expression::ArrowFunctionExpression(_) | Expression::FunctionExpression(_) => false,
            // `new Writable(v)`, `new Writable.perSession(v)`: the reference's constructor
            // spellings of a cell.
            Expression::NewExpression(n) if self.api_constructor(&n.callee) => true,
            inner => self.mentions(inner) || contains_call(inner),
        }
    }

    /// Whether a binding's initializer builds a cell: the API's constructor, its `.of`, or
    /// its `cell(v)`.
    fn cell_init(&self, e: &Expression) -> bool {
        let api_named = |e: &Expression, names: &[&str]| {
            matches!(e.get_inner_expression(), Expression::Identifier(id)
                if self.symbol_of(id).and_then(|s| self.m.cf.get(&s))
                    .is_some_and(|api| names.contains(&api.as_str())))
        };
        const CELLS: &[&str] = &["Writable", "Cell", "cell"];
        match e.get_inner_expression() {
            Expression::NewExpression(n) => self.api_constructor(&n.callee),
            // `wish<Writable<T>>(...).result`: a cell of the space's.
            Expression::StaticMemberExpression(m) if m.property.name == "result" => {
                matches!(m.object.get_inner_expression(), Expression::CallExpression(c)
                    if api_named(&c.callee, &["wish"])
                        && c.type_arguments.as_ref().and_then(|a| a.params.first()).is_some_and(
                            |t| matches!(t, TSType::TSTypeReference(r)
                                if matches!(&r.type_name, TSTypeName::IdentifierReference(i)
                                    if CELLS.contains(&i.name.as_str())))))
            }
            Expression::CallExpression(c) => match c.callee.get_inner_expression() {
                Expression::StaticMemberExpression(m) => {
                    (m.property.name == "of" && api_named(&m.object, CELLS))
                        // `new Writable(v).for("name")`: the same cell, named.
                        || (m.property.name == "for" && self.cell_init(&m.object))
                }
                callee => api_named(callee, &["cell"]),
            },
            _ => false,
        }
    }

    // ----- classification ------------------------------------------------------------------

    /// `Writable` or `Writable.perSession` (and the like), imported from the API.
    fn api_constructor(&self, callee: &Expression) -> bool {
        let api = |e: &Expression| {
            matches!(e.get_inner_expression(), Expression::Identifier(id)
                if self.symbol_of(id).is_some_and(|s| self.m.cf.contains_key(&s)))
        };
        api(callee)
            || matches!(callee.get_inner_expression(),
                Expression::StaticMemberExpression(m) if api(&m.object))
    }

    /// A body binding to a plain object literal (see `holders`).
    fn is_holder(&self, e: &Expression) -> bool {
        matches!(e.get_inner_expression(), Expression::Identifier(id)
            if self.symbol_of(id).is_some_and(|s| self.holders.contains(&s)))
    }

    fn symbol_of(&self, id: &IdentifierReference) -> Option<SymbolId> {
        self.m
            .scoping
            .get_reference(id.reference_id.get()?)
            .symbol_id()
    }

    fn mentions(&self, e: &Expression) -> bool {
        let mut v = Mentions {
            lower: self,
            found: false,
        };
        v.visit_expression(e);
        v.found
    }

    /// A callee whose call builds graph rather than computing a value.
    fn builder_callee(&self, callee: &Expression) -> bool {
        match callee.get_inner_expression() {
            Expression::Identifier(id) => {
                let sym = self.symbol_of(id);
                sym.is_some_and(|s| {
                    self.m.cf.contains_key(&s)
                        || self.m.builders.contains(&s)
                        || self.local_builders.contains(&s)
                }) || (sym.is_some() && id.name.starts_with(|c: char| c.is_ascii_uppercase()))
            }
            Expression::CallExpression(c) => self.builder_callee(&c.callee),
            Expression::StaticMemberExpression(s) => {
                s.property.name == "key"
                    || matches!(s.object.get_inner_expression(), Expression::Identifier(id)
                        if self.symbol_of(id).is_some_and(|s| self.m.cf.contains_key(&s)))
            }
            _ => false,
        }
    }

    /// `recv.map(fn)` over something reactive, where `fn` renders or builds: a sub-pattern.
    fn subpattern_map<'b, 'a>(
        &self,
        e: &'b Expression<'a>,
    ) -> Option<(&'b Expression<'a>, &'b Argument<'a>)> {
        let Expression::CallExpression(c) = e.get_inner_expression() else {
            return None;
        };
        let Expression::StaticMemberExpression(s) = c.callee.get_inner_expression() else {
            return None;
        };
        let f = c.arguments.first()?;
        (s.property.name == "map" && self.callback_builds(f) && self.mentions(&s.object))
            .then_some((&s.object, f))
    }

    /// Whether a callback's body renders JSX or builds graph.
    fn callback_builds(&self, f: &Argument) -> bool {
        match f {
            Argument::ArrowFunctionExpression(a) => self.arrow_builds(a),
            Argument::FunctionExpression(fe) => fe
                .body
                .as_ref()
                .is_some_and(|b| self.builds_in(&b.statements)),
            _ => false,
        }
    }

    fn arrow_builds(&self, a: &oxc_ast::ast::ArrowFunctionExpression) -> bool {
        match (a.body.as_function_body(), a.body.as_expression()) {
            (Some(b), _) => self.builds_in(&b.statements),
            (None, Some(e)) => self.builds(e),
            _ => false,
        }
    }

    fn builds_in(&self, stmts: &[Statement]) -> bool {
        let mut v = Builds {
            lower: self,
            found: false,
        };
        for s in stmts {
            v.visit_statement(s);
        }
        v.found
    }

    /// Whether an expression builds graph (so it cannot run inside a derivation).
    fn builds(&self, e: &Expression) -> bool {
        let mut v = Builds {
            lower: self,
            found: false,
        };
        v.visit_expression(e);
        v.found
    }

    // ----- sites ---------------------------------------------------------------------------

    fn site(&mut self, e: &Expression) {
        let inner = e.get_inner_expression();
        if is_plain_ref(inner) {
            return;
        }
        let builds = self.builds(inner);
        if !builds && !self.mentions(inner) {
            return;
        }
        // `recv.mapWithPattern(Pattern, params)`: the reference's map of a
        // pattern over a reactive list, a map node here too (its arguments
        // are a pattern and plain params: nothing to lower in them).
        if let Expression::CallExpression(c) = inner {
            if let Expression::StaticMemberExpression(s) = c.callee.get_inner_expression() {
                if s.property.name == "mapWithPattern" && self.mentions(&s.object) {
                    self.site(&s.object);
                    return;
                }
            }
        }
        if let Some((recv, f)) = self.subpattern_map(inner) {
            self.site(recv);
            match f {
                Argument::ArrowFunctionExpression(a) => {
                    self.callback(&a.params, a.body.as_function_body(), a.body.as_expression())
                }
                Argument::FunctionExpression(fe) => {
                    self.callback(&fe.params, fe.body.as_deref(), None)
                }
                _ => {}
            }
            return;
        }
        match inner {
            Expression::ArrowFunctionExpression(_) | Expression::FunctionExpression(_) => {}
            Expression::ObjectExpression(o) => {
                let reactive_spread = o.properties.iter().any(|p| {
                    matches!(p, ObjectPropertyKind::SpreadProperty(s)
                        if self.mentions(&s.argument) && !self.is_holder(&s.argument))
                });
                if reactive_spread && !builds {
                    return self.wrap(inner);
                }
                for p in &o.properties {
                    if let ObjectPropertyKind::ObjectProperty(p) = p {
                        self.site(&p.value);
                    }
                }
            }
            Expression::ArrayExpression(a) => {
                let reactive_spread = a.elements.iter().any(|el| {
                    matches!(el, ArrayExpressionElement::SpreadElement(s) if self.mentions(&s.argument))
                });
                if reactive_spread && !builds {
                    return self.wrap(inner);
                }
                for el in &a.elements {
                    if let Some(x) = el.as_expression() {
                        self.site(x);
                    }
                }
            }
            Expression::JSXElement(j) => self.jsx(j),
            Expression::JSXFragment(f) => self.jsx_children(&f.children),
            Expression::CallExpression(c) if self.builder_callee(&c.callee) => {
                for a in &c.arguments {
                    if let Some(x) = a.as_expression() {
                        self.site(x);
                    }
                }
            }
            Expression::TaggedTemplateExpression(t) if self.builder_callee(&t.tag) => {
                for x in &t.quasi.expressions {
                    self.site(x);
                }
            }
            Expression::ConditionalExpression(c) if builds => {
                if self.mentions(&c.test) {
                    // ifElse(test, a, b): the branches stay in the body.
                    self.as_api_call("ifElse", c.span, &[&c.test, &c.consequent, &c.alternate]);
                } else {
                    self.site(&c.consequent);
                    self.site(&c.alternate);
                }
            }
            Expression::LogicalExpression(l)
                if builds && matches!(l.operator, LogicalOperator::And | LogicalOperator::Or) =>
            {
                if self.mentions(&l.left) {
                    let api = if l.operator == LogicalOperator::And {
                        "when"
                    } else {
                        "unless"
                    };
                    self.as_api_call(api, l.span, &[&l.left, &l.right]);
                } else {
                    self.site(&l.left);
                    self.site(&l.right);
                }
            }
            Expression::CallExpression(c) if builds => {
                // `(() => { ...; return <div/>; })()`: an IIFE in the body runs once, there.
                self.plain_function(&c.callee);
                for a in &c.arguments {
                    if self.callback_builds(a) {
                        // `[1, 2, 3].map((v) => <li>{count.get() + v}</li>)`: a callback over
                        // plain values that renders runs once, in the body; its value sites
                        // are lowered like the body's (its parameters stay plain).
                        if let Some(f) = a.as_expression() {
                            self.plain_function(f);
                        }
                    } else if let Some(x) = a.as_expression() {
                        self.site(x);
                    }
                }
            }
            _ if builds => {}
            _ => self.wrap(inner),
        }
    }

    /// `c ? a : b` (or `a && b`) → `__cf.ifElse(c, a, b)`: the operators between the
    /// operands become commas, and each operand is a site of its own.
    fn as_api_call(&mut self, api: &str, span: Span, operands: &[&Expression]) {
        self.out
            .edits
            .push(Edit::insert(span.start, format!("{NS}.{api}(")));
        for (i, x) in operands.iter().enumerate() {
            if i > 0 {
                let gap = Span::new(operands[i - 1].span().end, x.span().start);
                self.out.edits.push(Edit::replace(gap, ", ".to_string()));
            }
            self.site(x);
        }
        self.out.edits.push(Edit::insert(span.end, ")".to_string()));
    }

    fn jsx(&mut self, j: &JSXElement) {
        for a in &j.opening_element.attributes {
            if let JSXAttributeItem::Attribute(attr) = a {
                if let Some(JSXAttributeValue::ExpressionContainer(c)) = &attr.value {
                    if let Some(x) = c.expression.as_expression() {
                        self.site(x);
                    }
                }
            }
        }
        self.jsx_children(&j.children);
    }

    fn jsx_children(&mut self, children: &[JSXChild]) {
        for c in children {
            match c {
                JSXChild::Element(e) => self.jsx(e),
                JSXChild::Fragment(f) => self.jsx_children(&f.children),
                JSXChild::ExpressionContainer(c) => {
                    if let JSXExpression::EmptyExpression(_) = c.expression {
                        continue;
                    }
                    if let Some(x) = c.expression.as_expression() {
                        self.site(x);
                    }
                }
                _ => {}
            }
        }
    }

    /// `e` → `__cf.computed(({ a, b }) => (e), { a, b })`.
    fn wrap(&mut self, e: &Expression) {
        let mut caps = Captures {
            lower: self,
            seen: HashSet::new(),
            names: vec![],
            cells: HashSet::new(),
            clock: None,
        };
        caps.visit_expression(e);
        if let Some((span, what)) = caps.clock {
            self.out.diags.push(RawDiag::new(
                codes::NONDETERMINISTIC_CALL,
                span,
                format!(
                    "`{what}` in an expression computed from reactive values: a derivation must \
                     be a function of its inputs; read the time or randomness in a handler"
                ),
            ));
            return;
        }
        if caps.names.is_empty() {
            return;
        }
        let params = caps.names.join(", ");
        let given = captures_object(&caps.names, &caps.cells);
        let span = e.span();
        self.out.edits.push(Edit::insert(
            span.start,
            format!("{NS}.computed(({{ {params} }}) => ("),
        ));
        self.out
            .edits
            .push(Edit::insert(span.end, format!("), {given})")));
    }
}

/// A plain reference: a name or a chain of static property reads from one.
fn is_plain_ref(e: &Expression) -> bool {
    match e.get_inner_expression() {
        Expression::Identifier(_) => true,
        Expression::StaticMemberExpression(s) => is_plain_ref(&s.object),
        Expression::ComputedMemberExpression(c) => {
            matches!(
                c.expression.get_inner_expression(),
                Expression::NumericLiteral(_) | Expression::StringLiteral(_)
            ) && is_plain_ref(&c.object)
        }
        Expression::ChainExpression(c) => c
            .expression
            .as_member_expression()
            .is_some_and(|m| is_plain_ref(m.object())),
        _ => false,
    }
}

fn contains_call(e: &Expression) -> bool {
    struct Calls(bool);
    impl<'a> Visit<'a> for Calls {
        fn visit_call_expression(&mut self, _: &oxc_ast::ast::CallExpression<'a>) {
            self.0 = true;
        }
        fn visit_tagged_template_expression(
            &mut self,
            _: &oxc_ast::ast::TaggedTemplateExpression<'a>,
        ) {
            self.0 = true;
        }
        fn visit_arrow_function_expression(
            &mut self,
            _: &oxc_ast::ast::ArrowFunctionExpression<'a>,
        ) {
        }
        fn visit_function(&mut self, _: &oxc_ast::ast::Function<'a>, _: oxc_semantic::ScopeFlags) {}
    }
    let mut c = Calls(false);
    c.visit_expression(e);
    c.0
}

/// Finds references to reactive symbols.
struct Mentions<'l, 'm, 's> {
    lower: &'l Lower<'m, 's>,
    found: bool,
}

impl<'a> Visit<'a> for Mentions<'_, '_, '_> {
    fn visit_identifier_reference(&mut self, it: &IdentifierReference<'a>) {
        if self
            .lower
            .symbol_of(it)
            .is_some_and(|s| self.lower.out.reactive.contains(&s))
        {
            self.found = true;
        }
    }
}

/// Finds what builds graph: API calls, patterns, bound handlers, components, sub-pattern maps.
struct Builds<'l, 'm, 's> {
    lower: &'l Lower<'m, 's>,
    found: bool,
}

impl<'a> Visit<'a> for Builds<'_, '_, '_> {
    fn visit_call_expression(&mut self, it: &oxc_ast::ast::CallExpression<'a>) {
        if self.lower.builder_callee(&it.callee) {
            self.found = true;
            return;
        }
        if let Expression::StaticMemberExpression(s) = it.callee.get_inner_expression() {
            if s.property.name == "map"
                && it
                    .arguments
                    .first()
                    .is_some_and(|f| self.lower.callback_builds(f))
            {
                self.found = true;
                return;
            }
        }
        walk::walk_call_expression(self, it);
    }
    fn visit_tagged_template_expression(
        &mut self,
        it: &oxc_ast::ast::TaggedTemplateExpression<'a>,
    ) {
        if self.lower.builder_callee(&it.tag) {
            self.found = true;
            return;
        }
        walk::walk_tagged_template_expression(self, it);
    }
    fn visit_jsx_element(&mut self, _: &JSXElement<'a>) {
        // JSX is built in the body, where its handlers and components can be bound.
        self.found = true;
    }
    fn visit_jsx_fragment(&mut self, _: &oxc_ast::ast::JSXFragment<'a>) {
        self.found = true;
    }
}

/// The reactive names an expression reads, which it uses as cells, and any clock or
/// randomness it reads.
struct Captures<'l, 'm, 's> {
    lower: &'l Lower<'m, 's>,
    seen: HashSet<SymbolId>,
    names: Vec<String>,
    cells: HashSet<String>,
    clock: Option<(Span, &'static str)>,
}

impl<'a> Visit<'a> for Captures<'_, '_, '_> {
    fn visit_identifier_reference(&mut self, it: &IdentifierReference<'a>) {
        let Some(sym) = self.lower.symbol_of(it) else {
            // Unresolved: a global.
            return;
        };
        if self.lower.out.reactive.contains(&sym) && self.seen.insert(sym) {
            self.names.push(it.name.to_string());
        }
    }

    fn visit_static_member_expression(&mut self, it: &StaticMemberExpression<'a>) {
        if let Expression::Identifier(id) = it.object.get_inner_expression() {
            let global = self.lower.symbol_of(id).is_none();
            let what = match (id.name.as_str(), it.property.name.as_str()) {
                ("Date", "now") if global => Some("Date.now()"),
                ("Math", "random") if global => Some("Math.random()"),
                _ => None,
            };
            if let (Some(w), None) = (what, self.clock) {
                self.clock = Some((it.span, w));
            }
        }
        walk::walk_static_member_expression(self, it);
    }

    fn visit_call_expression(&mut self, it: &oxc_ast::ast::CallExpression<'a>) {
        if let Some(id) = cell_method_receiver(it) {
            if self
                .lower
                .symbol_of(id)
                .is_some_and(|s| self.lower.out.reactive.contains(&s))
            {
                self.cells.insert(id.name.to_string());
            }
        }
        walk::walk_call_expression(self, it);
    }

    fn visit_new_expression(&mut self, it: &oxc_ast::ast::NewExpression<'a>) {
        if let Expression::Identifier(id) = &it.callee {
            if id.name == "Date" && it.arguments.is_empty() && self.lower.symbol_of(id).is_none() {
                self.clock.get_or_insert((it.span, "new Date()"));
            }
        }
        walk::walk_new_expression(self, it);
    }
}

/// Which of `names` an expression or function uses as cells (`name.get()`, `name.set(...)`):
/// a capture so used is passed as a cell, not as its value.
pub(crate) struct CellUses<'n> {
    pub names: &'n [String],
    pub found: HashSet<String>,
    /// Whether a callee builds graph: a name handed to such a call (a handler bound inside a
    /// derivation) is handed on as a cell, so the handler can write it.
    pub is_builder: &'n dyn Fn(&Expression) -> bool,
}

impl CellUses<'_> {
    fn handed_on(&mut self, e: &Expression) {
        match e.get_inner_expression() {
            Expression::Identifier(id) if self.names.iter().any(|n| n == id.name.as_str()) => {
                self.found.insert(id.name.to_string());
            }
            Expression::ObjectExpression(o) => {
                for p in &o.properties {
                    if let ObjectPropertyKind::ObjectProperty(p) = p {
                        self.handed_on(&p.value);
                    }
                }
            }
            _ => {}
        }
    }
}

impl<'a> Visit<'a> for CellUses<'_> {
    fn visit_call_expression(&mut self, it: &oxc_ast::ast::CallExpression<'a>) {
        if let Some(id) = cell_method_receiver(it) {
            if self.names.iter().any(|n| n == id.name.as_str()) {
                self.found.insert(id.name.to_string());
            }
        }
        if (self.is_builder)(&it.callee) {
            for a in &it.arguments {
                if let Some(x) = a.as_expression() {
                    self.handed_on(x);
                }
            }
        }
        walk::walk_call_expression(self, it);
    }
}

/// `{ a, b }` with the names in `cells` passed as cells.
pub(crate) fn captures_object(names: &[String], cells: &HashSet<String>) -> String {
    let given: Vec<String> = names
        .iter()
        .map(|n| {
            if cells.contains(n) {
                format!("{n}: {NS}.__asCell({n})")
            } else {
                n.clone()
            }
        })
        .collect();
    format!("{{ {} }}", given.join(", "))
}
