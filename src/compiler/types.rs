//! Schema extraction from TypeScript types, without running anything.
//!
//! Pass 1 converts the type arguments of `pattern`/`handler`/`lift` calls and every module-level
//! `interface`/`type` declaration into an owned, allocator-free IR ([`Ty`]); after every module
//! of the program has been analysed, [`SchemaGen`] resolves names across modules and renders
//! JSON-Schema-like objects.
//!
//! The schema dialect (what the runtime reads):
//! - primitives: `{"type": "string" | "number" | "boolean" | "null"}`; `any`/`unknown` and
//!   anything not understood: `{}` (accept anything);
//! - literal types and unions of same-typed literals: `{"type": T, "enum": [...]}`;
//! - `T[]`/`Array<T>`: `{"type": "array", "items": S}`; tuples add `prefixItems`;
//! - object types: `{"type": "object", "properties": {...}, "required": [...]}` (`required` lists
//!   non-optional properties without a default, omitted when empty); index signatures and
//!   `Record<K, V>` give `additionalProperties`;
//! - other unions: `{"anyOf": [...]}` (`undefined` members dropped); intersections of objects
//!   are merged, others become `{"allOf": [...]}`;
//! - `Default<T, V>`: schema of `T` plus `"default": V` (V must be a literal type);
//! - `Cell<T>`/`Writable<T>` (and `ReadonlyCell`, `WriteonlyCell`, `ComparableCell`,
//!   `OpaqueCell`): schema of `T` plus `"asCell": true`; `Stream<T>`: plus
//!   `"asStream": true`; `OpaqueRef<T>`: schema of `T`; `VNode`: `{"type": "object"}`.
//!
//! Invariants: generation is deterministic (object keys are sorted by serde_json); a recursive
//! type is cut at its second occurrence with `{}`, so generation always terminates.

use std::collections::HashMap;

use oxc_ast::ast::{
    PropertyKey, TSLiteral, TSSignature, TSTupleElement, TSType, TSTypeName,
    TSTypeParameterDeclaration, UnaryOperator,
};
use oxc_span::GetSpan;
use serde_json::{json, Map, Value};

/// Owned type IR: enough of TypeScript's type language to describe pattern data.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ty {
    Any,
    String,
    Number,
    Boolean,
    Null,
    Undefined,
    Lit(Value),
    Array(Box<Ty>),
    Tuple(Vec<Ty>),
    Obj(ObjTy),
    Union(Vec<Ty>),
    Inter(Vec<Ty>),
    Ref(RefTy),
    /// `typeof NAME`: the type of a module-level value, used as a default.
    Query(QueryTy),
}

/// `typeof NAME`, resolved late (the const may be imported).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QueryTy {
    pub name: String,
    pub module: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ObjTy {
    pub props: Vec<Prop>,
    pub index: Option<Box<Ty>>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Prop {
    pub name: String,
    pub optional: bool,
    pub ty: Ty,
}

/// A named type reference, resolved late so imported types work across modules.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RefTy {
    pub name: String,
    pub args: Vec<Ty>,
    pub arg_spans: Vec<(u32, u32)>,
    /// Index of the module whose scope the name is looked up in.
    pub module: usize,
}

/// A module-level `interface` or `type` declaration.
#[derive(Debug, Clone)]
pub(crate) struct TypeDecl {
    pub params: Vec<String>,
    pub body: Ty,
}

/// Where a type name imported into a module comes from.
#[derive(Debug, Clone)]
pub(crate) enum ImportTarget {
    Commonfabric(String),
    Module { module: usize, name: String },
}

/// The type-level view of one module.
#[derive(Debug, Clone, Default)]
pub(crate) struct TypeScope {
    pub decls: HashMap<String, TypeDecl>,
    pub imports: HashMap<String, ImportTarget>,
    /// Exported name → local name.
    pub exports: HashMap<String, String>,
    /// Module-level `const`s (and why the others cannot be defaults).
    pub consts: HashMap<String, ConstValue>,
}

