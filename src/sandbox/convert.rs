//! JSON <-> JS value conversion at the sandbox boundary.
//!
//! Inbound values are built directly (no string round trip: arguments are
//! usually small and this is the hot path). Outbound values go through the
//! engine's own `JSON.stringify`, so `toJSON`, dropped `undefined` members and
//! `NaN -> null` follow JSON semantics exactly as pattern authors expect.

use rquickjs::{Array, Ctx, Object, Value};

pub(crate) fn json_to_js<'js>(
    ctx: &Ctx<'js>,
    v: &serde_json::Value,
) -> rquickjs::Result<Value<'js>> {
    Ok(match v {
        serde_json::Value::Null => Value::new_null(ctx.clone()),
        serde_json::Value::Bool(b) => Value::new_bool(ctx.clone(), *b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) if i32::try_from(i).is_ok() => Value::new_int(ctx.clone(), i as i32),
            _ => Value::new_float(ctx.clone(), n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => rquickjs::String::from_str(ctx.clone(), s)?.into_value(),
        serde_json::Value::Array(items) => {
            let arr = Array::new(ctx.clone())?;
            for (i, item) in items.iter().enumerate() {
                arr.set(i, json_to_js(ctx, item)?)?;
            }
            arr.into_value()
        }
        serde_json::Value::Object(map) => {
            let obj = Object::new(ctx.clone())?;
            for (k, item) in map {
                obj.set(k.as_str(), json_to_js(ctx, item)?)?;
            }
            obj.into_value()
        }
    })
}

/// `JSON.stringify` semantics; `undefined`, functions and symbols become `null`.
pub(crate) fn js_to_json<'js>(
    ctx: &Ctx<'js>,
    v: Value<'js>,
) -> Result<serde_json::Value, ToJsonError> {
    // Fast paths for the common scalar results avoid the stringify+parse trip.
    if let Some(i) = v.as_int() {
        return Ok(serde_json::Value::from(i));
    }
    if let Some(b) = v.as_bool() {
        return Ok(serde_json::Value::Bool(b));
    }
    if v.is_null() || v.is_undefined() {
        return Ok(serde_json::Value::Null);
    }
    if let Some(f) = v.as_float() {
        // As JSON.parse(JSON.stringify(f)) would give: integral values are
        // integers (including -0, which JSON prints as 0), non-finite is null.
        if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15 {
            return Ok(serde_json::Value::from(f as i64));
        }
        return Ok(serde_json::Number::from_f64(f)
            .map_or(serde_json::Value::Null, serde_json::Value::Number));
    }
    if let Some(s) = v.as_string() {
        return s
            .to_string()
            .map(serde_json::Value::String)
            .map_err(ToJsonError::Js);
    }
    let text = ctx.json_stringify(v).map_err(ToJsonError::Js)?;
    match text {
        None => Ok(serde_json::Value::Null),
        Some(s) => {
            let s = s.to_string().map_err(ToJsonError::Js)?;
            serde_json::from_str(&s).map_err(|e| ToJsonError::Parse(e.to_string()))
        }
    }
}

pub(crate) enum ToJsonError {
    /// `JSON.stringify` threw (cycle, BigInt, a throwing `toJSON`, OOM, preempt).
    Js(rquickjs::Error),
    /// The engine produced text serde_json rejected (should not happen).
    Parse(String),
}
