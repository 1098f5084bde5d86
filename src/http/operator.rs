//! The operator API: `/api/operator/…`, JSON in and out, every request
//! signed by an operator's key (`spec/operators.md`).
//!
//! # Authentication
//! Three headers: `x-spacewake-did` (a did:key), `x-spacewake-time` (ms
//! since the epoch) and `x-spacewake-signature` (base64url ed25519 over
//! `protocol::operator_message(time, method, path?query, body)`). The did
//! must be one of this host's operators (`serve --operator DID`, or the
//! host's own key in `DATA/host.key`). The time must be within
//! [`WINDOW_MS`] of the host clock, and an action's signature is accepted
//! once: replaying an action inside the window is refused, and outside it
//! is stale. Reads (`GET`) may repeat. Accepted actions are remembered by
//! their decoded signature bytes (a padded or otherwise re-spelled copy is
//! the same signature) in the directory, so neither a restart nor another
//! host of a fleet opens a window for a replay.
//!
//! # What acts where
//! Reads open space files directly ([`crate::operator`]); writes to a
//! space's plane go through the host ([`Host::operate`]), on the space
//! server's handle of the file; grants and space creation are writes to
//! the host directory, which this process owns.

use super::{error_with, header_str, http_error, HttpState};
use crate::host::{Host, Operation};
use crate::metrics::Counter;
use crate::operator::{self as op, BudgetSetting, EntryAction, Limit, OpError, View};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashSet;

/// How far an operator request's time may be from the host clock.
pub const WINDOW_MS: u64 = 5 * 60_000;

/// Who may use the operator API.
pub struct OperatorAuth {
    dids: HashSet<String>,
}

impl OperatorAuth {
    /// Operators: these dids (the host's own is among them).
    pub fn new(dids: impl IntoIterator<Item = String>) -> OperatorAuth {
        OperatorAuth {
            dids: dids.into_iter().collect(),
        }
    }

    /// Whether `did` is an operator of this host.
    pub fn is_operator(&self, did: &str) -> bool {
        self.dids.contains(did)
    }
}

pub fn routes() -> Router<HttpState> {
    Router::new()
        .route("/api/operator/host", get(host_overview))
        .route("/api/operator/spaces", get(list_spaces).post(create_space))
        .route("/api/operator/spaces/{space}", get(one_space))
        .route("/api/operator/spaces/{space}/pieces", get(pieces))
        .route(
            "/api/operator/spaces/{space}/pieces/{piece}",
            delete(delete_piece),
        )
        .route(
            "/api/operator/spaces/{space}/dead-letters",
            get(dead_letters),
        )
        .route("/api/operator/spaces/{space}/grants", post(grant))
        .route("/api/operator/schedules", get(schedules))
        // trigger, pause or resume
        .route(
            "/api/operator/spaces/{space}/schedules/{piece}/{entry}/{action}",
            post(entry_action),
        )
        .route(
            "/api/operator/spaces/{space}/schedules/{piece}/{entry}/fires",
            get(fires),
        )
        .route("/api/operator/spaces/{space}/runs", get(run))
        .route("/api/operator/spaces/{space}/ledger", get(ledger))
        .route(
            "/api/operator/spaces/{space}/ledger/budget",
            put(set_budget),
        )
        .route("/api/operator/spaces/{space}/effects", put(set_effects))
}

/// One authenticated operator request: who signed it, and its body.
struct Signed {
    did: String,
    body: Bytes,
    method: Method,
    /// The path and query it was sent to.
    path: String,
    /// Another host relayed it here, vouching for `did` (whose signature
    /// it checked): it is not relayed on.
    relayed: bool,
}

impl FromRequest<HttpState> for Signed {
    type Rejection = Response;

    async fn from_request(req: axum::extract::Request, s: &HttpState) -> Result<Self, Response> {
        let (method, uri, headers) = (
            req.method().clone(),
            req.uri().clone(),
            req.headers().clone(),
        );
        let body = Bytes::from_request(req, s).await;
        authenticate(s, &method, &uri, &headers, body)
    }
}