/// A module-level binding's value as `Default<T, typeof NAME>` sees it: the
/// statically evaluated initializer of a `const`, or why there is none.
pub(crate) type ConstValue = Result<Value, String>;

/// Converts oxc type nodes of one module into [`Ty`].
pub(crate) struct TyConv<'s> {
    pub module: usize,
    pub text: &'s str,
}

impl TyConv<'_> {
    pub fn convert(&self, t: &TSType) -> Ty {
        match t {
            TSType::TSAnyKeyword(_) | TSType::TSUnknownKeyword(_) => Ty::Any,
            TSType::TSStringKeyword(_) => Ty::String,
            TSType::TSNumberKeyword(_) | TSType::TSBigIntKeyword(_) => Ty::Number,
            TSType::TSBooleanKeyword(_) => Ty::Boolean,
            TSType::TSNullKeyword(_) => Ty::Null,
            TSType::TSUndefinedKeyword(_) | TSType::TSVoidKeyword(_) => Ty::Undefined,
            TSType::TSObjectKeyword(_) => Ty::Obj(ObjTy {
                props: vec![],
                index: None,
            }),
            TSType::TSLiteralType(l) => match &l.literal {
                TSLiteral::BooleanLiteral(b) => Ty::Lit(Value::Bool(b.value)),
                TSLiteral::NumericLiteral(n) => Ty::Lit(num(n.value)),
                TSLiteral::StringLiteral(s) => Ty::Lit(Value::String(s.value.to_string())),
                TSLiteral::TemplateLiteral(t) if t.expressions.is_empty() => {
                    let s: String = t
                        .quasis
                        .iter()
                        .map(|q| {
                            q.value
                                .cooked
                                .as_ref()
                                .map_or("", |c| c.as_str())
                                .to_string()
                        })
                        .collect();
                    Ty::Lit(Value::String(s))
                }
                TSLiteral::UnaryExpression(u) => match (&u.operator, &u.argument) {
                    (UnaryOperator::UnaryNegation, oxc_ast::ast::Expression::NumericLiteral(n)) => {
                        Ty::Lit(num(-n.value))
                    }
                    _ => Ty::Number,
                },
                TSLiteral::TemplateLiteral(_) => Ty::String,
                TSLiteral::BigIntLiteral(_) => Ty::Number,
            },
            TSType::TSArrayType(a) => Ty::Array(Box::new(self.convert(&a.element_type))),
            TSType::TSTupleType(t) => {
                Ty::Tuple(t.element_types.iter().map(|e| self.tuple_elem(e)).collect())
            }
            TSType::TSNamedTupleMember(m) => self.tuple_elem(&m.element_type),
            TSType::TSTypeLiteral(l) => Ty::Obj(self.members(&l.members)),
            TSType::TSUnionType(u) => Ty::Union(u.types.iter().map(|t| self.convert(t)).collect()),
            TSType::TSIntersectionType(i) => {
                Ty::Inter(i.types.iter().map(|t| self.convert(t)).collect())
            }
            TSType::TSParenthesizedType(p) => self.convert(&p.type_annotation),
            // `readonly T[]` is data-wise `T[]`; `keyof`/`unique` are not data shapes.
            TSType::TSTypeOperatorType(o) => match o.operator {
                oxc_ast::ast::TSTypeOperatorOperator::Readonly => self.convert(&o.type_annotation),
                _ => Ty::Any,
            },
            TSType::TSTypeQuery(q) => match &q.expr_name {
                oxc_ast::ast::TSTypeQueryExprName::IdentifierReference(i) => Ty::Query(QueryTy {
                    name: i.name.to_string(),
                    module: self.module,
                }),
                _ => Ty::Any,
            },
            TSType::TSTypeReference(r) => {
                let (args, arg_spans) = match &r.type_arguments {
                    Some(a) => (
                        a.params.iter().map(|t| self.convert(t)).collect(),
                        a.params
                            .iter()
                            .map(|t| (t.span().start, t.span().end))
                            .collect(),
                    ),
                    None => (vec![], vec![]),
                };
                Ty::Ref(RefTy {
                    name: type_name(&r.type_name),
                    args,
                    arg_spans,
                    module: self.module,
                })
            }
            _ => Ty::Any,
        }
    }

    fn tuple_elem(&self, e: &TSTupleElement) -> Ty {
        match e {
            TSTupleElement::TSOptionalType(o) => self.convert(&o.type_annotation),
            TSTupleElement::TSRestType(r) => self.convert(&r.type_annotation),
            other => other.as_ts_type().map_or(Ty::Any, |t| self.convert(t)),
        }
    }

    pub fn members(&self, members: &[TSSignature]) -> ObjTy {
        let mut obj = ObjTy {
            props: vec![],
            index: None,
        };
        for m in members {
            match m {
                TSSignature::TSPropertySignature(p) => {
                    let Some(name) = key_name(&p.key) else {
                        continue;
                    };
                    let ty = p
                        .type_annotation
                        .as_ref()
                        .map_or(Ty::Any, |a| self.convert(&a.type_annotation));
                    obj.props.push(Prop {
                        name,
                        optional: p.optional,
                        ty,
                    });
                }
                TSSignature::TSIndexSignature(i) => {
                    obj.index = Some(Box::new(self.convert(&i.type_annotation.type_annotation)));
                }
                // Methods are behaviour, not data; they have no schema.
                _ => {}
            }
        }
        obj
    }

    pub fn params(&self, p: Option<&TSTypeParameterDeclaration>) -> Vec<String> {
        p.map(|d| d.params.iter().map(|p| p.name.name.to_string()).collect())
            .unwrap_or_default()
    }
}

