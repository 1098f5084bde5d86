//! The HTTP edge. Only this module knows HTTP.
//!
//! - `GET /api/health/stats`: `{"ok": true, "servingLoop": {...counters}}`
//! - `GET /metrics`: the same counters in Prometheus text format.
//! - `GET /ws`: the WebSocket endpoint (see `spec/protocol.md`).
//! - `POST /api/spaces/{space}/events`: webhook-style ingest, authenticated
//!   by an ed25519 signature over the body (see `spec/protocol.md`).
//! - `POST /api/spaces/{space}/warm`: an explicit warm request for named
//!   pieces (identity-less warm demand), signed the same way.

use crate::host::{Host, Reply, Request, Trigger};
use crate::metrics::Counter;
use crate::protocol::{verify_ingest, ErrorCode, PathSegment, TRANSPORT_MAX_MESSAGE_BYTES};
use crate::store::{Author, PathSeg};
use axum::body::Bytes;
use axum::extract::{Path, State, WebSocketUpgrade};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

#[derive(Clone)]
pub struct HttpState {
    pub host: Host,
}

/// Accepts connections with `TCP_NODELAY`: sessions exchange small frames,
/// and Nagle's algorithm with delayed ACKs would hold each for up to 40 ms.
pub fn nodelay(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
    })
}

pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/api/health/stats", get(health_stats))
        .route("/metrics", get(metrics))
        .route("/ws", get(ws))
        .route("/api/spaces/{space}/events", post(ingest))
        .route("/api/spaces/{space}/warm", post(warm))
        .with_state(state)
}

async fn health_stats(State(s): State<HttpState>) -> impl IntoResponse {
    let registered = s.host.store().directory().count().unwrap_or(0);
    Json(json!({
        "ok": true,
        "spacesRegistered": registered,
        "activeSpaces": s.host.active_spaces(),
        "servingLoop": s.host.counters().serving_loop_json(),
    }))
}

async fn metrics(State(s): State<HttpState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.host.counters().prometheus_text(),
    )
}

async fn ws(State(s): State<HttpState>, upgrade: WebSocketUpgrade) -> Response {
    // Frames up to the transport limit reach the protocol parser, which
    // answers oversized ones (past MAX_FRAME_BYTES) with an error frame.
    upgrade
        .max_message_size(TRANSPORT_MAX_MESSAGE_BYTES)
        .max_frame_size(TRANSPORT_MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| crate::session::run(socket, s.host))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct IngestBody {
    piece: String,
    stream: Vec<PathSegment>,
    #[serde(default)]
    payload: serde_json::Value,
    event_id: String,
}

fn http_error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"error": {"code": code, "message": message.into()}})),
    )
        .into_response()
}

/// Checks the request's signature and that its principal may write.
#[allow(clippy::result_large_err)]
fn authorize(s: &HttpState, space: &str, headers: &HeaderMap, body: &[u8]) -> Result<(), Response> {
    let header_str = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let did = header_str("x-spacewake-did");
    let sig = header_str("x-spacewake-signature");
    if let Err(e) = verify_ingest(space, body, did, sig) {
        s.host.counters().add_host(Counter::SessionsRejected, 1);
        return Err(http_error(
            StatusCode::UNAUTHORIZED,
            "badSignature",
            e.to_string(),
        ));
    }
    match s.host.store().directory().access(space, did) {
        Ok(Some(a)) if a == "owner" || a == "write" => Ok(()),
        Ok(_) => Err(http_error(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("{did} may not write to space {space}"),
        )),
        Err(e) => Err(http_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            e.to_string(),
        )),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WarmBody {
    pieces: Vec<String>,
}

/// Activates a space (if parked) with warm demand for the named pieces.
async fn warm(
    State(s): State<HttpState>,
    Path(space): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = authorize(&s, &space, &headers, &body) {
        return r;
    }
    let parsed: WarmBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return http_error(StatusCode::BAD_REQUEST, "badMessage", e.to_string()),
    };
    match s
        .host
        .request(
            &space,
            Trigger::Warm,
            Request::Warm {
                pieces: parsed.pieces,
            },
        )
        .await
    {
        Ok(_) => (StatusCode::OK, Json(json!({"warmed": true}))).into_response(),
        Err(e) => host_error_response(e),
    }
}

/// Appends one event to a piece's stream on behalf of a signing principal,
/// activating the space if it is parked. Idempotent by `eventId`.
async fn ingest(
    State(s): State<HttpState>,
    Path(space): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = authorize(&s, &space, &headers, &body) {
        return r;
    }
    let did = headers
        .get("x-spacewake-did")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let parsed: IngestBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return http_error(StatusCode::BAD_REQUEST, "badMessage", e.to_string()),
    };
    let req = Request::Send {
        author: Author::principal(did),
        piece: parsed.piece,
        path: parsed
            .stream
            .into_iter()
            .map(|p| match p {
                PathSegment::Key(k) => PathSeg::Key(k),
                PathSegment::Index(i) => PathSeg::Index(i as usize),
            })
            .collect(),
        event_id: Some(parsed.event_id),
        payload: parsed.payload,
    };
    match s.host.request(&space, Trigger::Events, req).await {
        Ok(Reply::Appended { seq, duplicate }) => (
            StatusCode::OK,
            Json(json!({"seq": seq, "duplicate": duplicate})),
        )
            .into_response(),
        Ok(other) => http_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("{other:?}"),
        ),
        Err(e) => host_error_response(e),
    }
}

/// A host error as an HTTP error: unknown things are 404, a space that
/// cannot be reached now (backing off, the host at its limit, held by
/// another host, its server stopped) 503 with `Retry-After`, a server-side
/// failure 500.
fn host_error_response(e: crate::host::HostError) -> Response {
    let retry_after_ms = e.retry_after_ms();
    let pe = crate::session::host_error(None, e);
    let status = match pe.code {
        ErrorCode::UnknownSpace | ErrorCode::UnknownPiece | ErrorCode::UnknownStream => {
            StatusCode::NOT_FOUND
        }
        ErrorCode::BadMessage => StatusCode::BAD_REQUEST,
        ErrorCode::Overloaded
        | ErrorCode::BackingOff
        | ErrorCode::HeldElsewhere
        | ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut r = http_error(status, pe.code.as_str(), pe.message);
    if let Some(ms) = retry_after_ms.filter(|_| status == StatusCode::SERVICE_UNAVAILABLE) {
        // Whole seconds, rounded up (RFC 9110).
        let secs = ms.div_ceil(1_000).max(1);
        if let Ok(v) = header::HeaderValue::from_str(&secs.to_string()) {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    r
}
