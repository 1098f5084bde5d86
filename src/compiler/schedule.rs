//! Static validation of reserved result keys, above all `[SCHEDULE]`.
//!
//! The declaration is read by the host without running code, so the compiler accepts only the
//! shapes it can read with certainty and rejects (never clamps) everything else:
//! `[SCHEDULE]: [{ intervalMinutes: <integer literal 60..=44640>, callback: <stream> }, ...]`
//! or `{ cron: "<string literal>", timeZone?: "<string literal>", callback }` (five-field cron in
//! an IANA zone, at least 60 minutes between fires: `schedule::cron`), at most 4 entries, at the
//! root of the object a pattern callback returns.
//!
//! Invariants:
//! - every rule has its own code ([`codes`]) and its diagnostic points at the offending node;
//! - validation reports every problem it finds in a declaration, but returns entries only for a
//!   declaration with no problem at all, so metadata is never produced from a rejected one;
//! - `intervalMinutes` is judged from its source spelling, not its numeric value, so `1e2`,
//!   `0x78` and `120.0` are rejected even though they denote integers.

use oxc_ast::ast::{
    ArrayExpressionElement, Expression, ObjectExpression, ObjectPropertyKind, PropertyKey,
    PropertyKind, UnaryOperator,
};
use oxc_span::{GetSpan, Span};

use super::diagnostics::{codes, RawDiag};

/// Smallest accepted `intervalMinutes` (one hour).
pub const MIN_INTERVAL_MINUTES: u32 = 60;
/// Largest accepted `intervalMinutes` (31 days).
pub const MAX_INTERVAL_MINUTES: u32 = 44_640;
/// Most entries one `[SCHEDULE]` may declare.
pub const MAX_ENTRIES: usize = 4;

/// Reserved key names as exported by commonfabric, and their stored spellings.
pub const RESERVED_KEYS: &[(&str, &str)] = &[
    ("NAME", "$NAME"),
    ("UI", "$UI"),
    ("SCHEDULE", "$SCHEDULE"),
    ("TYPE", "$TYPE"),
    ("TILE_UI", "$TILE_UI"),
    ("CHIP_UI", "$CHIP_UI"),
    ("FS", "$FS"),
    ("TESTS", "$TESTS"),
];

/// One validated entry, positioned in the original source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawEntry {
    pub index: u32,
    /// 0 for a calendar entry.
    pub interval_minutes: u32,
    /// A calendar entry's expression and zone, as written.
    pub cron: Option<(String, Option<String>)>,
    /// A one-off entry's field expression (`at`).
    pub at: Option<Span>,
    pub span: Span,
    pub callback_span: Span,
}

/// A validated `[SCHEDULE]` declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawSchedule {
    pub span: Span,
    pub entries: Vec<RawEntry>,
}