fn key_name(k: &PropertyKey) -> Option<String> {
    k.static_name().map(|c| c.to_string())
}

fn type_name(n: &TSTypeName) -> String {
    match n {
        TSTypeName::IdentifierReference(i) => i.name.to_string(),
        TSTypeName::QualifiedName(q) => format!("{}.{}", type_name(&q.left), q.right.name),
        TSTypeName::ThisExpression(_) => "this".to_string(),
    }
}

/// Numbers that are integers become JSON integers, so `Default<number, 0>` gives `0`, not `0.0`.
pub(crate) fn num(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        json!(v as i64)
    } else {
        serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
    }
}

/// A type error found while rendering a schema (module index, span, message).
#[derive(Debug, Clone)]
pub(crate) struct TypeError {
    pub module: usize,
    pub span: (u32, u32),
    pub message: String,
}

/// Renders [`Ty`] as schema JSON with cross-module name resolution.
pub(crate) struct SchemaGen<'m> {
    pub scopes: &'m [TypeScope],
    /// Source texts by module, for messages.
    pub texts: &'m [&'m str],
    active: Vec<(usize, String)>,
    pub errors: Vec<TypeError>,
    /// Set by [`SchemaGen::literal_value`] when a `typeof` default fails.
    why_not_literal: Option<String>,
}

enum Resolved<'m> {
    Decl(usize, &'m TypeDecl),
    Builtin(String),
}

impl<'m> SchemaGen<'m> {
    pub fn new(scopes: &'m [TypeScope], texts: &'m [&'m str]) -> Self {
        Self {
            scopes,
            texts,
            active: vec![],
            errors: vec![],
            why_not_literal: None,
        }
    }

    fn resolve(&self, module: usize, name: &str, depth: u32) -> Resolved<'m> {
        let scope = &self.scopes[module];
        if let Some(d) = scope.decls.get(name) {
            return Resolved::Decl(module, d);
        }
        match scope.imports.get(name) {
            Some(ImportTarget::Commonfabric(n)) => Resolved::Builtin(n.clone()),
            Some(ImportTarget::Module {
                module: m,
                name: exported,
            }) if depth < 16 => {
                let local = self.scopes[*m].exports.get(exported).cloned();
                match local {
                    Some(local) => self.resolve(*m, &local, depth + 1),
                    None => Resolved::Builtin(String::new()),
                }
            }
            // Globals (`Array`, `Record`) and commonfabric names used without an import.
            _ => Resolved::Builtin(name.to_string()),
        }
    }