impl Signed {
    /// On a fleet, for an action this host did not get relayed: another
    /// host holding `space` live, whose action it is.
    fn held_elsewhere(&self, s: &HttpState, space: &str) -> Option<crate::host::HostError> {
        if self.relayed || s.host.is_active(space) {
            return None;
        }
        s.relay.as_ref()?.holder_elsewhere(space)
    }
    /// A refusal by the host: a space held by another host of the fleet is
    /// acted on there, this host vouching for the operator.
    async fn relay_or_refuse(&self, s: &HttpState, e: crate::host::HostError) -> Response {
        let forward = super::Forward {
            method: &self.method,
            path_and_query: &self.path,
            headers: &[("content-type", "application/json")],
            extra: &self.did,
            body: self.body.clone(),
            relayed: self.relayed,
        };
        super::relay_or_refuse(s, e, forward).await
    }

    /// The body as `T`, or a `badMessage` naming the expected `shape`.
    #[allow(clippy::result_large_err)]
    fn json<T: serde::de::DeserializeOwned>(&self, shape: &str) -> Result<T, Response> {
        serde_json::from_slice(&self.body)
            .map_err(|e| bad(&format!("the body is not {shape}: {e}")))
    }
}

/// Path parameters, refused in the common error shape.
struct Params<T>(T);

impl<T: serde::de::DeserializeOwned + Send> FromRequestParts<HttpState> for Params<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, s: &HttpState) -> Result<Self, Response> {
        Path::<T>::from_request_parts(parts, s)
            .await
            .map(|Path(t)| Params(t))
            .map_err(super::path_error)
    }
}

/// A query string, refused in the common error shape with `usage`.
struct QueryOf<T>(T);

impl<T: serde::de::DeserializeOwned + Usage + Send> FromRequestParts<HttpState> for QueryOf<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, s: &HttpState) -> Result<Self, Response> {
        Query::<T>::from_request_parts(parts, s)
            .await
            .map(|Query(t)| QueryOf(t))
            .map_err(|_| bad(T::USAGE))
    }
}

/// What a query takes, for the error when it does not fit.
trait Usage {
    const USAGE: &'static str;
}

