//! The HTTP edge. Only this module knows HTTP.
//!
//! - `GET /api/health/stats`: `{"ok": true, "servingLoop": {...counters}}`
//! - `GET /metrics`: the same counters in Prometheus text format.
//! - `GET /ws`: the WebSocket endpoint (see `spec/protocol.md`).
//! - `POST /api/spaces/{space}/events`: webhook-style ingest, authenticated
//!   by an ed25519 signature over the body (see `spec/protocol.md`).
//! - `POST /api/spaces/{space}/warm`: an explicit warm request for named
//!   pieces (identity-less warm demand), signed the same way.
//! - `/api/operator/…`: the signed operator API (`operator.rs`,
//!   `spec/operators.md`).
//! - `/console…` (and `/`): the operator console's pages (`console.rs`,
//!   `spec/console.md`).
//!
//! Every error of every route has one JSON shape ([`http_error`]).

use crate::host::{Host, Request, Trigger};
use crate::metrics::Counter;
use crate::protocol::messages::check_send;
use crate::protocol::{
    verify_ingest, ErrorCode, PathSegment, ProtocolError, TRANSPORT_MAX_MESSAGE_BYTES,
};
use crate::store::{Author, PathSeg};
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, State, WebSocketUpgrade};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

pub mod conn;
pub mod console;
mod operator;

pub use operator::{OperatorAuth, WINDOW_MS as OPERATOR_WINDOW_MS};

#[derive(Clone)]
pub struct HttpState {
    pub host: Host,
    /// Who may use the operator API (`/api/operator/…`).
    pub operators: std::sync::Arc<OperatorAuth>,
    /// The console's sign-in and its throughput samples.
    pub console: std::sync::Arc<console::ConsoleState>,
    /// How long a WebSocket may go without opening its session (`None`:
    /// no deadline).
    pub ws_open: Option<std::time::Duration>,
    /// Spaces given per-space series on `/metrics` (the top ones by CPU).
    pub metrics_top_spaces: usize,
    /// On a fleet's database: relaying to the host that holds a space, and
    /// checking what other hosts relay here.
    pub relay: Option<std::sync::Arc<crate::relay::Relay>>,
}

/// The default of `serve --ws-open-timeout-ms`.
pub const DEFAULT_WS_OPEN: std::time::Duration = std::time::Duration::from_secs(10);

impl HttpState {
    /// A state whose console nobody can sign in to (see
    /// [`HttpState::with_console_auth`]).
    pub fn new(host: Host, operators: OperatorAuth) -> HttpState {
        HttpState {
            host,
            operators: std::sync::Arc::new(operators),
            console: std::sync::Arc::new(console::ConsoleState::new(
                crate::console::auth::ConsoleAuth::disabled(),
            )),
            ws_open: Some(DEFAULT_WS_OPEN),
            metrics_top_spaces: crate::metrics::exposition::DEFAULT_TOP_SPACES,
            relay: None,
        }
    }

    pub fn with_relay(mut self, relay: crate::relay::Relay) -> HttpState {
        self.relay = Some(std::sync::Arc::new(relay));
        self
    }

    pub fn with_console_auth(mut self, auth: crate::console::auth::ConsoleAuth) -> HttpState {
        self.console = std::sync::Arc::new(console::ConsoleState::new(auth));
        self
    }

    pub fn with_console(mut self, console: console::ConsoleState) -> HttpState {
        self.console = std::sync::Arc::new(console);
        self
    }

    pub fn with_ws_open_timeout(mut self, limit: Option<std::time::Duration>) -> HttpState {
        self.ws_open = limit;
        self
    }

    pub fn with_metrics_top_spaces(mut self, top: usize) -> HttpState {
        self.metrics_top_spaces = top;
        self
    }
}

/// Accepts connections with `TCP_NODELAY`: sessions exchange small frames,
/// and Nagle's algorithm with delayed ACKs would hold each for up to 40 ms.
/// (A named type, not `impl Listener`, so `serve` can add the peer's
/// address as connect info.)
pub fn nodelay(
    listener: tokio::net::TcpListener,
) -> axum::serve::TapIo<tokio::net::TcpListener, fn(&mut tokio::net::TcpStream)> {
    use axum::serve::ListenerExt;
    fn set_nodelay(tcp: &mut tokio::net::TcpStream) {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
    }
    listener.tap_io(set_nodelay as fn(&mut tokio::net::TcpStream))
}