    /// The value of a module-level const, following imports.
    fn resolve_const(&self, module: usize, name: &str, depth: u32) -> ConstValue {
        let scope = &self.scopes[module];
        if let Some(v) = scope.consts.get(name) {
            return v.clone();
        }
        match scope.imports.get(name) {
            Some(ImportTarget::Module {
                module: m,
                name: exported,
            }) if depth < 16 => match self.scopes[*m].exports.get(exported) {
                Some(local) => self.resolve_const(*m, local, depth + 1),
                None => Err(format!(
                    "`{name}` is not exported by the module it is imported from"
                )),
            },
            _ => Err(format!(
                "`{name}` is not a module-level const of this program"
            )),
        }
    }

    /// Render the schema of `ty`.
    pub fn schema(&mut self, ty: &Ty) -> Value {
        match ty {
            Ty::Any | Ty::Undefined => json!({}),
            Ty::String => json!({"type": "string"}),
            Ty::Number => json!({"type": "number"}),
            Ty::Boolean => json!({"type": "boolean"}),
            Ty::Null => json!({"type": "null"}),
            Ty::Lit(v) => json!({"type": json_type(v), "enum": [v]}),
            Ty::Array(t) => json!({"type": "array", "items": self.schema(t)}),
            Ty::Tuple(ts) => {
                let items: Vec<Value> = ts.iter().map(|t| self.schema(t)).collect();
                json!({"type": "array", "prefixItems": items})
            }
            Ty::Obj(o) => self.object(o),
            Ty::Union(ts) => self.union(ts),
            Ty::Inter(ts) => self.intersection(ts),
            Ty::Ref(r) => self.reference(r),
            Ty::Query(_) => json!({}),
        }
    }

    fn object(&mut self, o: &ObjTy) -> Value {
        let mut props = Map::new();
        let mut required = vec![];
        for p in &o.props {
            let s = self.schema(&p.ty);
            let optional =
                p.optional || matches!(&p.ty, Ty::Union(ts) if ts.contains(&Ty::Undefined));
            if !optional && s.get("default").is_none() {
                required.push(Value::String(p.name.clone()));
            }
            props.insert(p.name.clone(), s);
        }
        let mut out = json!({"type": "object", "properties": props});
        if !required.is_empty() {
            out["required"] = Value::Array(required);
        }
        if let Some(i) = &o.index {
            out["additionalProperties"] = self.schema(i);
        }
        out
    }

    fn union(&mut self, ts: &[Ty]) -> Value {
        let members: Vec<&Ty> = ts.iter().filter(|t| **t != Ty::Undefined).collect();
        if members.len() == 1 {
            return self.schema(members[0]);
        }
        if members.is_empty() {
            return json!({});
        }
        let lits: Option<Vec<&Value>> = members
            .iter()
            .map(|t| if let Ty::Lit(v) = t { Some(v) } else { None })
            .collect();
        if let Some(lits) = lits {
            let t = json_type(lits[0]);
            if lits.iter().all(|v| json_type(v) == t) {
                if t == "boolean" && lits.len() == 2 && lits[0] != lits[1] {
                    return json!({"type": "boolean"});
                }
                return json!({"type": t, "enum": lits});
            }
        }
        let mut any_of: Vec<Value> = members.iter().map(|t| self.schema(t)).collect();
        // `number | Default<0>`: the union's default is its `Default` member's, and that member's
        // type joins the others (once).
        let default = any_of
            .iter_mut()
            .find_map(|s| s.as_object_mut()?.remove("default"));
        if let Some(d) = default {
            let mut distinct: Vec<Value> = vec![];
            for s in any_of {
                if !distinct.contains(&s) {
                    distinct.push(s);
                }
            }
            let mut s = if distinct.len() == 1 {
                distinct.pop().unwrap_or_default()
            } else {
                json!({ "anyOf": distinct })
            };
            set(&mut s, "default", d);
            return s;
        }
        json!({ "anyOf": any_of })
    }