/// Checks the signature, time, replay and operator rights of a request.
#[allow(clippy::result_large_err)]
fn authenticate(
    s: &HttpState,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Signed, Response> {
    let body = body.map_err(super::body_error)?;
    let refuse = |status: StatusCode, code: &str, reason: &str, message: String| {
        s.host.counters().add_host(Counter::OperatorRefused, 1);
        let details = (!reason.is_empty()).then(|| json!({ "reason": reason }));
        error_with(status, code, message, details)
    };
    let path = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let signed = |did: String, relayed: bool, body: Bytes| Signed {
        did,
        body,
        method: method.clone(),
        path: path.to_string(),
        relayed,
    };
    // A fleet host that relays an action here checked its operator's
    // signature, time and replay itself (and recorded the signature, so
    // it could not be checked again here).
    if let Some(r) = super::relayed(s, headers, method.as_str(), path, &body)? {
        s.host.counters().add_host(Counter::RelayServed, 1);
        return Ok(signed(r.extra, true, body));
    }
    let did = header_str(headers, "x-spacewake-did").to_string();
    let signature = header_str(headers, "x-spacewake-signature");
    let now = s.host.store().clock().now_ms();
    let Ok(time) = header_str(headers, "x-spacewake-time").parse::<u64>() else {
        return Err(refuse(
            StatusCode::UNAUTHORIZED,
            "badSignature",
            "malformedTime",
            "request refused: x-spacewake-time must be the request's time in ms since the epoch"
                .into(),
        ));
    };
    let signature =
        match crate::protocol::verify_operator(&did, signature, time, method.as_str(), path, &body)
        {
            Ok(bytes) => bytes,
            Err(e) => {
                s.host.counters().add_host(Counter::OperatorRefused, 1);
                let e = crate::protocol::ProtocolError::bad_signature(&e, "request refused");
                return Err(super::protocol_error(StatusCode::UNAUTHORIZED, e));
            }
        };
    if time.abs_diff(now) > WINDOW_MS {
        return Err(refuse(
            StatusCode::UNAUTHORIZED,
            "badSignature",
            "stale",
            format!(
                "request refused: its time is {} ms from the server's (the limit is {WINDOW_MS} ms); \
                 check the clocks, or sign it anew",
                time.abs_diff(now)
            ),
        ));
    }
    if !s.operators.is_operator(&did) {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "forbidden",
            "",
            format!(
                "{did} is not an operator of this host (`serve --operator DID`, or sign with \
                 the host's key in its data directory)"
            ),
        ));
    }
    // Reads may repeat (a replayed read shows what its capture already
    // showed; identical reads within one millisecond sign alike); an
    // action is accepted once, by its decoded bytes, remembered in the
    // directory for twice the window (past it the signed time is stale).
    if *method != Method::GET {
        let first = s.host.store().directory().first_use_of_signature(
            &signature,
            now,
            now.saturating_sub(2 * WINDOW_MS),
        );
        match first {
            Ok(true) => {}
            Ok(false) => {
                s.host
                    .counters()
                    .add_host(Counter::OperatorReplaysRefused, 1);
                return Err(refuse(
                    StatusCode::UNAUTHORIZED,
                    "badSignature",
                    "replayed",
                    "request refused: this signature was already used; sign each request anew"
                        .into(),
                ));
            }
            Err(e) => {
                return Err(http_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    format!("request refused: cannot record the action's signature: {e}"),
                ))
            }
        }
    }
    Ok(signed(did, false, body))
}

/// An operator error as an HTTP error, in the common shape.
fn op_error(e: OpError) -> Response {
    let (status, code, details) = match &e {
        OpError::UnknownSpace(space) => (
            StatusCode::NOT_FOUND,
            "unknownSpace",
            Some(json!({ "space": space })),
        ),
        OpError::Quarantined { space, reason } => (
            StatusCode::CONFLICT,
            "quarantined",
            Some(json!({ "space": space, "reason": reason })),
        ),
        OpError::UnknownPiece { piece, .. } => (
            StatusCode::NOT_FOUND,
            "unknownPiece",
            Some(json!({ "piece": piece })),
        ),
        OpError::UnknownRun { space, event } => (
            StatusCode::NOT_FOUND,
            "unknownRun",
            Some(json!({ "space": space, "event": event })),
        ),
        OpError::NoSchedule(piece) => (
            StatusCode::NOT_FOUND,
            "unknownEntry",
            Some(json!({ "piece": piece, "entries": [] })),
        ),
        OpError::UnknownEntry { piece, have, .. } => (
            StatusCode::NOT_FOUND,
            "unknownEntry",
            Some(json!({ "piece": piece, "entries": have })),
        ),
        OpError::BadRequest(_) => (StatusCode::BAD_REQUEST, "badMessage", None),
        OpError::SpaceExists(space) => (
            StatusCode::CONFLICT,
            "spaceExists",
            Some(json!({ "space": space })),
        ),
        OpError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal", None),
    };
    error_with(status, code, e.to_string(), details)
}

/// What reads need, from this host.
pub(super) fn view(host: &Host) -> View<'_> {
    let cfg = host.config();
    View {
        store: host.store(),
        now_ms: host.store().clock().now_ms(),
        active: host.active_spaces().into_iter().collect(),
        window_ms: cfg.runtime.ledger_window_ms,
        host_budget: Some(Limit::of(cfg.schedule.scheduled_budget_us)),
        host_effects: cfg.runtime.effects.as_ref().map(|b| b.limits()),
    }
}

