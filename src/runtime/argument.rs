//! A deploy's argument checked against the pattern's argument schema (the
//! types the compiler read from the pattern's TypeScript), so a piece never
//! starts from a value its own code cannot have been written for.
//!
//! What is checked: the type of every value present, at every depth the
//! schema describes (object properties and `additionalProperties`, array
//! items and tuple positions, literal enums, unions). What is not: fields
//! that are absent (the pattern's `Default`s fill them, or the pattern sees
//! `undefined`, as TypeScript's optional fields allow), and keys the schema
//! does not name (extra data is harmless). A schema part the compiler could
//! not describe (`{}`: `any`, `unknown`) accepts anything, as does a
//! stream.
//!
//! Pure: a function of the schema and the value.

use serde_json::Value;

/// The first place where a value does not fit its schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} must be {expected} (got {got})", display(.path))]
pub struct ArgumentMismatch {
    /// Where, from the argument's root: `["items", "0", "qty"]`.
    pub path: Vec<String>,
    /// What the schema wants there: `number`, `array of string`, `"a" | "b"`.
    pub expected: String,
    /// What was there: `the string "notanumber"`.
    pub got: String,
}

impl ArgumentMismatch {
    /// The path as the scenario files and the CLI write it (`items.0.qty`).
    pub fn dotted(&self) -> String {
        self.path.join(".")
    }
}

fn display(path: &[String]) -> String {
    if path.is_empty() {
        "the argument".into()
    } else {
        format!("argument.{}", path.join("."))
    }
}

/// Checks `value` against `schema` (the compiler's schema dialect).
pub fn check(schema: &Value, value: &Value) -> Result<(), ArgumentMismatch> {
    // No argument at all is an empty one.
    if value.is_null() {
        return Ok(());
    }
    let mut path = Vec::new();
    check_at(schema, value, &mut path)
}