    fn intersection(&mut self, ts: &[Ty]) -> Value {
        let parts: Vec<Value> = ts.iter().map(|t| self.schema(t)).collect();
        if parts
            .iter()
            .all(|p| p.get("type") == Some(&json!("object")))
        {
            let mut props = Map::new();
            let mut required: Vec<Value> = vec![];
            for p in &parts {
                if let Some(Value::Object(ps)) = p.get("properties") {
                    for (k, v) in ps {
                        props.insert(k.clone(), v.clone());
                    }
                }
                if let Some(Value::Array(r)) = p.get("required") {
                    for k in r {
                        if !required.contains(k) {
                            required.push(k.clone());
                        }
                    }
                }
            }
            let mut out = json!({"type": "object", "properties": props});
            if !required.is_empty() {
                out["required"] = Value::Array(required);
            }
            return out;
        }
        json!({ "allOf": parts })
    }

    fn arg(&mut self, r: &RefTy, i: usize) -> Value {
        r.args.get(i).map_or(json!({}), |t| self.schema(t))
    }

    fn reference(&mut self, r: &RefTy) -> Value {
        match self.resolve(r.module, &r.name, 0) {
            Resolved::Decl(m, decl) => {
                let key = (m, r.name.clone());
                if self.active.contains(&key) {
                    // Recursive type: cut here so generation terminates.
                    return json!({});
                }
                let body = if decl.params.is_empty() {
                    decl.body.clone()
                } else {
                    subst(&decl.body, &decl.params, &r.args, m)
                };
                self.active.push(key);
                let s = self.schema(&body);
                self.active.pop();
                s
            }
            Resolved::Builtin(name) => match name.as_str() {
                // `Default<V>`: the newer one-argument spelling, whose type is the literal's,
                // widened (`Default<0>` is a number defaulting to 0).
                "Default" if r.args.len() == 1 => {
                    self.why_not_literal = None;
                    match self.literal_value(&r.args[0], 0) {
                        Some(value) => {
                            let mut s = match json_type(&value) {
                                "array" | "object" => self.arg(r, 0),
                                t => json!({ "type": t }),
                            };
                            set(&mut s, "default", value);
                            s
                        }
                        // Not a literal the compiler can evaluate (`typeof SOME_CONST` of a
                        // computed const): the type alone, as before this spelling was read.
                        None => self.arg(r, 0),
                    }
                }
                "Default" => {
                    let mut s = self.arg(r, 0);
                    if let Some(v) = r.args.get(1) {
                        self.why_not_literal = None;
                        match self.literal_value(v, 0) {
                            Some(value) => set(&mut s, "default", value),
                            None if self.why_not_literal.is_some() => {
                                let why = self.why_not_literal.take().unwrap_or_default();
                                self.errors.push(TypeError {
                                    module: r.module,
                                    span: r.arg_spans[1],
                                    message: format!(
                                        "the default in Default<T, typeof NAME> must be a const \
                                         the compiler can evaluate: {why}"
                                    ),
                                });
                            }
                            None => {
                                let span = r.arg_spans[1];
                                let text = self.texts[r.module]
                                    .get(span.0 as usize..span.1 as usize)
                                    .unwrap_or("");
                                self.errors.push(TypeError {
                                    module: r.module,
                                    span,
                                    message: format!(
                                        "the default in Default<T, V> must be a literal type (a \
                                         number, string, boolean, null, or an array or object of \
                                         those); `{text}` is not"
                                    ),
                                });
                            }
                        }
                    }
                    s
                }
                "Cell" | "Writable" | "ReadonlyCell" | "WriteonlyCell" | "ComparableCell"
                | "OpaqueCell" => {
                    let mut s = self.arg(r, 0);
                    set(&mut s, "asCell", Value::Bool(true));
                    s
                }
                "Stream" => {
                    let mut s = self.arg(r, 0);
                    set(&mut s, "asStream", Value::Bool(true));
                    s
                }
                // A scope is where a cell lives, not what it holds.
                "OpaqueRef" | "Opaque" | "Readonly" | "PerSpace" | "PerUser" | "PerSession"
                | "PerAny" | "Scoped" => self.arg(r, 0),
                "Array" | "ReadonlyArray" => json!({"type": "array", "items": self.arg(r, 0)}),
                "Record" => json!({"type": "object", "additionalProperties": self.arg(r, 1)}),
                "Partial" => {
                    let mut s = self.arg(r, 0);
                    if let Some(o) = s.as_object_mut() {
                        o.remove("required");
                    }
                    s
                }
                "VNode" => json!({"type": "object"}),
                _ => json!({}),
            },
        }
    }