/// Runs a read on a blocking thread (it opens files) and answers JSON.
async fn read<T: serde::Serialize + Send + 'static>(
    s: &HttpState,
    f: impl FnOnce(&Host) -> op::OpResult<T> + Send + 'static,
) -> Response {
    let host = s.host.clone();
    let result = tokio::task::spawn_blocking(move || f(&host)).await;
    s.host.counters().add_host(Counter::OperatorReads, 1);
    match result {
        Ok(Ok(v)) => Json(v).into_response(),
        Ok(Err(e)) => op_error(e),
        Err(e) => http_error(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()),
    }
}

/// Logs and counts an operator's action.
pub(super) fn acted(s: &HttpState, who: &str, action: &str, space: &str) {
    s.host.counters().space(space).inc(Counter::OperatorActions);
    tracing::info!(operator = who, action, space, "operator action");
}

/// Why an action on a space's file was not done.
pub(super) enum NotDone {
    /// The operator's request (unknown space or entry, bad value…).
    Op(OpError),
    /// The host's (shutting down, backing off…).
    Host(crate::host::HostError),
}

/// Runs `f` on the space's file through the host (see [`Host::operate`]):
/// the operator API's actions and the console's share it.
pub(super) async fn operate_on(
    s: &HttpState,
    space: &str,
    f: impl FnOnce(&mut crate::store::Space) -> op::OpResult<Value> + Send + 'static,
) -> Result<Value, NotDone> {
    // A quarantined or unknown space is said so before any activation
    // (one directory read, as a session open makes).
    op::healthy(s.host.store(), space).map_err(NotDone::Op)?;
    match s.host.operate(space, Operation(Box::new(f))).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(NotDone::Op(e)),
        Err(e) => Err(NotDone::Host(e)),
    }
}

async fn operate(
    s: &HttpState,
    signed: &Signed,
    space: &str,
    f: impl FnOnce(&mut crate::store::Space) -> op::OpResult<Value> + Send + 'static,
) -> Response {
    if let Some(e) = signed.held_elsewhere(s, space) {
        return signed.relay_or_refuse(s, e).await;
    }
    match operate_on(s, space, f).await {
        Ok(v) => Json(v).into_response(),
        Err(NotDone::Op(e)) => op_error(e),
        Err(NotDone::Host(e)) => signed.relay_or_refuse(s, e).await,
    }
}

pub(super) fn to_json<T: serde::Serialize>(v: T) -> op::OpResult<Value> {
    serde_json::to_value(v).map_err(|e| OpError::Internal(e.to_string()))
}

/// The path parameters of one schedule entry.
#[derive(Deserialize)]
struct EntryPath {
    space: String,
    piece: String,
    entry: String,
}