/// The request-body limit of every route (axum's default, 2 MiB).
pub const BODY_LIMIT_BYTES: usize = 2 * 1024 * 1024;

pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/api/health/stats", get(health_stats))
        .route("/metrics", get(metrics))
        .route("/ws", get(ws))
        .route("/api/spaces/{space}/events", post(ingest))
        .route("/api/spaces/{space}/warm", post(warm))
        .merge(operator::routes())
        .merge(console::routes(&state))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT_BYTES))
        .with_state(state)
}

async fn health_stats(State(s): State<HttpState>) -> impl IntoResponse {
    let registered = s.host.store().directory().count().unwrap_or(0);
    let mut body = json!({
        "ok": true,
        "spacesRegistered": registered,
        "activeSpaces": s.host.active_spaces(),
        "servingLoop": s.host.counters().serving_loop_json(),
    });
    if let Some(fleet) = fleet_view(&s) {
        body["fleet"] = fleet;
    }
    Json(body)
}

/// On a fleet's database: this host's lease-holder name and the hosts the
/// database knows (alive or not, spaces held, last lease renewal, last
/// heartbeat), read when asked. `None` on the SQLite files.
fn fleet_view(s: &HttpState) -> Option<serde_json::Value> {
    let pg = s.host.store().postgres()?;
    let hosts = crate::store::off_runtime(|| pg.fleet());
    Some(match hosts {
        Ok(hosts) => json!({ "self": pg.holder(), "hosts": hosts }),
        Err(e) => json!({ "self": pg.holder(), "error": e.to_string() }),
    })
}

async fn metrics(State(s): State<HttpState>) -> impl IntoResponse {
    let mut extra: Vec<Box<dyn prometheus_client::collector::Collector>> = Vec::new();
    if let Ok(registered) = s.host.store().directory().count() {
        extra.push(Box::new(crate::metrics::exposition::SpaceGauges {
            registered,
            active: s.host.active_spaces().len() as u64,
        }));
    }
    if let Some(pg) = s.host.store().postgres() {
        if let Ok(hosts) = crate::store::off_runtime(|| pg.fleet()) {
            extra.push(Box::new(FleetGauges {
                me: pg.holder().to_string(),
                hosts,
            }));
        }
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.host
            .counters()
            .prometheus_text_with(s.metrics_top_spaces, extra),
    )
}

/// The fleet view as gauges labelled by host (`holder`, and `self` for the
/// host answering).
#[derive(Debug)]
struct FleetGauges {
    me: String,
    hosts: Vec<crate::store::postgres::FleetHost>,
}

impl prometheus_client::collector::Collector for FleetGauges {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use crate::store::postgres::FleetHost;
        use prometheus_client::encoding::{EncodeGaugeValue, EncodeMetric};
        use prometheus_client::metrics::gauge::ConstGauge;
        fn family<T: EncodeGaugeValue + Default + std::fmt::Debug>(
            encoder: &mut prometheus_client::encoding::DescriptorEncoder<'_>,
            g: &FleetGauges,
            (name, help, value): (&str, &str, fn(&FleetHost) -> T),
        ) -> Result<(), std::fmt::Error> {
            let proto = ConstGauge::new(T::default());
            let mut family = encoder.encode_descriptor(name, help, None, proto.metric_type())?;
            for h in &g.hosts {
                let me = if h.holder == g.me { "true" } else { "false" };
                let labels = [("holder", h.holder.as_str()), ("self", me)];
                ConstGauge::new(value(h)).encode(family.encode_family(&labels)?)?;
            }
            Ok(())
        }
        type Gauge<T> = (&'static str, &'static str, fn(&FleetHost) -> T);
        let counts: [Gauge<i64>; 2] = [
            (
                "spacewake_fleet_host_alive",
                "1 while the host holds a lease live or heartbeats within a TTL",
                |h| i64::from(h.alive),
            ),
            (
                "spacewake_fleet_host_spaces_held",
                "Spaces whose lease the host holds live",
                |h| h.spaces_held as i64,
            ),
        ];
        let times: [Gauge<f64>; 2] = [
            (
                "spacewake_fleet_host_last_renewal_seconds",
                "When the host last took or renewed a lease (database clock, Unix seconds)",
                |h| h.last_renewal_ms as f64 / 1000.0,
            ),
            (
                "spacewake_fleet_host_last_seen_seconds",
                "The host's last heartbeat (database clock, Unix seconds)",
                |h| h.last_seen_ms as f64 / 1000.0,
            ),
        ];
        for g in counts {
            family(&mut encoder, self, g)?;
        }
        for g in times {
            family(&mut encoder, self, g)?;
        }
        Ok(())
    }
}