    /// The JSON value a literal type stands for, or `None` when it is not a literal type.
    fn literal_value(&mut self, ty: &Ty, depth: u32) -> Option<Value> {
        if depth > 32 {
            return None;
        }
        match ty {
            Ty::Lit(v) => Some(v.clone()),
            Ty::Null => Some(Value::Null),
            Ty::Tuple(ts) => ts
                .iter()
                .map(|t| self.literal_value(t, depth + 1))
                .collect(),
            // `{ [k: string]: T }` and `Record<K, V>` as a default: empty.
            Ty::Obj(o) if o.index.is_some() && o.props.is_empty() => Some(json!({})),
            Ty::Obj(o) if o.index.is_none() => {
                let mut m = Map::new();
                for p in &o.props {
                    m.insert(p.name.clone(), self.literal_value(&p.ty, depth + 1)?);
                }
                Some(Value::Object(m))
            }
            Ty::Ref(r) => match self.resolve(r.module, &r.name, 0) {
                Resolved::Decl(_, d) if d.params.is_empty() => {
                    let body = d.body.clone();
                    self.literal_value(&body, depth + 1)
                }
                Resolved::Builtin(b) if b == "Record" => Some(json!({})),
                _ => None,
            },
            Ty::Query(q) => match self.resolve_const(q.module, &q.name, 0) {
                Ok(v) => Some(v),
                Err(why) => {
                    self.why_not_literal = Some(why);
                    None
                }
            },
            _ => None,
        }
    }
}

fn set(s: &mut Value, key: &str, v: Value) {
    if let Some(o) = s.as_object_mut() {
        o.insert(key.to_string(), v);
    }
}

/// The JSON-Schema type name of a value.
pub(crate) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Replace references to type parameters of a generic declaration (declared in `module`) by
/// the arguments given at the use site.
fn subst(ty: &Ty, params: &[String], args: &[Ty], module: usize) -> Ty {
    let go = |t: &Ty| subst(t, params, args, module);
    match ty {
        Ty::Ref(r) if r.module == module && r.args.is_empty() => {
            match params.iter().position(|p| *p == r.name) {
                Some(i) => args.get(i).cloned().unwrap_or(Ty::Any),
                None => ty.clone(),
            }
        }
        Ty::Ref(r) => Ty::Ref(RefTy {
            args: r.args.iter().map(go).collect(),
            ..r.clone()
        }),
        Ty::Array(t) => Ty::Array(Box::new(go(t))),
        Ty::Tuple(ts) => Ty::Tuple(ts.iter().map(go).collect()),
        Ty::Union(ts) => Ty::Union(ts.iter().map(go).collect()),
        Ty::Inter(ts) => Ty::Inter(ts.iter().map(go).collect()),
        Ty::Obj(o) => Ty::Obj(ObjTy {
            props: o
                .props
                .iter()
                .map(|p| Prop {
                    name: p.name.clone(),
                    optional: p.optional,
                    ty: go(&p.ty),
                })
                .collect(),
            index: o.index.as_ref().map(|i| Box::new(go(i))),
        }),
        other => other.clone(),
    }
}

