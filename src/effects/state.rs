//! An effect's state as pattern code reads it: `{pending, result, error}`,
//! the reference's shape. Pure functions of the builtin, its inputs and the
//! outcome.
//!
//! `error` is a string, `CODE: message`, so `String(x.error)` reads well and
//! a pattern can still tell refusals apart (`egressRefused: …`).

use super::{EffectKind, Outcome};
use serde_json::{json, Value};

// `result` and `error` are absent, not null, when there is none: pattern
// code reads them as `undefined`, as in the reference.

/// Before anything was asked (no URL) or while nothing is pending.
pub fn idle() -> Value {
    json!({"pending": false})
}

/// A request is on its way: no result or error until it answers.
pub fn pending() -> Value {
    json!({"pending": true})
}

/// A settled error state.
pub fn error(code: &str, message: &str) -> Value {
    json!({"pending": false, "error": format!("{code}: {message}")})
}

/// The state an outcome settles a builtin in.
pub fn settled(kind: EffectKind, inputs: &Value, outcome: &Outcome) -> Value {
    let (status, media_type, body) = match outcome {
        Outcome::Refused(why) => return error("egressRefused", why),
        Outcome::Failed { code, message } => return error(code, message),
        Outcome::Response {
            status,
            media_type,
            body,
        } => (*status, media_type, body),
    };
    if kind.is_model() {
        return settled_model(kind, inputs, status, body);
    }
    if !(200..300).contains(&status) {
        return error("http", &format!("the server answered {status}"));
    }
    let text = || String::from_utf8_lossy(body).into_owned();
    let json_body = || -> Result<Value, Value> {
        serde_json::from_slice::<Value>(body)
            .map_err(|e| error("invalidJson", &format!("the response is not JSON: {e}")))
    };
    let result = match kind {
        EffectKind::FetchText => Value::String(text()),
        // The bytes as numbers: JSON holds them, and `bytes.slice()`,
        // `bytes[i]`, `new Uint8Array(bytes)` read as the reference's bytes do.
        EffectKind::FetchBinary => json!({"bytes": body, "mediaType": media_type}),
        EffectKind::FetchJsonUnchecked => match json_body() {
            Ok(v) => v,
            Err(e) => return e,
        },
        EffectKind::FetchJson => {
            let v = match json_body() {
                Ok(v) => v,
                Err(e) => return e,
            };
            if let Some(schema) = inputs.get("schema").filter(|s| s.is_object()) {
                if let Err(why) = validate(schema, schema, &v, "", 0) {
                    return error(
                        "schemaMismatch",
                        &format!("the response does not match its type: {why}"),
                    );
                }
            }
            v
        }
        EffectKind::GenerateText | EffectKind::GenerateObject | EffectKind::Llm => {
            unreachable!("answered by settled_model")
        }
        EffectKind::FetchData => {
            if inputs.get("mode").and_then(Value::as_str) == Some("text") {
                Value::String(text())
            } else {
                match json_body() {
                    Ok(v) => v,
                    Err(e) => return e,
                }
            }
        }
    };
    json!({"pending": false, "result": result})
}

/// A model call's state: the completion's text (`generateText`, `llm`) or
/// the JSON value in it, checked against the call's schema
/// (`generateObject`).
fn settled_model(kind: EffectKind, inputs: &Value, status: u16, body: &[u8]) -> Value {
    if !(200..300).contains(&status) {
        let said = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        return error(
            "model",
            &format!("the model endpoint answered {status}: {}", said.trim()),
        );
    }
    let completion = match super::model::parse_completion(body) {
        Ok(c) => c,
        Err(why) => return error("model", &why),
    };
    if kind != EffectKind::GenerateObject {
        return json!({"pending": false, "result": completion.text});
    }
    let v = match super::model::json_in(&completion.text) {
        Ok(v) => v,
        Err(why) => return error("invalidJson", &why),
    };
    if let Some(schema) = inputs.get("schema").filter(|s| s.is_object()) {
        if let Err(why) = validate(schema, schema, &v, "", 0) {
            return error(
                "schemaMismatch",
                &format!("the model's answer does not match its type: {why}"),
            );
        }
    }
    json!({"pending": false, "result": v})
}

