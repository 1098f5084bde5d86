//! Keeps the hand-written JSON Schemas in `schema/protocol/` in step with the
//! Rust message types.
//!
//! Two checks, without a JSON Schema crate:
//! - key sets: for every message type, the schema's `properties` equal the
//!   union of the keys the example messages serialize with, every example has
//!   the schema's `required` keys, and the schema's type list, error codes and
//!   access levels equal the Rust ones;
//! - a minimal validator for the keywords these schemas use (`$ref`, `oneOf`,
//!   `anyOf`, `not`, `const`, `enum`, `type`, `properties`, `required`,
//!   `additionalProperties`, `items`, numeric and length bounds) accepts every
//!   example and rejects known-bad messages. Keywords it does not know
//!   (`pattern`, annotations) are ignored, which only makes it more lenient.

use std::collections::BTreeSet;

use serde_json::{Map, Value as Json};

use super::messages::{examples, Access, ClientMessage, ErrorCode, ServerMessage};

const CLIENT_SCHEMA: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/schema/protocol/client-messages.schema.json"
));
const SERVER_SCHEMA: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/schema/protocol/server-messages.schema.json"
));

fn schema(text: &str) -> Json {
    serde_json::from_str(text).expect("schema is valid JSON")
}

fn resolve<'a>(root: &'a Json, reference: &str) -> &'a Json {
    let name = reference
        .strip_prefix("#/$defs/")
        .unwrap_or_else(|| panic!("unsupported $ref {reference}"));
    &root["$defs"][name]
}

/// The `$defs` entry per message type, from the top-level `oneOf`.
fn variants(root: &Json) -> Vec<(String, &Json)> {
    root["oneOf"]
        .as_array()
        .expect("top-level oneOf")
        .iter()
        .map(|r| {
            let def = resolve(root, r["$ref"].as_str().expect("$ref"));
            let t = def["properties"]["type"]["const"]
                .as_str()
                .expect("type const")
                .to_string();
            (t, def)
        })
        .collect()
}