/// Check one object literal's reserved keys. `reserved_of` names the commonfabric key a computed
/// property key refers to (`[SCHEDULE]` → `"SCHEDULE"`), if any. Returns the schedule declared
/// by a root object, when it is valid.
pub(crate) fn check_object(
    obj: &ObjectExpression,
    is_root: bool,
    text: &str,
    reserved_of: &dyn Fn(&PropertyKey) -> Option<String>,
    names: &dyn Fn(&Expression) -> Option<RawDiag>,
    diags: &mut Vec<RawDiag>,
) -> Option<RawSchedule> {
    let mut seen: Option<Span> = None;
    let mut result = None;
    for prop in &obj.properties {
        let ObjectPropertyKind::ObjectProperty(p) = prop else {
            continue;
        };
        let reserved = if p.computed {
            reserved_of(&p.key)
        } else {
            None
        };
        if reserved.as_deref() == Some("SCHEDULE") {
            if !is_root {
                diags.push(RawDiag::new(
                    codes::SCHEDULE_NOT_ROOT,
                    p.span,
                    "[SCHEDULE] may only appear at the top level of the object a pattern returns; \
                     here it would never be read",
                ));
            } else if seen.is_some() {
                diags.push(RawDiag::new(
                    codes::SCHEDULE_DUPLICATE,
                    p.span,
                    "[SCHEDULE] appears twice in this result; declare all entries in one list",
                ));
            } else {
                seen = Some(p.span);
                result = validate_value(&p.value, p.span, text, names, diags);
            }
            continue;
        }
        if reserved.is_some() {
            continue;
        }
        let Some(name) = p.key.static_name() else {
            continue;
        };
        if name == "$SCHEDULE" {
            diags.push(RawDiag::new(
                codes::RESERVED_KEY_LITERAL,
                p.key.span(),
                "write [SCHEDULE] (imported from \"commonfabric\") instead of the key \"$SCHEDULE\", \
                 so the schedule is checked",
            ));
        } else if is_root
            && name.starts_with('$')
            && !RESERVED_KEYS.iter().any(|(_, stored)| *stored == name)
        {
            let known: Vec<&str> = RESERVED_KEYS.iter().map(|(_, s)| *s).collect();
            diags.push(RawDiag::new(
                codes::RESERVED_KEY_UNKNOWN,
                p.key.span(),
                format!(
                    "\"{name}\" is not a reserved key; keys starting with $ at the top level of a \
                     pattern result are reserved (known: {})",
                    known.join(", ")
                ),
            ));
        }
    }
    result
}

/// Validate the value of a root `[SCHEDULE]` property.
fn validate_value(
    value: &Expression,
    prop_span: Span,
    text: &str,
    names: &dyn Fn(&Expression) -> Option<RawDiag>,
    diags: &mut Vec<RawDiag>,
) -> Option<RawSchedule> {
    let Expression::ArrayExpression(arr) = value else {
        diags.push(RawDiag::new(
            codes::SCHEDULE_NOT_ARRAY,
            value.span(),
            format!(
                "[SCHEDULE] must be an array literal of entries like \
                 [{{ intervalMinutes: 120, callback: refresh }}], not {}",
                describe(value)
            ),
        ));
        return None;
    };
    let before = diags.len();
    let mut entries = Vec::new();
    for (i, el) in arr.elements.iter().enumerate() {
        if i == MAX_ENTRIES {
            diags.push(RawDiag::new(
                codes::SCHEDULE_TOO_MANY,
                el.span(),
                format!(
                    "[SCHEDULE] may declare at most {MAX_ENTRIES} entries; this list has {}",
                    arr.elements.len()
                ),
            ));
        }
        match el {
            ArrayExpressionElement::SpreadElement(s) => diags.push(RawDiag::new(
                codes::SCHEDULE_SPREAD,
                s.span,
                "a spread is not allowed in [SCHEDULE]; write each entry out as an object literal",
            )),
            ArrayExpressionElement::Elision(e) => diags.push(RawDiag::new(
                codes::SCHEDULE_ENTRY_NOT_OBJECT,
                e.span,
                "an empty slot is not a schedule entry; remove the extra comma",
            )),
            other => {
                let e = other.to_expression();
                match e {
                    Expression::ObjectExpression(obj) => {
                        if let Some(entry) = validate_entry(obj, i as u32, text, names, diags) {
                            entries.push(entry);
                        }
                    }
                    _ => diags.push(RawDiag::new(
                        codes::SCHEDULE_ENTRY_NOT_OBJECT,
                        e.span(),
                        format!(
                            "each [SCHEDULE] entry must be an object literal \
                             {{ intervalMinutes, callback }}, not {}",
                            describe(e)
                        ),
                    )),
                }
            }
        }
    }
    (diags.len() == before).then_some(RawSchedule {
        span: prop_span,
        entries,
    })
}