/// Checks `v` against the schema dialect the compiler emits, with objects
/// open (unknown properties allowed unless `additionalProperties` says
/// otherwise), as the reference checks a fetched document.
pub fn validate(
    schema: &Value,
    root: &Value,
    v: &Value,
    at: &str,
    depth: usize,
) -> Result<(), String> {
    if depth > 64 {
        return Ok(());
    }
    let Some(s) = schema.as_object() else {
        return Ok(());
    };
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let target = r
            .strip_prefix("#/$defs/")
            .and_then(|name| root.get("$defs").and_then(|d| d.get(name)));
        return match target {
            Some(t) => validate(t, root, v, at, depth + 1),
            None => Ok(()),
        };
    }
    let here = || {
        if at.is_empty() {
            "the document".to_string()
        } else {
            at.to_string()
        }
    };
    if let Some(branches) = s
        .get("anyOf")
        .or_else(|| s.get("oneOf"))
        .and_then(Value::as_array)
    {
        if !branches
            .iter()
            .any(|b| validate(b, root, v, at, depth + 1).is_ok())
        {
            return Err(format!("{} matches none of its alternatives", here()));
        }
    }
    if let Some(all) = s.get("allOf").and_then(Value::as_array) {
        for b in all {
            validate(b, root, v, at, depth + 1)?;
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            return Err(format!(
                "{} is not one of {}",
                here(),
                Value::Array(e.clone())
            ));
        }
    }
    if let Some(c) = s.get("const") {
        if c != v {
            return Err(format!("{} is not {c}", here()));
        }
    }
    if let Some(t) = s.get("type") {
        let types: Vec<&str> = match t {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let fits = |t: &str| match t {
            "string" => v.is_string(),
            "number" => v.is_number(),
            "integer" => v.as_f64().is_some_and(|n| n.fract() == 0.0),
            "boolean" => v.is_boolean(),
            "null" => v.is_null(),
            "object" => v.is_object(),
            "array" => v.is_array(),
            _ => true,
        };
        if !types.is_empty() && !types.iter().any(|t| fits(t)) {
            return Err(format!("{} is not {}", here(), types.join(" or ")));
        }
    }
    if let Some(o) = v.as_object() {
        let props = s.get("properties").and_then(Value::as_object);
        if let Some(req) = s.get("required").and_then(Value::as_array) {
            for k in req.iter().filter_map(Value::as_str) {
                if !o.contains_key(k) {
                    return Err(format!("{} has no {k:?}", here()));
                }
            }
        }
        for (k, x) in o {
            let sub = format!("{at}.{k}");
            match props.and_then(|p| p.get(k)) {
                Some(ps) => validate(ps, root, x, &sub, depth + 1)?,
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        return Err(format!("{} has {k:?}, which its type does not", here()))
                    }
                    Some(extra @ Value::Object(_)) => validate(extra, root, x, &sub, depth + 1)?,
                    _ => {}
                },
            }
        }
    }
    if let Some(a) = v.as_array() {
        let prefix = s.get("prefixItems").and_then(Value::as_array);
        for (i, x) in a.iter().enumerate() {
            let sub = format!("{at}[{i}]");
            if let Some(is) = prefix.and_then(|p| p.get(i)).or_else(|| s.get("items")) {
                validate(is, root, x, &sub, depth + 1)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(body: &str) -> Outcome {
        Outcome::Response {
            status: 200,
            media_type: "application/json".into(),
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn a_json_response_is_checked_against_its_type_with_objects_open() {
        let schema = json!({"type": "object", "properties": {"answer": {"type": "number"}}, "required": ["answer"]});
        let inputs = json!({"url": "/x", "schema": schema});
        let s = settled(
            EffectKind::FetchJson,
            &inputs,
            &ok(r#"{"answer":42,"extra":true}"#),
        );
        assert_eq!(
            s,
            json!({"pending": false, "result": {"answer": 42, "extra": true}})
        );
        let s = settled(EffectKind::FetchJson, &inputs, &ok(r#"{"answer":"x"}"#));
        assert_eq!(s.get("result"), None);
        assert!(
            s["error"].as_str().unwrap().starts_with("schemaMismatch: "),
            "{s}"
        );
        let s = settled(EffectKind::FetchJson, &inputs, &ok("not json"));
        assert!(
            s["error"].as_str().unwrap().starts_with("invalidJson: "),
            "{s}"
        );
        let s = settled(
            EffectKind::FetchJsonUnchecked,
            &inputs,
            &ok(r#"{"answer":"x"}"#),
        );
        assert_eq!(s["result"]["answer"], "x");
    }

    #[test]
    fn text_binary_and_failures_have_the_reference_shape() {
        let inputs = json!({"url": "/x"});
        assert_eq!(
            settled(EffectKind::FetchText, &inputs, &ok("hi"))["result"],
            "hi"
        );
        let b = settled(EffectKind::FetchBinary, &inputs, &ok("hi"));
        assert_eq!(
            b["result"],
            json!({"bytes": [104, 105], "mediaType": "application/json"})
        );
        let r = settled(
            EffectKind::FetchText,
            &inputs,
            &Outcome::Refused("127.0.0.1 is a loopback address".into()),
        );
        assert_eq!(r["error"], "egressRefused: 127.0.0.1 is a loopback address");
        let e = settled(
            EffectKind::FetchText,
            &inputs,
            &Outcome::Response {
                status: 404,
                media_type: "text/plain".into(),
                body: vec![],
            },
        );
        assert_eq!(e["error"], "http: the server answered 404");
        let d = settled(
            EffectKind::FetchData,
            &json!({"url": "/x", "mode": "text"}),
            &ok("{}"),
        );
        assert_eq!(d["result"], "{}");
    }

    #[test]
    fn refs_unions_and_arrays_are_followed() {
        let schema = json!({
            "$defs": {"Item": {"type": "object", "properties": {"n": {"type": "integer"}}}},
            "type": "array", "items": {"$ref": "#/$defs/Item"}
        });
        assert!(validate(&schema, &schema, &json!([{"n": 1}, {"n": 2}]), "", 0).is_ok());
        let e = validate(&schema, &schema, &json!([{"n": 1.5}]), "", 0).unwrap_err();
        assert!(e.contains("[0].n"), "{e}");
        let u = json!({"anyOf": [{"type": "string"}, {"type": "null"}]});
        assert!(validate(&u, &u, &Value::Null, "", 0).is_ok());
        assert!(validate(&u, &u, &json!(3), "", 0).is_err());
    }
}