fn check_at(schema: &Value, value: &Value, path: &mut Vec<String>) -> Result<(), ArgumentMismatch> {
    if !fits(schema, value) {
        return Err(ArgumentMismatch {
            path: path.clone(),
            expected: describe(schema),
            got: describe_value(value),
        });
    }
    // The value's own type fits; look inside it.
    if let Some(alternatives) = schema.get("anyOf").and_then(Value::as_array) {
        // The first alternative that fits all the way down decides; if
        // none does, report against the first that fits at the top.
        let mut first_err = None;
        for alt in alternatives.iter().filter(|a| fits(a, value)) {
            match check_at(alt, value, path) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        return first_err.map_or(Ok(()), Err);
    }
    if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
        for part in parts {
            check_at(part, value, path)?;
        }
    }
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, v) in map {
                let sub = props.and_then(|p| p.get(k)).or(extra);
                if let Some(sub) = sub {
                    path.push(k.clone());
                    check_at(sub, v, path)?;
                    path.pop();
                }
            }
        }
        Value::Array(items) => {
            let prefix = schema.get("prefixItems").and_then(Value::as_array);
            let rest = schema.get("items");
            for (i, v) in items.iter().enumerate() {
                let sub = prefix.and_then(|p| p.get(i)).or(rest);
                if let Some(sub) = sub {
                    path.push(i.to_string());
                    check_at(sub, v, path)?;
                    path.pop();
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// Whether `value`'s own type (not its contents) fits `schema`.
fn fits(schema: &Value, value: &Value) -> bool {
    if schema.get("asStream").and_then(Value::as_bool) == Some(true) {
        return true;
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        if !options.contains(value) {
            return false;
        }
    }
    if let Some(alternatives) = schema.get("anyOf").and_then(Value::as_array) {
        if !alternatives.iter().any(|a| fits(a, value)) {
            return false;
        }
    }
    match schema.get("type").and_then(Value::as_str) {
        None => true,
        Some("integer") => value.is_i64() || value.is_u64(),
        Some(t) => crate::compiler::json_type(value) == t,
    }
}

/// What a schema wants, in a few words.
fn describe(schema: &Value) -> String {
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        return options
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(" | ");
    }
    if let Some(alternatives) = schema.get("anyOf").and_then(Value::as_array) {
        return alternatives
            .iter()
            .map(describe)
            .collect::<Vec<_>>()
            .join(" | ");
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("array") => match schema.get("items") {
            Some(items) if items.as_object().is_some_and(|o| !o.is_empty()) => {
                format!("an array of {}", describe(items))
            }
            _ => "an array".into(),
        },
        Some("object") => "an object".into(),
        Some("number") => "a number".into(),
        Some("integer") => "an integer".into(),
        Some("string") => "a string".into(),
        Some("boolean") => "a boolean".into(),
        Some("null") => "null".into(),
        Some(other) => other.to_string(),
        None => "anything".into(),
    }
}

/// A value, named for an error message (quoted text cut short).
fn describe_value(v: &Value) -> String {
    match v {
        Value::String(s) => {
            let shown: String = s.chars().take(40).collect();
            let cut = if shown.len() < s.len() { "…" } else { "" };
            format!("the string {shown:?}{cut}")
        }
        Value::Number(n) => format!("the number {n}"),
        Value::Bool(b) => format!("{b}"),
        Value::Null => "null".into(),
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn counter() -> Value {
        json!({"type": "object", "properties": {
            "value": {"type": "number", "default": 0},
            "items": {"type": "array", "items": {"type": "string"}, "default": []},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}]},
            "tags": {"type": "object", "additionalProperties": {"type": "number"}},
            "maybe": {"anyOf": [{"type": "number"}, {"type": "null"}]},
            "nested": {"type": "object", "properties": {"qty": {"type": "number"}}},
            "anything": {},
            "cell": {"type": "number", "asCell": true},
            "stream": {"type": "object", "asStream": true}
        }})
    }

    #[test]
    fn a_wrong_type_is_refused_with_its_path_and_the_expected_type() {
        let e = check(&counter(), &json!({"value": "notanumber"})).unwrap_err();
        assert_eq!(e.path, ["value"]);
        assert_eq!(e.expected, "a number");
        assert_eq!(e.got, "the string \"notanumber\"");
        assert_eq!(
            e.to_string(),
            "argument.value must be a number (got the string \"notanumber\")"
        );
        let e = check(&counter(), &json!({"items": ["a", 2]})).unwrap_err();
        assert_eq!(e.dotted(), "items.1");
        assert_eq!(e.expected, "a string");
        let e = check(&counter(), &json!({"items": "a"})).unwrap_err();
        assert_eq!(e.expected, "an array of a string");
        let e = check(&counter(), &json!({"nested": {"qty": true}})).unwrap_err();
        assert_eq!(e.dotted(), "nested.qty");
        let e = check(&counter(), &json!({"mode": "c"})).unwrap_err();
        assert_eq!(e.expected, "\"a\" | \"b\"");
        let e = check(&counter(), &json!({"pair": ["x", "y"]})).unwrap_err();
        assert_eq!(e.dotted(), "pair.1");
        let e = check(&counter(), &json!({"tags": {"t": "x"}})).unwrap_err();
        assert_eq!(e.dotted(), "tags.t");
        let e = check(&counter(), &json!({"maybe": "x"})).unwrap_err();
        assert_eq!(e.expected, "a number | null");
        let e = check(&counter(), &json!({"cell": "x"})).unwrap_err();
        assert_eq!(e.dotted(), "cell");
        let e = check(&counter(), &json!(5)).unwrap_err();
        assert!(e.path.is_empty());
        assert_eq!(
            e.to_string(),
            "the argument must be an object (got the number 5)"
        );
    }

    #[test]
    fn what_fits_is_accepted() {
        for ok in [
            json!(null),
            json!({}),
            json!({"value": 3.5, "items": ["a"], "mode": "b", "pair": ["x", 1]}),
            json!({"tags": {"a": 1}, "maybe": null, "nested": {"qty": 1, "other": "x"}}),
            json!({"anything": [1, {"x": null}], "unknownKey": "kept", "stream": 5}),
        ] {
            check(&counter(), &ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        check(&json!({}), &json!("whatever")).unwrap();
    }
}