fn validate_entry(
    obj: &ObjectExpression,
    index: u32,
    text: &str,
    names: &dyn Fn(&Expression) -> Option<RawDiag>,
    diags: &mut Vec<RawDiag>,
) -> Option<RawEntry> {
    let before = diags.len();
    let mut interval: Option<u32> = None;
    let mut has_interval = false;
    // `cron` and `timeZone`: whether present, and the literal when valid.
    let (mut has_cron, mut cron) = (false, None::<(String, Span)>);
    let (mut has_zone, mut zone) = (false, None::<(String, Span)>);
    // `at`: whether present, and the field expression when valid.
    let (mut has_at, mut at) = (false, None::<Span>);
    let mut callback: Option<Span> = None;
    // Set when a spread or computed key may supply keys we cannot see.
    let mut spread = false;
    for prop in &obj.properties {
        let p = match prop {
            ObjectPropertyKind::SpreadProperty(s) => {
                spread = true;
                diags.push(RawDiag::new(
                    codes::SCHEDULE_SPREAD,
                    s.span,
                    "a spread is not allowed in a schedule entry; write its keys \
                     (intervalMinutes or cron, and callback) out",
                ));
                continue;
            }
            ObjectPropertyKind::ObjectProperty(p) => p,
        };
        if p.computed {
            // The key's name is unknowable statically, so "missing key" would be a guess.
            spread = true;
            diags.push(RawDiag::new(
                codes::SCHEDULE_COMPUTED_KEY,
                p.key.span(),
                "keys of a schedule entry must be written plainly (intervalMinutes or cron, \
                 timeZone, callback), not computed",
            ));
            continue;
        }
        let name = p
            .key
            .static_name()
            .map(|c| c.to_string())
            .unwrap_or_default();
        let plain_value = p.kind == PropertyKind::Init && !p.method;
        match name.as_str() {
            "intervalMinutes" => {
                if has_interval {
                    diags.push(duplicate_key(p.key.span(), &name));
                    continue;
                }
                has_interval = true;
                if !plain_value {
                    diags.push(RawDiag::new(
                        codes::SCHEDULE_INTERVAL_NOT_LITERAL,
                        p.span,
                        "intervalMinutes must be written as an integer literal (60 to 44640), not \
                         a method or accessor",
                    ));
                    continue;
                }
                match check_interval(&p.value, text) {
                    Ok(v) => interval = Some(v),
                    Err(d) => diags.push(d),
                }
            }
            "cron" | "timeZone" => {
                let (has, slot, code) = if name == "cron" {
                    (&mut has_cron, &mut cron, codes::SCHEDULE_CRON_NOT_LITERAL)
                } else {
                    (
                        &mut has_zone,
                        &mut zone,
                        codes::SCHEDULE_TIMEZONE_NOT_LITERAL,
                    )
                };
                if *has {
                    diags.push(duplicate_key(p.key.span(), &name));
                    continue;
                }
                *has = true;
                match (&p.value, plain_value) {
                    (Expression::StringLiteral(s), true) => {
                        *slot = Some((s.value.to_string(), s.span));
                    }
                    (v, _) => diags.push(RawDiag::new(
                        code,
                        if plain_value { v.span() } else { p.span },
                        format!(
                            "{name} must be written as a string literal, not {}; the host reads \
                             it without running code",
                            if plain_value {
                                describe(v)
                            } else {
                                "a method or accessor"
                            }
                        ),
                    )),
                }
            }
            "at" => {
                if has_at {
                    diags.push(duplicate_key(p.key.span(), &name));
                    continue;
                }
                has_at = true;
                if !plain_value {
                    diags.push(RawDiag::new(
                        codes::SCHEDULE_AT_NOT_FIELD,
                        p.span,
                        "at must name a field of the pattern's state (like state.remindAt), not a \
                         method or accessor",
                    ));
                    continue;
                }
                match check_at_field(&p.value, names) {
                    Ok(()) => at = Some(p.value.span()),
                    Err(d) => diags.push(d),
                }
            }
            "callback" => {
                if callback.is_some() {
                    diags.push(duplicate_key(p.key.span(), &name));
                    continue;
                }
                if !plain_value {
                    callback = Some(p.span);
                    diags.push(not_stream(p.span, "an inline method"));
                    continue;
                }
                callback = Some(p.value.span());
                if let Some(d) = names(&p.value) {
                    // A name that is not defined, or a handler not bound to
                    // its state: what the module's bindings say.
                    diags.push(d);
                } else if let Some(what) = never_a_stream(&p.value) {
                    diags.push(not_stream(p.value.span(), what));
                }
            }
            other => diags.push(RawDiag::new(
                codes::SCHEDULE_UNKNOWN_KEY,
                p.key.span(),
                format!(
                    "unknown key `{other}` in a schedule entry; an entry has intervalMinutes and \
                     callback; cron, an optional timeZone and callback; or at and callback"
                ),
            )),
        }
    }
    let timed = has_interval || has_cron || has_at;
    if has_at && (has_interval || has_cron) {
        diags.push(RawDiag::new(
            codes::SCHEDULE_SHAPE_CONFLICT,
            obj.span,
            format!(
                "this schedule entry has both at and {}; an entry is either a one-off time from \
                 the piece's state, every N minutes, or a calendar time, so keep one",
                if has_interval {
                    "intervalMinutes"
                } else {
                    "cron"
                }
            ),
        ));
    } else if has_interval && has_cron {
        diags.push(RawDiag::new(
            codes::SCHEDULE_SHAPE_CONFLICT,
            obj.span,
            "this schedule entry has both intervalMinutes and cron; an entry is either every N \
             minutes or a calendar time, so keep one",
        ));
    }
    if has_zone && !has_cron && !has_at {
        diags.push(RawDiag::new(
            codes::SCHEDULE_TIMEZONE_WITHOUT_CRON,
            zone.as_ref().map_or(obj.span, |z| z.1),
            "timeZone applies to a cron entry only; an interval counts minutes from its \
             declaration in any zone",
        ));
    }
    if has_zone && has_at {
        diags.push(RawDiag::new(
            codes::SCHEDULE_TIMEZONE_WITHOUT_CRON,
            zone.as_ref().map_or(obj.span, |z| z.1),
            "timeZone applies to a cron entry only; an at field holds an instant (epoch \
             milliseconds, or an ISO-8601 time with its offset), which needs no zone",
        ));
    }
    // A spread may well supply the missing keys; one diagnostic per cause is enough.
    if !spread && (!timed || callback.is_none()) {
        let missing = match (timed, callback.is_some()) {
            (false, false) => "intervalMinutes (or cron, or at) and callback",
            (false, true) => "intervalMinutes (or cron, or at)",
            _ => "callback",
        };
        diags.push(RawDiag::new(
            codes::SCHEDULE_MISSING_KEY,
            obj.span,
            format!(
                "this schedule entry is missing {missing}; every entry needs intervalMinutes, \
                 cron or at, and callback"
            ),
        ));
    }
    let mut calendar = None;
    if let (Some((expr, expr_span)), true) = (&cron, diags.len() == before) {
        let z = zone.as_ref().map(|(z, _)| z.as_str());
        match crate::schedule::cron::CronSpec::parse(expr, z) {
            Ok(_) => calendar = Some((expr.clone(), z.map(String::from))),
            Err(p) => {
                let at = match (
                    &zone,
                    p.code == crate::schedule::cron::codes::TIMEZONE_UNKNOWN,
                ) {
                    (Some((_, zs)), true) => *zs,
                    _ => *expr_span,
                };
                diags.push(RawDiag::new(p.code, at, p.message));
            }
        }
    }
    if diags.len() != before {
        return None;
    }
    Some(RawEntry {
        index,
        interval_minutes: if calendar.is_some() || at.is_some() {
            0
        } else {
            interval?
        },
        cron: calendar,
        at,
        span: obj.span,
        callback_span: callback?,
    })
}

