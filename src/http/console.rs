//! The console's routes (`spec/console.md`): `GET /` (to `/console`),
//! `GET /console`, `GET /console/spaces` and `GET /console/spaces/{space}`
//! read; `POST /console/sign-in` and `/sign-out`; and, signed in, `POST
//! /console/spaces/{space}/entries/{piece}/{entry}/{action}` (trigger,
//! pause, resume) and `POST /console/spaces/{space}/budget`.
//!
//! Reads run on a blocking thread (they open space files) through the same
//! functions as the operator API's JSON reads; actions go through the host
//! exactly as the operator API's do (`operator::operate_on`). An action
//! answers `303 See Other` back to the page, so plain HTML forms work
//! without JavaScript. The session cookie is `HttpOnly` and
//! `SameSite=Strict`, and a request whose `Origin` is another site is
//! refused, so another page cannot act with an operator's cookie.

use super::operator::{acted, effects_setter, operate_on, to_json, view, NotDone};
use super::HttpState;
use crate::console::auth::{session_in, ConsoleAuth, COOKIE, SESSION_MS};
use crate::console::guard::{
    HostRule, SignInLimiter, CONTENT_SECURITY_POLICY, DEFAULT_SIGN_INS_PER_MINUTE,
};
use crate::console::pages::{self, Frame};
use crate::console::rates::{Rates, Sample, SAMPLE_MS};
use crate::console::{self};
use crate::host::Host;
use crate::metrics::Counter;
use crate::operator::{self as op, BudgetSetting, EntryAction, Limit, OpError};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Form, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::Markup;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Mutex;

/// Fires listed per entry on a space's page.
const FIRES_PER_ENTRY: usize = 10;
/// Top actions by CPU on a space's page.
const TOP_ACTIONS: usize = 10;

/// The console's own state beside the host: who is signed in, the
/// throughput samples of the last hour, the `Host` headers it answers and
/// the sign-in attempts left per peer address.
pub struct ConsoleState {
    pub auth: ConsoleAuth,
    rates: Mutex<Rates>,
    hosts: HostRule,
    sign_ins: SignInLimiter,
    /// Whether reading a page needs a signed-in session too.
    read: ConsoleRead,
}

/// Who may read the console's pages (`serve --console-read`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ConsoleRead {
    /// Anyone who reaches the address (acting still needs the token).
    #[default]
    Open,
    /// Only a browser signed in with the operator token: for a host that
    /// listens beyond loopback.
    Token,
}

impl ConsoleState {
    /// Answering any `Host` (see [`ConsoleState::guarded`]), with the
    /// default sign-in limit.
    pub fn new(auth: ConsoleAuth) -> ConsoleState {
        ConsoleState {
            auth,
            rates: Mutex::default(),
            hosts: HostRule::any(),
            sign_ins: SignInLimiter::new(DEFAULT_SIGN_INS_PER_MINUTE),
            read: ConsoleRead::Open,
        }
    }

    /// Who may read its pages.
    pub fn reading(mut self, read: ConsoleRead) -> ConsoleState {
        self.read = read;
        self
    }

    /// Answering only `hosts`, and `sign_ins_per_minute` sign-in attempts
    /// per peer address (0: no limit).
    pub fn guarded(mut self, hosts: HostRule, sign_ins_per_minute: u32) -> ConsoleState {
        self.hosts = hosts;
        self.sign_ins = SignInLimiter::new(sign_ins_per_minute);
        self
    }

    /// Takes a throughput sample now (the sampler, and each host page).
    pub fn sample(&self, host: &Host) {
        let c = host.counters().host();
        let s = Sample {
            at_ms: host.store().clock().now_ms(),
            waves: c.get(Counter::Waves).max(0) as u64,
            events: c.get(Counter::EventsProcessed).max(0) as u64,
        };
        self.rates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(s);
    }
}