fn key_set(v: &Json) -> BTreeSet<String> {
    v.as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

fn check_key_sets(root: &Json, types: &[&str], examples: Vec<Json>) {
    let vars = variants(root);
    let schema_types: BTreeSet<&str> = vars.iter().map(|(t, _)| t.as_str()).collect();
    let rust_types: BTreeSet<&str> = types.iter().copied().collect();
    assert_eq!(
        schema_types, rust_types,
        "schema and Rust type lists differ"
    );
    for (t, def) in &vars {
        assert_eq!(
            def["additionalProperties"],
            Json::Bool(false),
            "{t}: additionalProperties must be false"
        );
        let properties = key_set(&def["properties"]);
        let required: BTreeSet<String> = def["required"]
            .as_array()
            .expect("required")
            .iter()
            .map(|r| r.as_str().unwrap().to_string())
            .collect();
        assert!(
            required.is_subset(&properties),
            "{t}: required ⊄ properties"
        );
        let mut union = BTreeSet::new();
        for ex in examples.iter().filter(|e| e["type"] == t.as_str()) {
            let keys = key_set(ex);
            assert!(
                keys.is_subset(&properties),
                "{t}: example has keys {:?} the schema does not list",
                keys.difference(&properties).collect::<Vec<_>>()
            );
            assert!(
                required.is_subset(&keys),
                "{t}: example lacks required {:?}",
                required.difference(&keys).collect::<Vec<_>>()
            );
            union.extend(keys);
        }
        assert_eq!(
            union, properties,
            "{t}: examples together must use exactly the schema's properties"
        );
    }
}

#[test]
fn client_schema_key_sets_match() {
    let root = schema(CLIENT_SCHEMA);
    let examples: Vec<Json> = examples::client()
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect();
    check_key_sets(&root, ClientMessage::TYPES, examples.clone());
    // The nested resume object too.
    let resume = key_set(&root["$defs"]["open"]["properties"]["resume"]["anyOf"][0]["properties"]);
    for ex in examples.iter().filter(|e| e.get("resume").is_some()) {
        assert_eq!(key_set(&ex["resume"]), resume);
    }
}

#[test]
fn server_schema_key_sets_match() {
    let root = schema(SERVER_SCHEMA);
    let examples: Vec<Json> = examples::server()
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect();
    check_key_sets(&root, ServerMessage::TYPES, examples);
    let codes: BTreeSet<&str> = root["$defs"]["error"]["properties"]["code"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let rust: BTreeSet<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(codes, rust, "error codes differ between schema and Rust");
    let access: BTreeSet<&str> = root["$defs"]["opened"]["properties"]["access"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let rust: BTreeSet<&str> = [Access::Read, Access::Write, Access::Owner]
        .iter()
        .map(|a| a.as_str())
        .collect();
    assert_eq!(access, rust);
}

/// Validates `value` against `schema`; `Err` names the first violation.
fn validate(root: &Json, schema: &Json, value: &Json, at: &str) -> Result<(), String> {
    let Some(s) = schema.as_object() else {
        return Ok(()); // `{}` or `true`: anything goes
    };
    if let Some(r) = s.get("$ref").and_then(Json::as_str) {
        validate(root, resolve(root, r), value, at)?;
    }
    if let Some(c) = s.get("const") {
        if value != c {
            return Err(format!("{at}: expected {c}, got {value}"));
        }
    }
    if let Some(Json::Array(options)) = s.get("enum") {
        if !options.contains(value) {
            return Err(format!("{at}: {value} is not one of {options:?}"));
        }
    }
    if let Some(t) = s.get("type").and_then(Json::as_str) {
        let ok = match t {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "null" => value.is_null(),
            other => panic!("unsupported type {other}"),
        };
        if !ok {
            return Err(format!("{at}: expected {t}, got {value}"));
        }
    }
    if let Some(Json::Array(options)) = s.get("oneOf") {
        let passing = options
            .iter()
            .filter(|o| validate(root, o, value, at).is_ok())
            .count();
        if passing != 1 {
            return Err(format!(
                "{at}: matches {passing} of oneOf's branches, not 1"
            ));
        }
    }
    if let Some(Json::Array(options)) = s.get("anyOf") {
        if !options.iter().any(|o| validate(root, o, value, at).is_ok()) {
            return Err(format!("{at}: matches none of anyOf's branches"));
        }
    }
    if let Some(not) = s.get("not") {
        if validate(root, not, value, at).is_ok() {
            return Err(format!("{at}: matches a `not` schema"));
        }
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = s.get("minimum").and_then(Json::as_f64) {
            if n < min {
                return Err(format!("{at}: {n} < minimum {min}"));
            }
        }
        if let Some(max) = s.get("maximum").and_then(Json::as_f64) {
            if n > max {
                return Err(format!("{at}: {n} > maximum {max}"));
            }
        }
    }
    if let Some(text) = value.as_str() {
        let len = text.chars().count() as u64;
        if s.get("minLength")
            .and_then(Json::as_u64)
            .is_some_and(|m| len < m)
        {
            return Err(format!("{at}: string too short"));
        }
        if s.get("maxLength")
            .and_then(Json::as_u64)
            .is_some_and(|m| len > m)
        {
            return Err(format!("{at}: string too long"));
        }
    }
    if let Some(items) = value.as_array() {
        if s.get("minItems")
            .and_then(Json::as_u64)
            .is_some_and(|m| (items.len() as u64) < m)
        {
            return Err(format!("{at}: too few items"));
        }
        if let Some(item_schema) = s.get("items") {
            for (i, item) in items.iter().enumerate() {
                validate(root, item_schema, item, &format!("{at}/{i}"))?;
            }
        }
    }
    if let Some(object) = value.as_object() {
        validate_object(root, s, object, at)?;
    }
    Ok(())
}

fn validate_object(
    root: &Json,
    s: &Map<String, Json>,
    object: &Map<String, Json>,
    at: &str,
) -> Result<(), String> {
    if let Some(Json::Array(required)) = s.get("required") {
        for r in required {
            let r = r.as_str().unwrap();
            if !object.contains_key(r) {
                return Err(format!("{at}: missing required `{r}`"));
            }
        }
    }
    let empty = Map::new();
    let properties = s
        .get("properties")
        .and_then(Json::as_object)
        .unwrap_or(&empty);
    for (k, v) in object {
        match (properties.get(k), s.get("additionalProperties")) {
            (Some(p), _) => validate(root, p, v, &format!("{at}/{k}"))?,
            (None, Some(Json::Bool(false))) => {
                return Err(format!("{at}: property `{k}` is not allowed"))
            }
            (None, Some(extra)) => validate(root, extra, v, &format!("{at}/{k}"))?,
            (None, None) => {}
        }
    }
    Ok(())
}

#[test]
fn examples_validate_against_the_schemas() {
    let client = schema(CLIENT_SCHEMA);
    for m in examples::client() {
        let v = serde_json::to_value(&m).unwrap();
        validate(&client, &client, &v, "").unwrap_or_else(|e| panic!("{v}: {e}"));
    }
    let server = schema(SERVER_SCHEMA);
    for m in examples::server() {
        let v = serde_json::to_value(&m).unwrap();
        validate(&server, &server, &v, "").unwrap_or_else(|e| panic!("{v}: {e}"));
    }
    // A real challenge nonce fits the schema's 43-character form.
    let challenge =
        ServerMessage::Challenge(super::messages::Challenge::new(super::auth::new_nonce()));
    let v = serde_json::to_value(&challenge).unwrap();
    validate(&server, &server, &v, "").unwrap();
    assert_eq!(v["nonce"].as_str().unwrap().len(), 43);
}

#[test]
fn schemas_reject_what_the_parser_rejects() {
    let client = schema(CLIENT_SCHEMA);
    let bad = [
        r#"{"type":"track","id":1}"#,
        r#"{"type":"track","id":1,"piece":"p","sinse":3}"#,
        r#"{"type":"track","id":1.5,"piece":"p"}"#,
        r#"{"type":"track","id":1,"piece":"p","path":[-1]}"#,
        r#"{"type":"read","id":1}"#,
        r#"{"type":"read","id":1,"piece":"a","doc":"b"}"#,
        r#"{"type":"send","id":1,"piece":"p","stream":[],"payload":1}"#,
        r#"{"type":"open","space":"s","did":"d","signature":"x","resume":{}}"#,
        r#"{"type":"warm","id":1}"#,
        r#"{"id":1}"#,
    ];
    for text in bad {
        let v: Json = serde_json::from_str(text).unwrap();
        assert!(
            validate(&client, &client, &v, "").is_err(),
            "schema accepts {text}"
        );
        assert!(
            super::frames::parse_client_frame(super::frames::Frame::Text(text)).is_err(),
            "parser accepts {text}"
        );
    }
}

/// Every frame the parser accepts is valid under the schema (the schema is
/// never stricter than the server). Mutated examples reach many accepted
/// variants: optional fields dropped, values swapped for others.
#[test]
fn accepted_frames_validate_against_the_schema() {
    use rand::{rngs::StdRng, Rng as _, SeedableRng as _};
    let client = schema(CLIENT_SCHEMA);
    let valid = examples::client();
    let mut rng = StdRng::seed_from_u64(0x5c4e_3a11);
    let mut accepted = 0;
    for _ in 0..5_000 {
        let base = &valid[rng.random_range(0..valid.len())];
        let text = super::frames::tests::mutate(&mut rng, base);
        if let Ok(msg) = super::frames::parse_client_frame(super::frames::Frame::Text(&text)) {
            accepted += 1;
            let v = serde_json::to_value(&msg).unwrap();
            validate(&client, &client, &v, "").unwrap_or_else(|e| panic!("{text}: {e}"));
            let raw: Json = serde_json::from_str(&text).unwrap();
            validate(&client, &client, &raw, "").unwrap_or_else(|e| panic!("{text}: {e}"));
        }
    }
    assert!(accepted > 300, "only {accepted} accepted");
}