/// An `at` must name a field of the pattern's state: a name (a cell, or an
/// input taken apart in the parameter list) or a chain of plain property
/// accesses on one (`state.remindAt`, `state.next["at"]`). The host follows
/// that field; a literal, a call or any other expression names none.
fn check_at_field(
    value: &Expression,
    names: &dyn Fn(&Expression) -> Option<RawDiag>,
) -> Result<(), RawDiag> {
    let mut e = value.get_inner_expression();
    loop {
        match e {
            Expression::Identifier(_) => {
                return match names(e) {
                    Some(d) if d.code == codes::SCHEDULE_CALLBACK_UNDEFINED => Err(RawDiag {
                        code: codes::SCHEDULE_AT_UNDEFINED,
                        ..d
                    }),
                    _ => Ok(()),
                };
            }
            Expression::StaticMemberExpression(m) if !m.optional => {
                e = m.object.get_inner_expression();
            }
            Expression::ComputedMemberExpression(m)
                if !m.optional
                    && matches!(
                        m.expression,
                        Expression::StringLiteral(_) | Expression::NumericLiteral(_)
                    ) =>
            {
                e = m.object.get_inner_expression();
            }
            _ => {
                return Err(RawDiag::new(
                    codes::SCHEDULE_AT_NOT_FIELD,
                    value.span(),
                    format!(
                        "at must name a field of the pattern's state (an input like \
                         state.remindAt, or a cell it owns), not {}; the host follows that \
                         field, and a handler sets the time in it",
                        describe(value)
                    ),
                ))
            }
        }
    }
}

