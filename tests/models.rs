//! Model calls through the broker to a model endpoint of the tests' own
//! that speaks the OpenAI-compatible chat-completions protocol
//! (`tests/common/origin.rs`): `generateText` and `generateObject<T>` in a
//! real host, their tokens in the ledger; without an endpoint, a slow one
//! or one that is down, the error state, never a throw.

mod common;

use common::origin;
use serde_json::json;
use spacewake::clock::ManualClock;
use spacewake::effects::model::ModelConfig;
use spacewake::effects::{Broker, BrokerConfig};
use spacewake::host::Host;
use spacewake::metrics::Counter;
use std::sync::Arc;
use std::time::Duration;

const ASK: &str = include_str!("../fixtures/patterns/ask-model.tsx");

fn host(dir: &std::path::Path, model: Option<(String, Duration)>) -> Host {
    let clock = Arc::new(ManualClock::default());
    common::manual_host(dir, clock.clone(), |cfg| {
        let mut b = BrokerConfig::new(url::Url::parse("http://127.0.0.1:1").unwrap());
        b.model = model.map(|(endpoint, timeout)| ModelConfig {
            endpoint: url::Url::parse(&endpoint).unwrap(),
            key: Some("test-key".into()),
            default_model: "house-model".into(),
            timeout,
            max_response_bytes: 1 << 20,
        });
        cfg.runtime.effects =
            Some(Broker::new(b, clock, spacewake::metrics::Counters::new()).unwrap());
    })
}

fn deploy(h: &Host, question: &str) -> String {
    h.store().create_space("s", "did:key:owner").unwrap();
    h.deploy_file_blocking("s", "ask-model.tsx", ASK, json!({"question": question}))
        .expect("deploy")
}

#[test]
fn generate_text_and_object_answer_from_the_endpoint_with_their_tokens_in_the_ledger() {
    let o = origin::start();
    let dir = tempfile::tempdir().unwrap();
    let h = host(dir.path(), Some((o.url("/v1"), Duration::from_secs(20))));
    let piece = deploy(&h, "what is up");
    let c = |k: Counter| h.counters().space_value("s", k);
    let read = |p: &str| common::read(&h, "s", &piece, p);
    // Lazy: nothing is asked until a reader demands the answers.
    assert_eq!(c(Counter::EffectsRequested), 0);
    read("reply");
    read("answer");
    common::wait("both answers", || c(Counter::EffectsCompleted) == 2);
    assert_eq!(read("reply"), json!("You said: what is up"));
    assert_eq!(read("replyHash").as_str().map(str::len), Some(64));
    assert_eq!(read("answer"), json!("what is up"));
    assert_eq!(read("words"), json!(3));
    assert_eq!(read("summaryError"), json!(""));
    assert_eq!(o.seen.hits("/v1/chat/completions"), 2);
    let (last, auth) = o.seen.model_request.lock().unwrap().clone().unwrap();
    assert_eq!(auth, "Bearer test-key");
    let model = last["model"].as_str().unwrap();
    assert!(["house-model", "summary-model"].contains(&model), "{last}");

    // The ledger books the tokens the endpoint reported and its time.
    let ledger = h.store().open_space("s").unwrap().ledger().unwrap();
    let sum = |f: fn(&spacewake::store::LedgerDelta) -> u64| {
        ledger.iter().map(|r| f(&r.totals)).sum::<u64>()
    };
    // "You said: what is up" and {"answer":"what is up","words":3}: words.
    assert_eq!(sum(|t| t.completion_tokens), 5 + 3, "{ledger:?}");
    // "Answer briefly." + "what is up", and the schema's instruction + "what is up".
    assert!(sum(|t| t.prompt_tokens) > 5 + 3, "{ledger:?}");
    assert!(sum(|t| t.model_wall_us) > 0, "{ledger:?}");
    assert_eq!(sum(|t| t.effects_requested), 2, "{ledger:?}");

    // A new question asks again; the answers follow it.
    h.ask_blocking(
        "s",
        spacewake::host::Trigger::Session,
        spacewake::host::SendEvent {
            author: spacewake::store::Author::principal("did:key:owner"),
            piece: piece.clone(),
            path: spacewake::store::path::parse_dotted("ask"),
            event_id: Some("q2".into()),
            payload: json!({"question": "and now"}),
        },
    )
    .unwrap();
    // Reading demands them (the event alone asks nothing: they are lazy).
    common::wait("the new answers", || {
        read("reply") == json!("You said: and now") && read("words") == json!(2)
    });
    assert_eq!(c(Counter::EffectsCompleted), 4);
}

#[test]
fn without_an_endpoint_a_model_call_answers_no_model_and_sends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let h = host(dir.path(), None);
    let piece = deploy(&h, "hello");
    let err = common::read(&h, "s", &piece, "replyError");
    assert!(
        err.as_str()
            .unwrap()
            .starts_with("noModel: no model is configured"),
        "{err}"
    );
    assert_eq!(h.counters().space_value("s", Counter::EffectsRequested), 0);
    assert_eq!(common::read(&h, "s", &piece, "reply"), json!(""));
}

#[test]
fn a_slow_or_down_endpoint_is_the_error_state_within_the_timeout() {
    let o = origin::start();
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let h = host(
        dir.path(),
        Some((o.url("/slow/v1"), Duration::from_millis(300))),
    );
    let piece = deploy(&h, "hello");
    common::read(&h, "s", &piece, "reply");
    common::read(&h, "s", &piece, "answer");
    common::wait("the timeouts", || {
        h.counters().space_value("s", Counter::EffectsFailed) == 2
    });
    assert!(started.elapsed() < Duration::from_secs(20));
    let err = common::read(&h, "s", &piece, "replyError");
    assert!(err.as_str().unwrap().starts_with("timeout: "), "{err}");
    drop(h);

    // Nothing listens on the port: unreachable.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let h = host(
        dir.path(),
        Some((
            format!("http://127.0.0.1:{port}/v1"),
            Duration::from_secs(5),
        )),
    );
    let piece = deploy(&h, "hello");
    common::read(&h, "s", &piece, "reply");
    common::read(&h, "s", &piece, "answer");
    common::wait("the refusals", || {
        h.counters().space_value("s", Counter::EffectsFailed) == 2
    });
    let err = common::read(&h, "s", &piece, "summaryError");
    assert!(err.as_str().unwrap().starts_with("unreachable: "), "{err}");
}