/// An entry's number in a path: its position in the piece's `[SCHEDULE]`.
#[allow(clippy::result_large_err)]
fn entry_number(text: &str) -> Result<u32, Response> {
    text.parse().map_err(|_| {
        bad(&format!(
            "the entry is its position in the piece's [SCHEDULE] list, from 0 (got {text:?})"
        ))
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    after: Option<String>,
    limit: Option<usize>,
}

impl Usage for ListQuery {
    const USAGE: &'static str = "the query takes `after` (a space id) and `limit` (1 to 1000)";
}

async fn host_overview(State(s): State<HttpState>, _: Signed) -> Response {
    let state = s.clone();
    read(&s, move |host| super::console::host_view(&state, host)).await
}

async fn list_spaces(
    State(s): State<HttpState>,
    QueryOf(q): QueryOf<ListQuery>,
    _: Signed,
) -> Response {
    read(&s, move |host| {
        op::spaces(&view(host), q.after.as_deref(), q.limit.unwrap_or(100))
    })
    .await
}

fn bad(message: &str) -> Response {
    http_error(StatusCode::BAD_REQUEST, "badMessage", message)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    space: String,
    /// The owner's did:key; the signing operator when absent.
    owner: Option<String>,
}

async fn create_space(State(s): State<HttpState>, signed: Signed) -> Response {
    let parsed: CreateBody = match signed.json(r#"{"space", "owner"?}"#) {
        Ok(b) => b,
        Err(r) => return r,
    };
    if s.host.is_shutting_down() {
        return http_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the host is shutting down",
        );
    }
    let owner = parsed.owner.unwrap_or_else(|| signed.did.clone());
    acted(&s, &signed.did, "create", &parsed.space);
    let host = s.host.clone();
    let space = parsed.space.clone();
    let made = tokio::task::spawn_blocking(move || {
        op::create_space(host.store(), &space, &owner)?;
        op::space(&view(&host), &space)
    })
    .await;
    match made {
        Ok(Ok(v)) => (StatusCode::CREATED, Json(v)).into_response(),
        Ok(Err(e)) => op_error(e),
        Err(e) => http_error(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()),
    }
}

async fn one_space(
    State(s): State<HttpState>,
    Params(space): Params<String>,
    _: Signed,
) -> Response {
    read(&s, move |host| op::space(&view(host), &space)).await
}

async fn pieces(State(s): State<HttpState>, Params(space): Params<String>, _: Signed) -> Response {
    read(&s, move |host| {
        op::pieces(host.store(), &space).map(|p| json!({ "space": space, "pieces": p }))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunQuery {
    event: String,
}

impl Usage for RunQuery {
    const USAGE: &'static str =
        "the query takes `event` (a wake event id, as the fires list shows it)";
}

async fn run(
    State(s): State<HttpState>,
    Params(space): Params<String>,
    QueryOf(q): QueryOf<RunQuery>,
    _: Signed,
) -> Response {
    read(&s, move |host| op::run(host.store(), &space, &q.event)).await
}

#[derive(Deserialize)]
struct PiecePath {
    space: String,
    piece: String,
}

async fn delete_piece(
    State(s): State<HttpState>,
    Params(p): Params<PiecePath>,
    signed: Signed,
) -> Response {
    if let Some(e) = signed.held_elsewhere(&s, &p.space) {
        return signed.relay_or_refuse(&s, e).await;
    }
    acted(&s, &signed.did, "delete", &p.space);
    if let Err(e) = op::healthy(s.host.store(), &p.space) {
        return op_error(e);
    }
    match op::delete_piece(&s.host, &p.space, &p.piece).await {
        Ok(done) => Json(done).into_response(),
        Err(e) => signed.relay_or_refuse(&s, e).await,
    }
}

async fn dead_letters(
    State(s): State<HttpState>,
    Params(space): Params<String>,
    _: Signed,
) -> Response {
    read(&s, move |host| op::dead_letters(host.store(), &space)).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantBody {
    did: String,
    /// `read`, `write` or `none`.
    access: String,
}

async fn grant(
    State(s): State<HttpState>,
    Params(space): Params<String>,
    signed: Signed,
) -> Response {
    let parsed: GrantBody = match signed.json(r#"{"did", "access"}"#) {
        Ok(b) => b,
        Err(r) => return r,
    };
    acted(&s, &signed.did, "grant", &space);
    let host = s.host.clone();
    let done = tokio::task::spawn_blocking(move || {
        op::grant(host.store(), &space, &parsed.did, &parsed.access)
    })
    .await;
    // Open sessions learn of it within the grants re-check period.
    s.host.grants_version();
    match done {
        Ok(Ok(v)) => Json(v).into_response(),
        Ok(Err(e)) => op_error(e),
        Err(e) => http_error(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleQuery {
    /// Comma-separated space ids.
    space: Option<String>,
    all: Option<bool>,
}

impl Usage for ScheduleQuery {
    const USAGE: &'static str =
        "the query takes `space` (comma-separated ids) and `all` (true or false)";
}

async fn schedules(
    State(s): State<HttpState>,
    QueryOf(q): QueryOf<ScheduleQuery>,
    _: Signed,
) -> Response {
    let only: Vec<String> = q
        .space
        .map(|s| {
            s.split(',')
                .filter(|x| !x.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let all = q.all.unwrap_or(false);
    read(&s, move |host| op::schedules(&view(host), &only, all)).await
}

/// The path of an action on one entry.
#[derive(Deserialize)]
struct ActionPath {
    space: String,
    piece: String,
    entry: String,
    action: String,
}

async fn entry_action(
    State(s): State<HttpState>,
    Params(p): Params<ActionPath>,
    signed: Signed,
) -> Response {
    let entry = match entry_number(&p.entry) {
        Ok(e) => e,
        Err(r) => return r,
    };
    let Some(action) = EntryAction::parse(&p.action) else {
        return http_error(
            StatusCode::NOT_FOUND,
            "notFound",
            format!(
                "an entry takes trigger, pause or resume (not {:?})",
                p.action
            ),
        );
    };
    acted(&s, &signed.did, action.as_str(), &p.space);
    let now = s.host.store().clock().now_ms();
    let piece = p.piece;
    operate(&s, &signed, &p.space, move |sp| {
        to_json(action.apply(sp, &piece, entry, now)?)
    })
    .await
}

async fn fires(State(s): State<HttpState>, Params(p): Params<EntryPath>, _: Signed) -> Response {
    let entry = match entry_number(&p.entry) {
        Ok(e) => e,
        Err(r) => return r,
    };
    read(&s, move |host| {
        op::fires(host.store(), &p.space, &p.piece, entry)
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LedgerQuery {
    top: Option<usize>,
}

impl Usage for LedgerQuery {
    const USAGE: &'static str = "the query takes `top` (how many actions to list)";
}

async fn ledger(
    State(s): State<HttpState>,
    Params(space): Params<String>,
    QueryOf(q): QueryOf<LedgerQuery>,
    _: Signed,
) -> Response {
    read(&s, move |host| {
        op::ledger(&view(host), &space, q.top.unwrap_or(10))
    })
    .await
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BudgetBody {
    /// Milliseconds per window, `"none"` (unlimited) or `"default"`.
    budget_ms: Value,
}

async fn set_effects(
    State(s): State<HttpState>,
    Params(space): Params<String>,
    signed: Signed,
) -> Response {
    let body: Value = match signed.json("a JSON object") {
        Ok(b) => b,
        Err(r) => return r,
    };
    let setting = match op::EffectsSetting::from_json(&body) {
        Ok(e) => e,
        Err(e) => return op_error(e),
    };
    acted(&s, &signed.did, "effects", &space);
    let f = effects_setter(&s.host, &space, setting);
    operate(&s, &signed, &space, f).await
}

/// Stores a space's effect knobs and hands them to the broker at once (an
/// active space's next request obeys them).
pub(super) fn effects_setter(
    host: &Host,
    space: &str,
    setting: op::EffectsSetting,
) -> impl FnOnce(&mut crate::store::Space) -> op::OpResult<Value> + Send + 'static {
    let broker = host.config().runtime.effects.clone();
    let host_limits = broker.as_ref().map(|b| b.limits());
    let name = space.to_string();
    move |sp| {
        let v = op::set_effects(sp, setting, host_limits)?;
        if let Some(b) = &broker {
            b.set_space_limits(&name, &v.own);
        }
        to_json(v)
    }
}

async fn set_budget(
    State(s): State<HttpState>,
    Params(space): Params<String>,
    signed: Signed,
) -> Response {
    let parsed: BudgetBody = match signed.json(r#"{"budgetMs"}"#) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let setting = match BudgetSetting::from_json(&parsed.budget_ms) {
        Ok(b) => b,
        Err(e) => return op_error(e),
    };
    acted(&s, &signed.did, "budget", &space);
    let host_default = Some(Limit::of(s.host.config().schedule.scheduled_budget_us));
    operate(&s, &signed, &space, move |sp| {
        to_json(op::set_budget(sp, setting, host_default)?)
    })
    .await
}