fn duplicate_key(span: Span, name: &str) -> RawDiag {
    RawDiag::new(
        codes::SCHEDULE_DUPLICATE_KEY,
        span,
        format!("`{name}` appears twice in this schedule entry"),
    )
}

fn not_stream(span: Span, what: &str) -> RawDiag {
    RawDiag::new(
        codes::SCHEDULE_CALLBACK_NOT_STREAM,
        span,
        format!(
            "callback must be a stream (a bound handler like refresh({{ items }}), an action(...), \
             or a stream from the pattern's inputs), not {what}"
        ),
    )
}

/// Values that can never evaluate to a stream; anything else (names, calls, member accesses) is
/// left for the runtime to check against the actual value.
fn never_a_stream(e: &Expression) -> Option<&'static str> {
    Some(match e.get_inner_expression() {
        Expression::ArrowFunctionExpression(_) | Expression::FunctionExpression(_) => {
            "an inline function (wrap it in action(...) or bind a handler)"
        }
        Expression::NumericLiteral(_)
        | Expression::StringLiteral(_)
        | Expression::BooleanLiteral(_)
        | Expression::NullLiteral(_)
        | Expression::BigIntLiteral(_)
        | Expression::RegExpLiteral(_)
        | Expression::TemplateLiteral(_) => "a literal",
        Expression::ObjectExpression(_) => "an object literal",
        Expression::ArrayExpression(_) => "an array literal",
        Expression::ClassExpression(_) => "a class",
        Expression::JSXElement(_) | Expression::JSXFragment(_) => "JSX",
        _ => return None,
    })
}

/// A short description of an expression's form, for messages.
pub(crate) fn describe(e: &Expression) -> &'static str {
    match e {
        Expression::Identifier(_) => "a variable",
        Expression::CallExpression(_) | Expression::NewExpression(_) => "a function call",
        Expression::ConditionalExpression(_) => "a conditional expression",
        Expression::TemplateLiteral(_) => "a template string",
        Expression::ParenthesizedExpression(_) => "a parenthesised expression",
        Expression::BinaryExpression(_) | Expression::LogicalExpression(_) => {
            "a computed expression"
        }
        Expression::UnaryExpression(_) => "a unary expression",
        Expression::StaticMemberExpression(_)
        | Expression::ComputedMemberExpression(_)
        | Expression::PrivateFieldExpression(_) => "a property access",
        Expression::ObjectExpression(_) => "an object",
        Expression::ArrayExpression(_) => "an array",
        Expression::StringLiteral(_) => "a string",
        Expression::NumericLiteral(_) => "a number",
        Expression::BooleanLiteral(_) => "a boolean",
        Expression::NullLiteral(_) => "null",
        Expression::ArrowFunctionExpression(_) | Expression::FunctionExpression(_) => "a function",
        Expression::TSAsExpression(_)
        | Expression::TSSatisfiesExpression(_)
        | Expression::TSTypeAssertion(_)
        | Expression::TSNonNullExpression(_) => "a type-asserted expression",
        _ => "this expression",
    }
}