/// Samples throughput every [`SAMPLE_MS`] on the host clock, for the host
/// page's last hour. Runs until the process ends.
pub async fn sample_throughput(state: HttpState) {
    let clock = state.host.store().clock().clone();
    loop {
        state.console.sample(&state.host);
        let next = clock.now_ms() + SAMPLE_MS;
        // A manual clock never brings the deadline by itself: look again
        // each second of real time.
        let wait = clock
            .real_wait_until(next)
            .unwrap_or(std::time::Duration::from_secs(1));
        tokio::time::sleep(wait).await;
    }
}

pub fn routes(state: &HttpState) -> Router<HttpState> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/console") }))
        .route("/console", get(host_page))
        .route("/console/spaces", get(spaces_page))
        .route("/console/spaces/{space}", get(space_page))
        .route("/console/spaces/{space}/run", get(run_page))
        .route("/console/sign-in", post(sign_in))
        .route("/console/sign-out", post(sign_out))
        .route(
            "/console/spaces/{space}/entries/{piece}/{entry}/{action}",
            post(entry_action),
        )
        .route(
            "/console/spaces/{space}/pieces/{piece}/delete",
            post(delete_piece),
        )
        .route("/console/spaces/{space}/budget", post(set_budget))
        .route("/console/spaces/{space}/effects", post(set_effects))
        .route(pages::STYLE_PATH, get(style_sheet))
        .route(pages::SCRIPT_PATH, get(refresh_script))
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
}

/// In front of every console route: a `Host` that does not name this
/// console is refused (421) before anything else, so a page of another
/// name that resolves here (DNS rebinding) can neither read nor act; and
/// every answer says it may not be framed, sniffed or given inline code.
async fn guard(
    State(s): State<HttpState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    let mut response = if !host.is_some_and(|h| s.console.hosts.allows(h)) {
        wrong_host(&s, &req, host)
    } else if s.console.read == ConsoleRead::Token
        && !readable_unsigned(&req)
        && !signed_in(&s, req.headers())
    {
        // Only the sign-in form (and what styles it) without the token.
        s.host.counters().add_host(Counter::ConsoleReadsRefused, 1);
        let f = frame(&s, req.headers(), req.uri().path().to_string());
        let page = pages::problem(
            &f,
            "Sign in to read",
            "This console shows its pages only to a browser signed in with the operator token (serve --console-read token). The token is printed when serve starts and kept in DATA/console.token.",
        );
        (StatusCode::UNAUTHORIZED, Html(page.into_string())).into_response()
    } else {
        next.run(req).await
    };
    let h = response.headers_mut();
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// A request for another host's name: refused (421), counted.
fn wrong_host(s: &HttpState, req: &axum::extract::Request, host: Option<&str>) -> Response {
    s.host.counters().add_host(Counter::ConsoleWrongHost, 1);
    tracing::warn!(
        host = host.unwrap_or(""),
        "console request for another host refused"
    );
    let f = frame(s, req.headers(), "/console".into());
    let page = pages::problem(
        &f,
        "Wrong host",
        "This console answers only to its listen address and its configured public origins (serve --public-origin).",
    );
    (StatusCode::MISDIRECTED_REQUEST, Html(page.into_string())).into_response()
}

/// What a browser that has not signed in may still fetch when reading
/// needs the token: the sign-in itself and what the page is made of.
fn readable_unsigned(req: &axum::extract::Request) -> bool {
    let path = req.uri().path();
    path == "/console/sign-in" || path == pages::STYLE_PATH || path == pages::SCRIPT_PATH
}

fn signed_in(s: &HttpState, headers: &HeaderMap) -> bool {
    let now_ms = s.host.store().clock().now_ms();
    session(headers).is_some_and(|id| s.console.auth.signed_in(id, now_ms))
}

async fn style_sheet() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        pages::style_sheet(),
    )
        .into_response()
}

async fn refresh_script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        pages::refresh_script(),
    )
        .into_response()
}

fn session(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(session_in)
}

fn frame(s: &HttpState, headers: &HeaderMap, path: String) -> Frame {
    let now_ms = s.host.store().clock().now_ms();
    Frame {
        now_ms,
        signed_in: session(headers).is_some_and(|id| s.console.auth.signed_in(id, now_ms)),
        path,
    }
}

