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

fn type_fits(t: &str, value: &Json) -> bool {
    match t {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        other => panic!("unsupported type {other}"),
    }
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
    let types: Vec<&str> = match s.get("type") {
        Some(Json::String(t)) => vec![t.as_str()],
        Some(Json::Array(ts)) => ts.iter().filter_map(Json::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() && !types.iter().any(|t| type_fits(t, value)) {
        return Err(format!(
            "{at}: expected {}, got {value}",
            types.join(" or ")
        ));
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

const OPERATOR_SCHEMA: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/schema/protocol/operator.schema.json"
));

/// One example of every operator view, with every optional field set in
/// one of them, serialized as the API sends it.
fn operator_examples() -> Vec<(&'static str, Json)> {
    use crate::operator::*;
    use crate::store::{ActionCost, Bucket, FireRecord, LedgerDelta, LedgerRow, ScheduleRow};
    let mut row = ScheduleRow::new("pc-0123456789abcdef", 0, 60, "pc-0123456789abcdef/s0", 1, 2);
    row.last_fired_ms = Some(3);
    row.pending = vec![
        crate::store::PendingWake {
            occurrence: "wake/x/0/1/1".into(),
            period: 1,
            attempts: 1,
            inflight: None,
            retry_due_ms: Some(4),
        },
        crate::store::PendingWake {
            occurrence: "wake/x/0/1/2".into(),
            period: 2,
            attempts: 1,
            inflight: Some("wake/x/0/1/2".into()),
            retry_due_ms: None,
        },
    ];
    row.output_docs = Some("[]".into());
    let mut entry = EntryView::new("home", row.clone());
    entry.callback_name = Some("sweep".into());
    // A calendar entry shows every key the view can write.
    let mut calendar_row = row.clone();
    calendar_row.interval_minutes = 0;
    calendar_row.cadence = Some(r#"{"cron":"30 7 * * 1-5","timeZone":"Europe/Berlin"}"#.into());
    let mut calendar = EntryView::new("home", calendar_row);
    calendar.callback_name = Some("digest".into());
    assert_eq!(calendar.cron.as_deref(), Some("30 7 * * 1-5"));
    assert!(calendar
        .next_due_local
        .as_deref()
        .is_some_and(|t| t.contains("CET") || t.contains("CEST")));
    // A one-off entry writes its field and the time it holds.
    let mut one_off_row = row.clone();
    one_off_row.interval_minutes = 0;
    one_off_row.cadence = Some(
        r#"{"at":{"doc":"pc-1/argument","path":["remindAt"]},"via":[],"setFor":1796371200000}"#
            .into(),
    );
    let one_off = EntryView::new("home", one_off_row);
    assert_eq!(one_off.at.as_deref(), Some("pc-1/argument.remindAt"));
    assert_eq!(one_off.set_for_ms, Some(1_796_371_200_000));
    let space = SpaceView {
        id: "home".into(),
        owner: "did:key:z6Mk".into(),
        created_ms: 1,
        state: "active".into(),
        next_wake_ms: Some(2),
        undelivered: false,
        quarantined: None,
        window_start_ms: 0,
        spend: Some(crate::store::WindowSpend::default()),
    };
    let budget = BudgetView {
        setting: "override".into(),
        override_us: Some(5),
        host_default: Some(Limit::Unlimited),
        effective: Some(Limit::CpuUs(5)),
    };
    let effects = crate::operator::EffectsView {
        own: crate::effects::budget::Overrides {
            in_flight: Some(2),
            ..Default::default()
        },
        effective: Some(crate::effects::budget::Overrides {
            in_flight: Some(2),
            per_second: Some(2.0),
            bytes_per_second: Some(1 << 20),
        }),
    };
    let json = |v: &dyn erased::Ser| v.to_json();
    vec![
        (
            "error",
            serde_json::json!({"error": {"code": "unknownSpace", "message": "m", "details": {}}}),
        ),
        ("spaceView", json(&space)),
        (
            "hostView",
            json(&HostView {
                registered: 3,
                active: 1,
                scheduled_budget: Limit::CpuUs(250_000),
                counters: serde_json::json!({"schedule": {"fired": 2}, "waves": {"committed": 5}})
                    .as_object()
                    .unwrap()
                    .clone(),
                throughput: vec![Throughput {
                    until_ms: 10_000,
                    waves_per_s: 0.5,
                    events_per_s: 1.25,
                }],
                now_ms: 12_000,
            }),
        ),
        (
            "spacesPage",
            json(&SpacesPage {
                spaces: vec![space.clone()],
                next: Some("home".into()),
                registered: 1,
                active: 1,
                now_ms: 9,
            }),
        ),
        (
            "piecesList",
            serde_json::json!({"space": "home", "pieces": [json(&PieceView {
                id: "pc-0123456789abcdef".into(),
                pattern: "counter.tsx#default".into(),
                program: "ab".into(),
                name: Some("Counter".into()),
                created_ms: Some(1),
                schedule_entries: 2,
                set_aside: Some("set aside: its program does not load".into()),
            })]}),
        ),
        (
            "deadLettersView",
            json(&DeadLettersView {
                space: "home".into(),
                dead_letters: vec![crate::store::DeadLetter {
                    event_id: "poison".into(),
                    stream: "pc-0123456789abcdef/s0".into(),
                    seq: 3,
                    payload: serde_json::json!({"by": 1}),
                    fired_by: "did:key:z6Mk".into(),
                    attempts: 3,
                    error: "commit refused".into(),
                    dead_lettered_ms: 9,
                }],
                failing: vec![
                    FailingEventView {
                        event_id: "next".into(),
                        attempts: 1,
                        last_error: "commit refused".into(),
                        retry_due_ms: None,
                    },
                    FailingEventView {
                        event_id: "wake/p/0/3".into(),
                        attempts: 2,
                        last_error: "TypeError: x is undefined".into(),
                        retry_due_ms: Some(300_000),
                    },
                ],
            }),
        ),
        ("entryView", json(&calendar)),
        ("entryView", json(&one_off)),
        (
            "scheduleList",
            json(&ScheduleList {
                entries: vec![entry.clone(), calendar.clone()],
                invalid: vec![crate::operator::InvalidEntry {
                    space: "a".into(),
                    piece: "pc-1".into(),
                    entry: 0,
                    reason: "its callback is not a stream".into(),
                }],
                looked_in: 1,
                wake_set_only: true,
                quarantined: 0,
                unreadable: vec![("a".into(), "why".into())],
                now_ms: 9,
            }),
        ),
        (
            "entryChange",
            json(&EntryChange {
                before: entry.clone(),
                after: entry.clone(),
                space_wake_ms: Some(2),
                now_ms: 9,
            }),
        ),
        (
            "pieceDeleted",
            json(&crate::operator::PieceDeleted {
                space: "s".into(),
                piece: "pc-0123456789abcdef".into(),
                ended_wakes: 1,
            }),
        ),
        (
            "firesView",
            json(&FiresView {
                entry: entry.clone(),
                fires: vec![
                    FireRecord {
                        piece: "p".into(),
                        entry: 0,
                        fired_ms: 1,
                        event_id: "e".into(),
                        period: 1,
                        due_ms: 1,
                        missed_periods: 0,
                        outcome: "fired".into(),
                        run: Default::default(),
                    },
                    FireRecord {
                        piece: "p".into(),
                        entry: 0,
                        fired_ms: 2,
                        event_id: "e2".into(),
                        period: 2,
                        due_ms: 2,
                        missed_periods: 0,
                        outcome: "failed".into(),
                        run: crate::store::FireRun {
                            settled_ms: Some(3),
                            duration_us: Some(40),
                            cpu_us: Some(30),
                            error: Some("TypeError: x is undefined".into()),
                            logs: vec![crate::store::FireLog {
                                level: "info".into(),
                                text: "sweeping".into(),
                            }],
                            commit_seq: None,
                        },
                    },
                ],
                kept: 20,
            }),
        ),
        (
            "runView",
            json(&crate::operator::RunView {
                space: "s".into(),
                fire: FireRecord {
                    piece: "p".into(),
                    entry: 0,
                    fired_ms: 1,
                    event_id: "wake/p/0/0/1".into(),
                    period: 1,
                    due_ms: 1,
                    missed_periods: 0,
                    outcome: "delivered".into(),
                    run: crate::store::FireRun {
                        settled_ms: Some(2),
                        duration_us: Some(40),
                        cpu_us: Some(30),
                        error: None,
                        logs: Vec::new(),
                        commit_seq: Some(7),
                    },
                },
                entry: Some(entry.clone()),
                payload: Some(serde_json::json!({"entry": 0, "period": 1})),
                appended_seq: Some(6),
            }),
        ),
        ("budgetView", json(&budget)),
        ("effectsView", json(&effects)),
        (
            "ledgerView",
            json(&LedgerView {
                space: "home".into(),
                window_ms: 86_400_000,
                budget: budget.clone(),
                effects: effects.clone(),
                rows: vec![LedgerRow {
                    bucket: Bucket::Scheduled,
                    window_start_ms: 0,
                    totals: LedgerDelta::default(),
                }],
                top: vec![ActionCost {
                    window_start_ms: 0,
                    piece: "p".into(),
                    action: "a".into(),
                    kind: "handler".into(),
                    pattern: "x".into(),
                    cpu_us: 1,
                    wall_us: 1,
                    runs: 1,
                }],
                now_ms: 9,
            }),
        ),
        (
            "grantView",
            json(&GrantView {
                space: "home".into(),
                did: "did:key:z6Mk".into(),
                access: "read".into(),
            }),
        ),
        (
            "createBody",
            serde_json::json!({"space": "home", "owner": "did:key:z6Mk"}),
        ),
        (
            "grantBody",
            serde_json::json!({"did": "did:key:z6Mk", "access": "none"}),
        ),
        ("budgetBody", serde_json::json!({"budgetMs": 500})),
        ("budgetBody", serde_json::json!({"budgetMs": "none"})),
        (
            "effectsBody",
            serde_json::json!({"inFlight": 2, "perSecond": 0.5, "bytesPerSecond": "default"}),
        ),
    ]
}

mod erased {
    /// Serialize behind a trait object, for the example table above.
    pub trait Ser {
        fn to_json(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize> Ser for T {
        fn to_json(&self) -> serde_json::Value {
            serde_json::to_value(self).expect("views serialize")
        }
    }
}

#[test]
fn operator_views_match_the_operator_schema() {
    let root = schema(OPERATOR_SCHEMA);
    // The keys the examples of each view write, together (one view may need
    // two examples to write them all: a calendar entry and a one-off one).
    let mut written: std::collections::BTreeMap<&str, BTreeSet<String>> = Default::default();
    for (name, value) in operator_examples() {
        let def = &root["$defs"][name];
        assert!(def.is_object(), "no $defs/{name}");
        validate(&root, def, &value, name).unwrap_or_else(|e| panic!("{value}: {e}"));
        if let Some(obj) = value.as_object() {
            written.entry(name).or_default().extend(obj.keys().cloned());
        }
    }
    // Every key the Rust type writes is in the schema, and back.
    for (name, value_keys) in written {
        let def = &root["$defs"][name];
        if let Some(props) = def["properties"].as_object() {
            let schema_keys: BTreeSet<String> = props.keys().cloned().collect();
            if !name.ends_with("Body") && name != "error" {
                assert_eq!(schema_keys, value_keys, "{name}");
            }
        }
    }
    // What the schema refuses.
    let spaces = &root["$defs"]["spaceView"];
    let mut bad = operator_examples()[1].1.clone();
    bad["state"] = serde_json::json!("asleep");
    assert!(validate(&root, spaces, &bad, "").is_err());
    let budget = &root["$defs"]["budgetBody"];
    assert!(validate(&root, budget, &serde_json::json!({"budgetMs": "lots"}), "").is_err());
    let effects = &root["$defs"]["effectsBody"];
    for bad in [
        serde_json::json!({"inFlight": "lots"}),
        serde_json::json!({"inFlight": 0}),
        serde_json::json!({"burst": 3}),
    ] {
        assert!(validate(&root, effects, &bad, "").is_err(), "{bad}");
    }
}