/// Evaluates a const initializer statically: JSON-like literals, nested,
/// through `as`, `satisfies`, `!` and parentheses; `earlier` holds the
/// module's consts declared before it (a const may name another).
pub(crate) fn static_value(
    e: &oxc_ast::ast::Expression,
    text: &str,
    earlier: &HashMap<String, ConstValue>,
    depth: u32,
) -> ConstValue {
    use oxc_ast::ast::{ArrayExpressionElement, Expression as E, ObjectPropertyKind};
    if depth > 64 {
        return Err("it is nested too deeply".to_string());
    }
    let not = |what: &str| {
        let snippet: String = e.span().source_text(text).chars().take(60).collect();
        Err(format!("`{snippet}` is {what}"))
    };
    match e {
        E::NullLiteral(_) => Ok(Value::Null),
        E::BooleanLiteral(b) => Ok(Value::Bool(b.value)),
        E::NumericLiteral(n) => Ok(num(n.value)),
        E::StringLiteral(s) => Ok(Value::String(s.value.to_string())),
        E::TemplateLiteral(t) if t.expressions.is_empty() => Ok(Value::String(
            t.quasis
                .iter()
                .map(|q| q.value.cooked.as_ref().map_or("", |c| c.as_str()))
                .collect(),
        )),
        E::UnaryExpression(u)
            if matches!(
                u.operator,
                UnaryOperator::UnaryNegation | UnaryOperator::UnaryPlus
            ) =>
        {
            let v = static_value(&u.argument, text, earlier, depth + 1)?;
            let sign = if u.operator == UnaryOperator::UnaryNegation {
                -1.0
            } else {
                1.0
            };
            match v {
                Value::Number(n) => Ok(num(sign * n.as_f64().unwrap_or(0.0))),
                // -Infinity, -NaN: not JSON numbers, stored as JSON does.
                Value::Null if matches!(&u.argument, E::Identifier(_)) => Ok(Value::Null),
                _ => not("not a number"),
            }
        }
        // What JSON makes of them: `null`.
        E::Identifier(i) if i.name == "NaN" || i.name == "Infinity" => Ok(Value::Null),
        E::Identifier(i) if i.name == "undefined" => Ok(Value::Null),
        E::Identifier(i) => match earlier.get(i.name.as_str()) {
            Some(v) => v.clone(),
            None => not("not a module-level const declared before it"),
        },
        E::ParenthesizedExpression(p) => static_value(&p.expression, text, earlier, depth + 1),
        E::TSAsExpression(a) => static_value(&a.expression, text, earlier, depth + 1),
        E::TSSatisfiesExpression(a) => static_value(&a.expression, text, earlier, depth + 1),
        E::TSNonNullExpression(a) => static_value(&a.expression, text, earlier, depth + 1),
        E::TSTypeAssertion(a) => static_value(&a.expression, text, earlier, depth + 1),
        E::ArrayExpression(a) => {
            let mut out = Vec::with_capacity(a.elements.len());
            for el in &a.elements {
                out.push(match el {
                    ArrayExpressionElement::Elision(_) => Value::Null,
                    ArrayExpressionElement::SpreadElement(s) => {
                        return Err(format!(
                            "`{}` spreads a value the compiler does not evaluate",
                            s.span.source_text(text)
                        ))
                    }
                    other => match other.as_expression() {
                        Some(x) => static_value(x, text, earlier, depth + 1)?,
                        None => return not("not a literal"),
                    },
                });
            }
            Ok(Value::Array(out))
        }
        E::ObjectExpression(o) => {
            let mut out = Map::new();
            for p in &o.properties {
                let ObjectPropertyKind::ObjectProperty(p) = p else {
                    return not("an object with a spread");
                };
                if p.computed || p.method || p.kind != oxc_ast::ast::PropertyKind::Init {
                    return not("an object with a computed key, a method or an accessor");
                }
                let Some(key) = p.key.static_name() else {
                    return not("an object with a key that is not a name or a string");
                };
                let undefined = matches!(&p.value, E::Identifier(i) if i.name == "undefined");
                let v = static_value(&p.value, text, earlier, depth + 1)?;
                if !undefined {
                    out.insert(key.to_string(), v);
                }
            }
            Ok(Value::Object(out))
        }
        E::CallExpression(_) | E::NewExpression(_) => not("a call, evaluated only at run time"),
        _ => not("not a literal the compiler can evaluate"),
    }
}
