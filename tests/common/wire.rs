//! WebSocket helpers for end-to-end tests: a counter piece deployed,
//! tracked, sent to, read.

use super::server::Server;
use serde_json::Value;
use spacewake::protocol::client::Client;
use spacewake::protocol::messages::{Deploy, Opened, SendEvent, Track};
use spacewake::protocol::{ClientMessage, Identity, PathSegment, ServerMessage};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

pub fn counter_files() -> BTreeMap<String, String> {
    let src = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/patterns/counter.tsx"),
    )
    .unwrap();
    BTreeMap::from([("counter.tsx".to_string(), src)])
}

pub fn key(k: &str) -> Vec<PathSegment> {
    vec![PathSegment::Key(k.into())]
}

/// A dotted result path (`kids.0.walk`) as wire segments.
#[allow(dead_code)]
pub fn dotted(path: &str) -> Vec<PathSegment> {
    path.split('.')
        .map(|k| PathSegment::Key(k.into()))
        .collect()
}

pub async fn deploy(c: &mut Client, argument: Value) -> String {
    let id = c.fresh_id();
    match c
        .request(ClientMessage::Deploy(Deploy {
            id,
            entry: "counter.tsx".into(),
            files: counter_files(),
            export: None,
            argument: Some(argument),
        }))
        .await
        .unwrap()
    {
        ServerMessage::Deployed(d) => d.piece,
        other => panic!("deploy: {other:?}"),
    }
}

pub async fn track(c: &mut Client, piece: &str, path: &str, since: Option<u64>) {
    let id = c.fresh_id();
    let r = c
        .request(ClientMessage::Track(Track {
            id,
            piece: piece.into(),
            path: Some(key(path)),
            since,
        }))
        .await
        .unwrap();
    assert!(matches!(r, ServerMessage::Ack(_)), "{r:?}");
}

pub async fn send(c: &mut Client, piece: &str, stream: &str, payload: Value) -> ServerMessage {
    let id = c.fresh_id();
    c.request(ClientMessage::Send(SendEvent {
        id,
        piece: piece.into(),
        stream: key(stream),
        payload,
        event_id: None,
    }))
    .await
    .unwrap()
}

pub async fn next_value(c: &mut Client) -> (u64, Value) {
    let u = c
        .next_update(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("an update");
    (u.seq, u.value)
}

/// Opens a session on `space` as `who`; returns the client and `opened`.
pub async fn connect(server: &Server, who: &Identity, space: &str) -> (Client, Opened) {
    Client::connect_creating(&ws_url(server), who, space)
        .await
        .unwrap()
}

pub fn ws_url(s: &Server) -> String {
    format!("ws://{}/ws", s.addr)
}

/// Deploys a pattern of `fixtures/runtime/` with `argument`; the server's
/// answer.
pub async fn deploy_runtime_fixture(c: &mut Client, name: &str, argument: Value) -> ServerMessage {
    let src = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/runtime")
            .join(name),
    )
    .unwrap();
    let id = c.fresh_id();
    c.request(ClientMessage::Deploy(Deploy {
        id,
        entry: name.into(),
        files: BTreeMap::from([(name.to_string(), src)]),
        export: None,
        argument: Some(argument),
    }))
    .await
    .unwrap()
}