async fn ws(
    State(s): State<HttpState>,
    peer: Option<axum::Extension<conn::Peer>>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    // Known when served with connect info (`serve`); space creation is
    // rated per address.
    let peer = peer.map(|axum::Extension(conn::Peer(a))| a.ip());
    let mode = match relayed(&s, &headers, "GET", "/ws", b"") {
        Err(refused) => return refused,
        Ok(Some(r)) => {
            let relay = s.relay.as_ref().expect("a relayed request was checked");
            if let Err(refused) = relay.take_nonce(&r.extra) {
                return relay_refused(refused);
            }
            crate::session::Mode::Relayed { nonce: r.extra }
        }
        Ok(None) => crate::session::Mode::Direct {
            relay: s.relay.clone(),
        },
    };
    // Frames up to the transport limit reach the protocol parser, which
    // answers oversized ones (past MAX_FRAME_BYTES) with an error frame.
    upgrade
        .max_message_size(TRANSPORT_MAX_MESSAGE_BYTES)
        .max_frame_size(TRANSPORT_MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| crate::session::run(socket, s.host, s.ws_open, peer, mode))
}

/// Whether another host relayed this request here, checked
/// (`relay::Relay::check`); a request saying so that does not check out
/// is refused.
#[allow(clippy::result_large_err)]
pub(crate) fn relayed(
    s: &HttpState,
    headers: &HeaderMap,
    method: &str,
    path_and_query: &str,
    body: &[u8],
) -> Result<Option<crate::relay::Relayed>, Response> {
    if !headers.contains_key(crate::relay::FROM) {
        return Ok(None);
    }
    let Some(relay) = &s.relay else {
        s.host.counters().add_host(Counter::RelayRefused, 1);
        return Err(relay_refused(crate::relay::Refusal::NoRelay));
    };
    relay
        .check(headers, method, path_and_query, body)
        .map_err(relay_refused)
}

fn relay_refused(r: crate::relay::Refusal) -> Response {
    http_error(
        StatusCode::UNAUTHORIZED,
        "badSignature",
        format!("relay refused: {r}"),
    )
}

/// Answers a request the host refused: a space another host holds is
/// served there when this host can reach it (`relay::Relay::forward`),
/// the answer passed back as it came; otherwise, and for a request another
/// host relayed here (never relayed on), the refusal itself.
pub(crate) async fn relay_or_refuse(
    s: &HttpState,
    e: crate::host::HostError,
    request: Forward<'_>,
) -> Response {
    let holder = match (&e, &s.relay, request.relayed) {
        (crate::host::HostError::HeldElsewhere { holder, .. }, Some(_), false) => holder.clone(),
        _ => return host_error_response(e),
    };
    let relay = s.relay.as_ref().expect("matched above");
    let answer = relay
        .forward(
            &holder,
            request.method,
            request.path_and_query,
            request.headers,
            request.extra,
            request.body,
        )
        .await;
    match answer {
        Ok(r) => {
            s.host.counters().add_host(Counter::RelayRequests, 1);
            r
        }
        Err(why) => {
            s.host.counters().add_host(Counter::RelayUnreachable, 1);
            tracing::info!(%why, "answering heldElsewhere: the holder cannot be reached");
            host_error_response(e)
        }
    }
}

/// A request to pass on to a space's holder.
pub(crate) struct Forward<'a> {
    pub method: &'a axum::http::Method,
    pub path_and_query: &'a str,
    /// The client's own headers to send along (its signature).
    pub headers: &'a [(&'a str, &'a str)],
    /// What this host vouches for (the operator it checked, for an
    /// operator action).
    pub extra: &'a str,
    pub body: Bytes,
    /// Another host relayed it here: it is not relayed on.
    pub relayed: bool,
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