/// Judge `intervalMinutes` from its spelling.
fn check_interval(e: &Expression, text: &str) -> Result<u32, RawDiag> {
    let (lit_span, negative) = match e {
        Expression::NumericLiteral(n) => (n.span, false),
        Expression::UnaryExpression(u)
            if u.operator == UnaryOperator::UnaryNegation
                && matches!(u.argument, Expression::NumericLiteral(_)) =>
        {
            (u.argument.span(), true)
        }
        Expression::StringLiteral(s) => {
            return Err(RawDiag::new(
                codes::SCHEDULE_INTERVAL_NOT_NUMBER,
                s.span,
                format!(
                "intervalMinutes must be a number, not a string (got \"{}\"); remove the quotes",
                s.value
            ),
            ))
        }
        Expression::BooleanLiteral(_)
        | Expression::NullLiteral(_)
        | Expression::BigIntLiteral(_) => {
            return Err(RawDiag::new(
                codes::SCHEDULE_INTERVAL_NOT_NUMBER,
                e.span(),
                format!(
                    "intervalMinutes must be a plain number of minutes (got {})",
                    e.span().source_text(text)
                ),
            ))
        }
        other => {
            return Err(RawDiag::new(
                codes::SCHEDULE_INTERVAL_NOT_LITERAL,
                other.span(),
                format!(
                    "intervalMinutes must be written as an integer literal (60 to 44640), not {} \
                     (got {}); the host reads it without running code",
                    describe(other),
                    snippet(other.span().source_text(text))
                ),
            ))
        }
    };
    let raw = lit_span.source_text(text);
    let got = if negative {
        format!("-{raw}")
    } else {
        raw.to_string()
    };
    let lower = raw.to_ascii_lowercase();
    let radix_prefixed =
        lower.starts_with("0x") || lower.starts_with("0o") || lower.starts_with("0b");
    if radix_prefixed || raw.contains('_') || lower.contains('e') {
        return Err(RawDiag::new(
            codes::SCHEDULE_INTERVAL_NOT_DECIMAL,
            e.span(),
            format!(
                "intervalMinutes must be written as a plain decimal integer such as 120 (got {got})"
            ),
        ));
    }
    if raw.contains('.') {
        return Err(RawDiag::new(
            codes::SCHEDULE_INTERVAL_NOT_INTEGER,
            e.span(),
            format!("intervalMinutes must be a whole number of minutes (got {got})"),
        ));
    }
    if raw.len() > 1 && raw.starts_with('0') {
        return Err(RawDiag::new(
            codes::SCHEDULE_INTERVAL_NOT_DECIMAL,
            e.span(),
            format!("intervalMinutes must be written without leading zeros (got {got})"),
        ));
    }
    // Digits only from here; anything too long to parse is certainly too large.
    let value: u64 = raw.parse().unwrap_or(u64::MAX);
    if negative || value < u64::from(MIN_INTERVAL_MINUTES) {
        return Err(RawDiag::new(
            codes::SCHEDULE_INTERVAL_TOO_SMALL,
            e.span(),
            format!("intervalMinutes must be at least {MIN_INTERVAL_MINUTES} (got {got})"),
        ));
    }
    if value > u64::from(MAX_INTERVAL_MINUTES) {
        return Err(RawDiag::new(
            codes::SCHEDULE_INTERVAL_TOO_LARGE,
            e.span(),
            format!("intervalMinutes must be at most {MAX_INTERVAL_MINUTES} (31 days) (got {got})"),
        ));
    }
    Ok(value as u32)
}

/// At most one line of at most 40 characters of source, for quoting in a message.
fn snippet(s: &str) -> String {
    let first = s.lines().next().unwrap_or("");
    if first.chars().count() > 40 || first.len() != s.len() {
        format!("{}…", first.chars().take(40).collect::<String>())
    } else {
        first.to_string()
    }
}