/// Renders on a blocking thread and counts the page.
async fn page(
    s: &HttpState,
    frame: Frame,
    f: impl FnOnce(&Host, &Frame) -> Result<Markup, (StatusCode, Markup)> + Send + 'static,
) -> Response {
    let host = s.host.clone();
    let rendered = tokio::task::spawn_blocking(move || f(&host, &frame)).await;
    s.host.counters().add_host(Counter::ConsolePages, 1);
    match rendered {
        Ok(Ok(m)) => Html(m.into_string()).into_response(),
        Ok(Err((status, m))) => (status, Html(m.into_string())).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn host_budget(host: &Host) -> Limit {
    Limit::of(host.config().schedule.scheduled_budget_us)
}

/// The host page's data, as its JSON twin (`GET /api/operator/host`) has it.
pub(super) fn host_view(s: &HttpState, host: &Host) -> op::OpResult<op::HostView> {
    let throughput = s
        .console
        .rates
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .rates();
    // Host-wide blocks only: the per-space ones are for `/api/health/stats`.
    let counters = match host.counters().host().to_json() {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    op::host_view(&view(host), counters, throughput)
}

async fn host_page(State(s): State<HttpState>, headers: HeaderMap) -> Response {
    s.console.sample(&s.host);
    let f = frame(&s, &headers, "/console".into());
    let state = s.clone();
    page(&s, f, move |host, f| {
        let v = host_view(&state, host).map_err(|e| failed(f, &e.to_string()))?;
        Ok(pages::host(f, &v))
    })
    .await
}

async fn spaces_page(
    State(s): State<HttpState>,
    headers: HeaderMap,
    query: Result<Query<console::SpacesQuery>, QueryRejection>,
) -> Response {
    // A malformed query shows the default table rather than an error page.
    let query = query.map(|Query(q)| q).unwrap_or_default();
    let f = frame(&s, &headers, query.url(|_| {}));
    page(&s, f, move |host, f| {
        let v = view(host);
        let all = host
            .store()
            .directory()
            .all()
            .map_err(|e| failed(f, &e.to_string()))?;
        let registered = all.len() as u64;
        let active: HashSet<String> = v.active.clone();
        let selection = console::select(all, &active, &query);
        // Spend is read from each shown space's file: a page's worth.
        let window = crate::accounting::window_start_ms(v.now_ms, v.window_ms);
        let spend: Vec<_> = selection
            .rows
            .iter()
            .map(|e| match e.quarantined {
                Some(_) => None,
                None => host.store().window_spend(&e.id, window).ok(),
            })
            .collect();
        // What applies to each: the host's default, unless the directory
        // says (or cannot say) that the space has a policy of its own.
        let default = host_budget(host);
        let budgets: Vec<Option<Limit>> = selection
            .rows
            .iter()
            .map(|e| match (&e.quarantined, e.budget_policy) {
                (Some(_), _) => None,
                (None, Some(false)) => Some(default),
                (None, _) => op::open(host.store(), &e.id)
                    .and_then(|mut sp| Ok(crate::accounting::budget_override(&mut sp)?))
                    .ok()
                    .map(|o| match o {
                        crate::accounting::BudgetOverride::HostDefault => default,
                        crate::accounting::BudgetOverride::Unlimited => Limit::Unlimited,
                        crate::accounting::BudgetOverride::CpuUs(us) => Limit::CpuUs(us),
                    }),
            })
            .collect();
        Ok(pages::spaces(
            f,
            &pages::SpacesView {
                query: &query,
                selection: &selection,
                active: &active,
                spend: &spend,
                budgets: &budgets,
                registered,
            },
        ))
    })
    .await
}

async fn space_page(
    State(s): State<HttpState>,
    headers: HeaderMap,
    Path(space): Path<String>,
    query: Result<Query<console::FiresFilter>, QueryRejection>,
) -> Response {
    let filter = query.map(|Query(q)| q).unwrap_or_default();
    let f = frame(&s, &headers, format!("/console/spaces/{space}"));
    page(&s, f, move |host, f| {
        filter.check().map_err(|why| {
            (
                StatusCode::BAD_REQUEST,
                pages::problem(f, "Fires not filtered", &why),
            )
        })?;
        let v = view(host);
        let refused = |e: OpError| {
            let status = match e {
                OpError::UnknownSpace(_) => StatusCode::NOT_FOUND,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            (status, pages::problem(f, "Space not shown", &e.to_string()))
        };
        let sv = op::space(&v, &space).map_err(refused)?;
        let pieces = op::pieces(host.store(), &space).map_err(refused)?;
        let listed = op::schedules(&v, std::slice::from_ref(&space), true).map_err(refused)?;
        let (entries, invalid) = (listed.entries, listed.invalid);
        let fires = entries
            .iter()
            .filter_map(|e| {
                op::fires(host.store(), &space, &e.row.piece, e.row.entry)
                    .ok()
                    .map(|mut f| {
                        f.fires.retain(|r| filter.keeps(r, v.now_ms));
                        let keep = f.fires.len().saturating_sub(FIRES_PER_ENTRY);
                        f.fires.drain(..keep);
                        f
                    })
            })
            .collect();
        let ledger = op::ledger(&v, &space, TOP_ACTIONS).map_err(refused)?;
        let dead_letters = op::dead_letters(host.store(), &space)
            .map(|d| d.dead_letters.len())
            .unwrap_or(0);
        Ok(pages::space(
            f,
            &pages::SpaceDetail {
                space: sv,
                pieces,
                entries,
                invalid,
                fires,
                ledger,
                dead_letters,
                filter,
            },
        ))
    })
    .await
}

#[derive(Deserialize)]
struct RunQuery {
    event: String,
}

/// `GET /console/spaces/{space}/run?event=ID`: one fire and its run.
async fn run_page(
    State(s): State<HttpState>,
    headers: HeaderMap,
    Path(space): Path<String>,
    query: Result<Query<RunQuery>, QueryRejection>,
) -> Response {
    let f = frame(&s, &headers, format!("/console/spaces/{space}"));
    page(&s, f, move |host, f| {
        let Ok(Query(q)) = query else {
            return Err((
                StatusCode::BAD_REQUEST,
                pages::problem(f, "No run named", "the run view takes ?event=EVENT_ID"),
            ));
        };
        let run = op::run(host.store(), &space, &q.event).map_err(|e| {
            let status = match e {
                OpError::UnknownSpace(_) | OpError::UnknownRun { .. } => StatusCode::NOT_FOUND,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            (status, pages::problem(f, "Run not shown", &e.to_string()))
        })?;
        Ok(pages::run(f, &run))
    })
    .await
}

fn failed(f: &Frame, message: &str) -> (StatusCode, Markup) {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        pages::problem(f, "Not available", message),
    )
}

/// Where to go back to: a console page, never elsewhere, and nothing a
/// `Location` header cannot carry (only the characters our own links use).
fn back(next: Option<&str>) -> String {
    let ours = |n: &str| {
        n.starts_with("/console")
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/?&=%._-~".contains(&b))
    };
    match next {
        Some(n) if ours(n) => n.to_string(),
        _ => "/console".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::back;

    #[test]
    fn going_back_stays_on_the_console() {
        assert_eq!(
            back(Some("/console/spaces?q=a%20b&page=2")),
            "/console/spaces?q=a%20b&page=2"
        );
        for bad in [
            "https://evil.example/",
            "//evil.example",
            "/console\r\nSet-Cookie: x",
            "/elsewhere",
        ] {
            assert_eq!(back(Some(bad)), "/console", "{bad:?}");
        }
        assert_eq!(back(None), "/console");
    }
}

/// A refusal page, counted and logged.
fn refuse(s: &HttpState, headers: &HeaderMap, status: StatusCode, why: &str) -> Response {
    s.host
        .counters()
        .add_host(Counter::ConsoleActionsRefused, 1);
    tracing::warn!(reason = why, "console action refused");
    let f = frame(s, headers, "/console".into());
    (
        status,
        Html(pages::problem(&f, "Not done", why).into_string()),
    )
        .into_response()
}

/// Another site's page posting with the operator's cookie is refused:
/// when the browser says where a request comes from, it must be here.
fn cross_site(headers: &HeaderMap) -> bool {
    let (Some(origin), Some(host)) = (headers.get(header::ORIGIN), headers.get(header::HOST))
    else {
        return false;
    };
    let origin = origin.to_str().unwrap_or("");
    let host = host.to_str().unwrap_or("");
    let bare = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or(origin);
    bare != host
}

#[derive(Deserialize)]
struct SignInForm {
    token: String,
    next: Option<String>,
}

async fn sign_in(
    State(s): State<HttpState>,
    headers: HeaderMap,
    peer: Option<axum::Extension<super::conn::Peer>>,
    Form(form): Form<SignInForm>,
) -> Response {
    if cross_site(&headers) {
        return refuse(
            &s,
            &headers,
            StatusCode::FORBIDDEN,
            "a sign-in from another site",
        );
    }
    let now_ms = s.host.store().clock().now_ms();
    // Every attempt counts, right or wrong: the token is not to be guessed.
    let ip = peer.map(|axum::Extension(p)| p.0.ip());
    if let Err(wait_ms) = s.console.sign_ins.attempt(ip, now_ms) {
        s.host
            .counters()
            .add_host(Counter::ConsoleSignInsRateLimited, 1);
        tracing::warn!("console sign-in refused: too many attempts from one address");
        let f = frame(&s, &headers, back(form.next.as_deref()));
        let retry_s = wait_ms.div_ceil(1_000);
        let page = pages::problem(
            &f,
            "Not signed in",
            &format!("Too many sign-in attempts from this address: try again in {retry_s} s."),
        );
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, retry_s.to_string())],
            Html(page.into_string()),
        )
            .into_response();
    }
    let Some(id) = s.console.auth.sign_in(&form.token, now_ms) else {
        s.host
            .counters()
            .add_host(Counter::ConsoleSignInsRefused, 1);
        tracing::warn!("console sign-in refused: wrong token");
        let f = frame(&s, &headers, back(form.next.as_deref()));
        let page = pages::problem(
            &f,
            "Not signed in",
            "That is not this host's operator token: it is printed by serve at start and kept in DATA/console.token.",
        );
        return (StatusCode::UNAUTHORIZED, Html(page.into_string())).into_response();
    };
    s.host.counters().add_host(Counter::ConsoleSignIns, 1);
    tracing::info!("console sign-in");
    back_with_cookie(&id, SESSION_MS / 1_000, form.next.as_deref())
}

/// Sets (or, with age 0, clears) the session cookie and goes back.
fn back_with_cookie(value: &str, max_age_s: u64, next: Option<&str>) -> Response {
    let cookie =
        format!("{COOKIE}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={max_age_s}");
    ([(header::SET_COOKIE, cookie)], Redirect::to(&back(next))).into_response()
}

#[derive(Deserialize)]
struct SignOutForm {
    next: Option<String>,
}

async fn sign_out(
    State(s): State<HttpState>,
    headers: HeaderMap,
    Form(form): Form<SignOutForm>,
) -> Response {
    if let Some(id) = session(&headers) {
        s.console.auth.sign_out(id);
    }
    back_with_cookie("", 0, form.next.as_deref())
}

/// Why an action cannot be taken now, as a refusal, or `None` to go on.
fn gate(s: &HttpState, headers: &HeaderMap) -> Option<Response> {
    if cross_site(headers) {
        return Some(refuse(
            s,
            headers,
            StatusCode::FORBIDDEN,
            "an action from another site",
        ));
    }
    let now_ms = s.host.store().clock().now_ms();
    if !session(headers).is_some_and(|id| s.console.auth.signed_in(id, now_ms)) {
        return Some(refuse(
            s,
            headers,
            StatusCode::UNAUTHORIZED,
            "sign in to act: the console is read-only without the operator token",
        ));
    }
    None
}

fn not_done(s: &HttpState, headers: &HeaderMap, e: NotDone) -> Response {
    let (status, why) = match e {
        NotDone::Op(e @ (OpError::UnknownSpace(_) | OpError::UnknownEntry { .. })) => {
            (StatusCode::NOT_FOUND, e.to_string())
        }
        NotDone::Op(e) => (StatusCode::BAD_REQUEST, e.to_string()),
        NotDone::Host(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    refuse(s, headers, status, &why)
}

/// On a fleet, a console action on a space another host holds live is
/// done there, as the operator API's own action relays: sent to the
/// holder's operator API, this host vouching for the console's operator
/// (its own key, which the console's token stands for). `None`: act here.
/// The holder's answer becomes the console's (back to the space's page, or
/// the refusal's message).
async fn relayed_action(
    s: &HttpState,
    headers: &HeaderMap,
    space: &str,
    method: axum::http::Method,
    path: String,
    body: Option<Value>,
) -> Option<Response> {
    let relay = s.relay.as_ref()?;
    if s.host.is_active(space) {
        return None;
    }
    let held = relay.holder_elsewhere(space)?;
    let did = relay.did();
    let forward = super::Forward {
        method: &method,
        path_and_query: &path,
        headers: &[("content-type", "application/json")],
        extra: &did,
        body: body.map_or_else(axum::body::Bytes::new, |b| b.to_string().into()),
        relayed: false,
    };
    let answer = super::relay_or_refuse(s, held, forward).await;
    let status = answer.status();
    if status.is_success() {
        return Some(Redirect::to(&format!("/console/spaces/{space}")).into_response());
    }
    let bytes = axum::body::to_bytes(answer.into_body(), 64 * 1024)
        .await
        .unwrap_or_default();
    let message = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| format!("the host holding {space} answered {status}"));
    Some(refuse(s, headers, status, &message))
}

#[derive(Deserialize)]
struct EntryActionPath {
    space: String,
    piece: String,
    entry: u32,
    action: String,
}

async fn entry_action(
    State(s): State<HttpState>,
    headers: HeaderMap,
    Path(p): Path<EntryActionPath>,
) -> Response {
    if let Some(refused) = gate(&s, &headers) {
        return refused;
    }
    let Some(action) = EntryAction::parse(&p.action) else {
        return refuse(
            &s,
            &headers,
            StatusCode::NOT_FOUND,
            &format!(
                "an entry takes trigger, pause or resume (not {:?})",
                p.action
            ),
        );
    };
    acted(&s, "console", action.as_str(), &p.space);
    s.host.counters().add_host(Counter::ConsoleActions, 1);
    let path = format!(
        "/api/operator/spaces/{}/schedules/{}/{}/{}",
        p.space,
        p.piece,
        p.entry,
        action.as_str()
    );
    if let Some(r) =
        relayed_action(&s, &headers, &p.space, axum::http::Method::POST, path, None).await
    {
        return r;
    }
    let now = s.host.store().clock().now_ms();
    let (piece, entry) = (p.piece.clone(), p.entry);
    match operate_on(&s, &p.space, move |sp| {
        to_json(action.apply(sp, &piece, entry, now)?)
    })
    .await
    {
        Ok(_) => Redirect::to(&format!("/console/spaces/{}", p.space)).into_response(),
        Err(e) => not_done(&s, &headers, e),
    }
}

#[derive(Deserialize)]
struct PiecePath {
    space: String,
    piece: String,
}

#[derive(Deserialize)]
struct DeleteForm {
    /// The box that says the operator means it.
    confirm: Option<String>,
}

async fn delete_piece(
    State(s): State<HttpState>,
    headers: HeaderMap,
    Path(p): Path<PiecePath>,
    Form(form): Form<DeleteForm>,
) -> Response {
    if let Some(refused) = gate(&s, &headers) {
        return refused;
    }
    if form.confirm.as_deref() != Some("yes") {
        return refuse(
            &s,
            &headers,
            StatusCode::BAD_REQUEST,
            "tick the box beside the button: deleting a piece cannot be undone",
        );
    }
    acted(&s, "console", "delete", &p.space);
    s.host.counters().add_host(Counter::ConsoleActions, 1);
    let path = format!("/api/operator/spaces/{}/pieces/{}", p.space, p.piece);
    if let Some(r) = relayed_action(
        &s,
        &headers,
        &p.space,
        axum::http::Method::DELETE,
        path,
        None,
    )
    .await
    {
        return r;
    }
    if let Err(e) = crate::operator::healthy(s.host.store(), &p.space) {
        return not_done(&s, &headers, NotDone::Op(e));
    }
    match crate::operator::delete_piece(&s.host, &p.space, &p.piece).await {
        Ok(_) => Redirect::to(&format!("/console/spaces/{}", p.space)).into_response(),
        Err(crate::host::HostError::UnknownPiece(piece)) => refuse(
            &s,
            &headers,
            StatusCode::NOT_FOUND,
            &format!("space {} has no piece {piece}", p.space),
        ),
        Err(e) => not_done(&s, &headers, NotDone::Host(e)),
    }
}

#[derive(Deserialize)]
struct BudgetForm {
    /// Milliseconds of CPU per window, `none` or `default`.
    budget: String,
}

async fn set_budget(
    State(s): State<HttpState>,
    headers: HeaderMap,
    Path(space): Path<String>,
    Form(form): Form<BudgetForm>,
) -> Response {
    if let Some(refused) = gate(&s, &headers) {
        return refused;
    }
    let setting = match BudgetSetting::parse(form.budget.trim()) {
        Ok(b) => b,
        Err(e) => return not_done(&s, &headers, NotDone::Op(e)),
    };
    acted(&s, "console", "budget", &space);
    s.host.counters().add_host(Counter::ConsoleActions, 1);
    let path = format!("/api/operator/spaces/{space}/ledger/budget");
    let body = serde_json::json!({ "budgetMs": setting.to_json() });
    if let Some(r) = relayed_action(
        &s,
        &headers,
        &space,
        axum::http::Method::PUT,
        path,
        Some(body),
    )
    .await
    {
        return r;
    }
    let host_default = Some(host_budget(&s.host));
    match operate_on(&s, &space, move |sp| {
        to_json(op::set_budget(sp, setting, host_default)?)
    })
    .await
    {
        Ok(_) => Redirect::to(&format!("/console/spaces/{space}")).into_response(),
        Err(e) => not_done(&s, &headers, e),
    }
}

#[derive(Deserialize)]
struct EffectsForm {
    /// Each a number, `default`, or blank (kept).
    in_flight: String,
    per_second: String,
    bytes_per_second: String,
}

async fn set_effects(
    State(s): State<HttpState>,
    headers: HeaderMap,
    Path(space): Path<String>,
    Form(form): Form<EffectsForm>,
) -> Response {
    if let Some(refused) = gate(&s, &headers) {
        return refused;
    }
    let setting = (|| {
        let setting = op::EffectsSetting {
            in_flight: op::Knob::parse(&form.in_flight, "in flight")?,
            per_second: op::Knob::parse(&form.per_second, "requests per second")?,
            bytes_per_second: op::Knob::parse(&form.bytes_per_second, "bytes per second")?,
        };
        setting.check()?;
        Ok::<_, OpError>(setting)
    })();
    let setting = match setting {
        Ok(v) => v,
        Err(e) => return not_done(&s, &headers, NotDone::Op(e)),
    };
    acted(&s, "console", "effects", &space);
    s.host.counters().add_host(Counter::ConsoleActions, 1);
    let path = format!("/api/operator/spaces/{space}/effects");
    if let Some(r) = relayed_action(
        &s,
        &headers,
        &space,
        axum::http::Method::PUT,
        path,
        Some(setting.to_json()),
    )
    .await
    {
        return r;
    }
    let f = effects_setter(&s.host, &space, setting);
    match operate_on(&s, &space, f).await {
        Ok(_) => Redirect::to(&format!("/console/spaces/{space}")).into_response(),
        Err(e) => not_done(&s, &headers, e),
    }
}