/// Every error response has one shape: `{"error": {"code", "message",
/// "details"?}}`, with the same codes as the WebSocket's error frames.
pub(crate) fn http_error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    error_with(status, code, message.into(), None)
}

pub(crate) fn error_with(
    status: StatusCode,
    code: &str,
    message: String,
    details: Option<serde_json::Value>,
) -> Response {
    let mut error = json!({"code": code, "message": message});
    if let Some(d) = details {
        error["details"] = d;
    }
    (status, Json(json!({ "error": error }))).into_response()
}

/// A protocol error (the same one a session would get) as an HTTP error.
pub(crate) fn protocol_error(status: StatusCode, e: ProtocolError) -> Response {
    error_with(status, e.code.as_str(), e.message, e.details)
}

/// A body the route could not read: over the size limit (413), or not
/// readable at all; in the common error shape, not axum's plain text.
pub(crate) fn body_error(r: BytesRejection) -> Response {
    let status = r.status();
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        return http_error(
            status,
            "bodyTooLarge",
            format!(
                "the request body is over the limit of {} bytes (2 MiB)",
                BODY_LIMIT_BYTES
            ),
        );
    }
    http_error(status, "badMessage", r.body_text())
}

/// A path segment that could not be read (bad percent-encoding, say).
pub(crate) fn path_error(r: PathRejection) -> Response {
    http_error(StatusCode::BAD_REQUEST, "badMessage", r.body_text())
}

/// A request body's JSON that does not fit the route's shape.
fn bad_body(e: serde_json::Error) -> Response {
    http_error(
        StatusCode::BAD_REQUEST,
        "badMessage",
        format!("the body is not the expected JSON: {e}"),
    )
}

/// Checks the request's signature (by `did`), that the space exists, and
/// that the signing principal may write to it.
#[allow(clippy::result_large_err)]
fn authorize(
    s: &HttpState,
    space: &str,
    did: &str,
    sig: &str,
    body: &[u8],
) -> Result<(), Response> {
    if let Err(e) = verify_ingest(space, body, did, sig) {
        s.host.counters().add_host(Counter::SessionsRejected, 1);
        let e = ProtocolError::bad_signature(&e, "request refused");
        return Err(protocol_error(StatusCode::UNAUTHORIZED, e));
    }
    let directory = s.host.store().directory();
    let exists = crate::store::validate_space_id(space).is_ok()
        && matches!(directory.get(space), Ok(Some(_)));
    if !exists {
        return Err(host_error_response(crate::host::HostError::UnknownSpace(
            space.to_string(),
        )));
    }
    match directory.access(space, did) {
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

/// A header's value as text; empty when absent or not visible ASCII.
pub(crate) fn header_str<'h>(headers: &'h HeaderMap, name: &str) -> &'h str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WarmBody {
    pieces: Vec<String>,
}

/// A signed ingest or warm request whose principal may write to its space
/// ([`authorize`]): the path's space, the signer, the body.
struct Writer {
    space: String,
    did: String,
    signature: String,
    body: Bytes,
    /// The path and query it was sent to, to relay it as it came.
    path: String,
    /// Another host relayed it here.
    relayed: bool,
}

impl Writer {
    /// The request as it came, to pass on to the space's holder.
    async fn relay_or_refuse(self, s: &HttpState, e: crate::host::HostError) -> Response {
        let headers = [
            ("x-spacewake-did", self.did.as_str()),
            ("x-spacewake-signature", self.signature.as_str()),
            ("content-type", "application/json"),
        ];
        let forward = Forward {
            method: &axum::http::Method::POST,
            path_and_query: &self.path,
            headers: &headers,
            extra: "",
            body: self.body,
            relayed: self.relayed,
        };
        relay_or_refuse(s, e, forward).await
    }
}

impl FromRequest<HttpState> for Writer {
    type Rejection = Response;

    async fn from_request(req: axum::extract::Request, s: &HttpState) -> Result<Self, Response> {
        let (mut parts, body) = req.into_parts();
        let Path(space) = Path::<String>::from_request_parts(&mut parts, s)
            .await
            .map_err(path_error)?;
        let did = header_str(&parts.headers, "x-spacewake-did").to_string();
        let sig = header_str(&parts.headers, "x-spacewake-signature").to_string();
        let path = parts
            .uri
            .path_and_query()
            .map_or(parts.uri.path(), |p| p.as_str())
            .to_string();
        let headers = parts.headers.clone();
        let req = axum::extract::Request::from_parts(parts, body);
        let body = Bytes::from_request(req, s).await.map_err(body_error)?;
        let relayed = relayed(s, &headers, "POST", &path, &body)?.is_some();
        if relayed {
            s.host.counters().add_host(Counter::RelayServed, 1);
        }
        authorize(s, &space, &did, &sig, &body)?;
        Ok(Writer {
            space,
            did,
            signature: sig,
            body,
            path,
            relayed,
        })
    }
}

/// Activates a space (if parked) with warm demand for the named pieces.
async fn warm(State(s): State<HttpState>, w: Writer) -> Response {
    let (space, body) = (w.space.clone(), w.body.clone());
    let parsed: WarmBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return bad_body(e),
    };
    if parsed.pieces.is_empty() || parsed.pieces.iter().any(String::is_empty) {
        return http_error(
            StatusCode::BAD_REQUEST,
            "badMessage",
            "`pieces` must name at least one piece, each by a non-empty id",
        );
    }
    match s
        .host
        .ask(
            &space,
            Trigger::Warm,
            Request::Warm {
                pieces: parsed.pieces,
            },
        )
        .await
    {
        Ok(_) => (StatusCode::OK, Json(json!({"warmed": true}))).into_response(),
        Err(e) => w.relay_or_refuse(&s, e).await,
    }
}

/// Appends one event to a piece's stream on behalf of a signing principal,
/// activating the space if it is parked. Idempotent by `eventId`.
async fn ingest(State(s): State<HttpState>, w: Writer) -> Response {
    let (space, did, body) = (w.space.clone(), w.did.clone(), w.body.clone());
    let parsed: IngestBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return bad_body(e),
    };
    // The same rules, and the same words, as a WebSocket `send`.
    if let Err(v) = check_send(&parsed.piece, &parsed.stream, Some(&parsed.event_id)) {
        return protocol_error(StatusCode::BAD_REQUEST, v.into());
    }
    let req = crate::host::SendEvent {
        author: Author::principal(&did),
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
    match s.host.ask(&space, Trigger::Events, req).await {
        Ok(a) => (
            StatusCode::OK,
            Json(json!({"seq": a.seq, "duplicate": a.duplicate})),
        )
            .into_response(),
        Err(e) => w.relay_or_refuse(&s, e).await,
    }
}

/// Any route this server does not have.
async fn not_found(uri: axum::http::Uri) -> Response {
    http_error(
        StatusCode::NOT_FOUND,
        "notFound",
        format!("there is no route {}", uri.path()),
    )
}

/// A route asked with a method it does not take.
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    http_error(
        StatusCode::METHOD_NOT_ALLOWED,
        "methodNotAllowed",
        format!("{} does not take {method}", uri.path()),
    )
}

/// A host error as an HTTP error: unknown things are 404, a space that
/// cannot be reached now (backing off, the host at its limit, held by
/// another host, its server stopped) 503 with `Retry-After`, a server-side
/// failure 500.
pub(crate) fn host_error_response(e: crate::host::HostError) -> Response {
    let retry_after_ms = e.retry_after_ms();
    let pe = crate::session::host_error(None, e);
    let status = match pe.code {
        ErrorCode::UnknownSpace | ErrorCode::UnknownPiece | ErrorCode::UnknownStream => {
            StatusCode::NOT_FOUND
        }
        ErrorCode::BadMessage | ErrorCode::InvalidArgument => StatusCode::BAD_REQUEST,
        ErrorCode::Overloaded
        | ErrorCode::BackingOff
        | ErrorCode::HeldElsewhere
        | ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::QuotaExceeded => StatusCode::INSUFFICIENT_STORAGE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut r = protocol_error(status, pe);
    if let Some(ms) = retry_after_ms.filter(|_| status == StatusCode::SERVICE_UNAVAILABLE) {
        // Whole seconds, rounded up (RFC 9110).
        let secs = ms.div_ceil(1_000).max(1);
        if let Ok(v) = header::HeaderValue::from_str(&secs.to_string()) {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    r
}
