//! One WebSocket session: the bridge between the wire protocol and the host.
//!
//! Runs on the network threads and never runs pattern code: every request
//! becomes a [`Request`] to the space's server (on its own thread) and the
//! reply is awaited. Every malformed or refused frame is answered with an
//! error frame and counted; only a failed `open` closes the connection.

use crate::host::{Host, HostError, Request, SessionId, Trigger, GRANTS_RECHECK};
use crate::metrics::Counter;
use crate::protocol::messages::{Ack, Deployed, Opened, Pong, Update as WireUpdate, ValueReply};
use crate::protocol::{
    check_access, check_phase, new_nonce, parse_client_frame, verify_open, Access, ClientMessage,
    ErrorCode, Frame, PathSegment, ProtocolError, ServerMessage,
};
use crate::store::{Author, PathSeg};
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

/// Policy-violation close code (RFC 6455) after a refused open.
const CLOSE_POLICY: u16 = 1008;

/// "Going away" (RFC 6455): the server ends a connection that went silent.
const CLOSE_AWAY: u16 = 1001;

/// "Internal error" (RFC 6455): the session's space server stopped.
const CLOSE_INTERNAL: u16 = 1011;

/// "Message too big" (RFC 6455): a frame announced past the transport limit.
const CLOSE_TOO_BIG: u16 = 1009;

/// Whether the WebSocket library refused a frame for its size (announced
/// past [`crate::protocol::TRANSPORT_MAX_MESSAGE_BYTES`]).
fn is_too_big(e: &axum::Error) -> bool {
    use std::error::Error;
    e.source()
        .and_then(|s| s.downcast_ref::<tokio_tungstenite::tungstenite::Error>())
        .is_some_and(|t| matches!(t, tokio_tungstenite::tungstenite::Error::Capacity(_)))
}

struct OpenSession {
    id: SessionId,
    space: String,
    did: String,
    access: Access,
    resume: Option<u64>,
    /// The grants version under which `access` was last read.
    access_version: u64,
}

/// How a connection reached this host.
pub enum Mode {
    /// From a client. On a fleet (`relay`), a space another host holds is
    /// served by relaying the session there.
    Direct {
        relay: Option<std::sync::Arc<crate::relay::Relay>>,
    },
    /// From another host relaying a client (`relay::Relay::check` passed):
    /// the client signed that host's challenge `nonce`, so none is sent
    /// here, and nothing is relayed on.
    Relayed { nonce: String },
}

/// Serves one connection. `open_within`: the deadline for it to open its
/// session (`None`: no deadline), counted from the upgrade; `peer`: its
/// address when the listener knows it (space creation is rated per address).
pub async fn run(
    socket: WebSocket,
    host: Host,
    open_within: Option<std::time::Duration>,
    peer: Option<std::net::IpAddr>,
    mode: Mode,
) {
    let upgraded = crate::clock::Stopwatch::start();
    let counters = host.counters().clone();
    let (mut tx, mut rx) = socket.split();
    let timeout = host.session_timeout();
    let (nonce, relay) = match mode {
        Mode::Relayed { nonce } => {
            counters.add_host(Counter::RelayServed, 1);
            (nonce, None)
        }
        Mode::Direct { relay } => {
            let nonce = new_nonce();
            let challenge =
                ServerMessage::Challenge(crate::protocol::messages::Challenge::new(nonce.clone()));
            let text = Message::Text(challenge.to_text().into());
            if send_frame(&mut tx, text, timeout).await != Sent::Ok {
                return;
            }
            (nonce, relay)
        }
    };
    let (utx, mut urx) = tokio::sync::mpsc::unbounded_channel::<crate::host::Update>();
    // Handed to the space server at open, so the channel closes when the
    // server lets go of it: the session's end of the space.
    let mut utx = Some(utx);
    let mut server_gone = false;
    let mut open: Option<OpenSession> = None;
    // Silence detection: a client whose network vanished never closes, and
    // its session would hold the space active (and its lease) for good.
    // Any frame counts as a sign of life; after half the timeout of
    // silence the server pings (browsers and WebSocket libraries answer
    // on their own), and after the whole of it gives up.
    let mut heard = crate::clock::Stopwatch::start();
    let mut pinged = false;
    let mut grants = host.grant_changes();
    let mut shutdown = host.shutdown_signal();
    loop {
        let silence_left = timeout.map(|t| heard.left_of(if pinged { t } else { t / 2 }));
        let open_left = open_within.map(|t| upgraded.left_of(t));
        tokio::select! {
            // Answering pings keeps a connection alive, not unopened: a
            // connection is held only for a session.
            _ = sleep_or_never(open_left), if open.is_none() => {
                counters.add_host(Counter::ConnectionsNoSessionOpened, 1);
                let why = "no session opened within the open deadline";
                end_connection(&mut tx, None, CLOSE_POLICY, why, timeout).await;
                break;
            }
            _ = sleep_or_never(silence_left) => {
                if !pinged {
                    pinged = true;
                    let ping = Message::Ping(Default::default());
                    if send_or_end(&mut tx, ping, timeout, &counters, open.as_ref()).await {
                        continue;
                    }
                    break;
                }
                count_timeout(&counters, open.as_ref());
                let why = "nothing received within the session timeout";
                end_connection(&mut tx, None, CLOSE_AWAY, why, timeout).await;
                break;
            }
            incoming = rx.next() => {
                let msg = match incoming {
                    Some(Ok(msg)) => msg,
                    Some(Err(e)) if is_too_big(&e) => {
                        // Announced past the transport limit: the frame is
                        // not read, and the connection ends as RFC 6455 says.
                        match &open {
                            Some(s) => counters.space(&s.space).inc(Counter::FramesRejected),
                            None => counters.add_host(Counter::FramesRejected, 1),
                        }
                        let why = "message too big: the limit is 16 MiB (1 MiB for a protocol message)";
                        end_connection(&mut tx, None, CLOSE_TOO_BIG, why, timeout).await;
                        break;
                    }
                    _ => break,
                };
                heard = crate::clock::Stopwatch::start();
                pinged = false;
                let frame = match &msg {
                    Message::Text(t) => Frame::Text(t.as_str()),
                    Message::Binary(b) => Frame::Binary(b),
                    Message::Ping(_) | Message::Pong(_) => continue,
                    Message::Close(_) => {
                        // The close handshake: the reply the transport
                        // queued (echoing the client's code) goes out, so the
                        // client sees its 1000, not 1006.
                        let bound = timeout.unwrap_or(std::time::Duration::from_secs(5));
                        let _ = tokio::time::timeout(bound, tx.close()).await;
                        break;
                    }
                };
                let parsed = parse_client_frame(frame)
                    .and_then(|m| check_phase(open.is_some(), &m).map(|()| m));
                let reply = match parsed {
                    Err(e) => Err(e),
                    Ok(ClientMessage::Open(o)) => {
                        let sink = utx.take().ok_or_else(|| {
                            ProtocolError::new(ErrorCode::AlreadyOpen, "this connection already opened a session")
                        });
                        match async { open_session(&host, &nonce, o, sink?, peer).await }.await {
                            Ok((session, opened)) => {
                                open = Some(session);
                                counters.add_host(Counter::SessionsOpen, 1);
                                counters.add_host(Counter::SessionsOpened, 1);
                                Ok(opened)
                            }
                            Err(e) => {
                                // Held by another host of the fleet: served
                                // there, through this connection.
                                if let (Some(relay), Some(holder)) = (&relay, crate::relay::holder_of(&e)) {
                                    match relay_open(relay, &holder, &nonce, &msg, &mut tx, timeout).await {
                                        RelayOpen::Opened(up) => {
                                            crate::relay::pipe::pipe(tx, rx, *up, &host).await;
                                            return;
                                        }
                                        RelayOpen::Refused => break,
                                        RelayOpen::Unreachable => {}
                                    }
                                }
                                counters.add_host(Counter::SessionsRejected, 1);
                                let why = "session not opened";
                                end_connection(&mut tx, Some(e), CLOSE_POLICY, why, timeout).await;
                                break;
                            }
                        }
                    }
                    Ok(m) => {
                        let s = open.as_mut().expect("check_phase guarantees an open session");
                        if !keep_access(&host, s, &mut tx, timeout).await {
                            break;
                        }
                        match check_access(s.access, &m) {
                            Err(e) => Err(e),
                            Ok(()) => handle(&host, s, m).await,
                        }
                    }
                };
                let out = match reply {
                    Ok(m) => m,
                    Err(e) => {
                        match &open {
                            Some(s) => counters.space(&s.space).inc(Counter::FramesRejected),
                            None => counters.add_host(Counter::FramesRejected, 1),
                        }
                        e.to_server_message()
                    }
                };
                let out = Message::Text(out.to_text().into());
                if !send_or_end(&mut tx, out, timeout, &counters, open.as_ref()).await {
                    break;
                }
            }
            true = async { shutdown.wait_for(|down| *down).await.is_ok() } => {
                // The server is going away: say so, so the client knows to
                // reconnect (to the next process) rather than retry here.
                server_gone = true;
                end_for_shutdown(&mut tx, &counters, timeout).await;
                break;
            }
            Ok(()) = grants.changed(), if open.is_some() => {
                // A grant changed somewhere: a revoked session that only
                // listens (or is silent) ends now, not at its next frame.
                let s = open.as_mut().expect("guarded by open.is_some()");
                if !keep_access(&host, s, &mut tx, timeout).await {
                    break;
                }
            }
            update = urx.recv() => {
                let Some(u) = update else {
                    // The space server let go of this session: its tenure
                    // ended with an error (a lost lease, a failed commit)
                    // or the host is stopping. Tell the client, which can
                    // reconnect and resume from the last seq it saw.
                    server_gone = true;
                    if host.is_shutting_down() {
                        end_for_shutdown(&mut tx, &counters, timeout).await;
                        break;
                    }
                    if let Some(s) = &open {
                        counters.space(&s.space).inc(Counter::SessionsEndedByServer);
                    }
                    let e = ProtocolError::new(
                        ErrorCode::Internal,
                        "the space's server stopped; reconnect to resume from the last seq you saw",
                    );
                    let why = "the space's server stopped";
                    end_connection(&mut tx, Some(e), CLOSE_INTERNAL, why, timeout).await;
                    break;
                };
                if let Some(s) = open.as_mut() {
                    // A revoked reader gets no further update.
                    if !keep_access(&host, s, &mut tx, timeout).await {
                        break;
                    }
                }
                let wire = ServerMessage::Update(WireUpdate {
                    seq: u.seq,
                    piece: u.piece,
                    path: u.path.into_iter().map(to_wire_seg).collect(),
                    value: u.value,
                });
                let wire = Message::Text(wire.to_text().into());
                if !send_or_end(&mut tx, wire, timeout, &counters, open.as_ref()).await {
                    break;
                }
            }
        }
    }
    if let Some(s) = open {
        counters.add_host(Counter::SessionsOpen, -1);
        if server_gone {
            // Nothing to detach from; a notify would activate the space.
            return;
        }
        let _ = host.notify(
            &s.space,
            Trigger::Session,
            Request::Detach { session: s.id },
        );
    }
}

/// What became of an open relayed to the space's holder.
enum RelayOpen {
    /// The holder opened it (its `opened` passed on): pipe from now on.
    Opened(Box<crate::relay::Upstream>),
    /// The holder refused it; its refusal and close were passed on.
    Refused,
    /// The holder could not be reached: answer `heldElsewhere` here.
    Unreachable,
}

/// Relays a client's `open` to the space's holder and passes its answer
/// on to the client.
async fn relay_open(
    relay: &crate::relay::Relay,
    holder: &str,
    nonce: &str,
    open: &Message,
    tx: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    timeout: Option<std::time::Duration>,
) -> RelayOpen {
    use tokio_tungstenite::tungstenite::Message as Up;
    let counters = relay.counters();
    let open = match open {
        Message::Text(t) => Up::Text(t.as_str().into()),
        Message::Binary(b) => Up::Binary(b.clone()),
        _ => return RelayOpen::Unreachable,
    };
    let (up, answer) = match relay.open_session(holder, nonce, open).await {
        Ok(v) => v,
        Err(why) => {
            counters.add_host(Counter::RelayUnreachable, 1);
            tracing::info!(%why, "answering heldElsewhere: the holder cannot be reached");
            return RelayOpen::Unreachable;
        }
    };
    let text = match answer {
        Up::Text(t) => t.as_str().to_string(),
        Up::Binary(b) => String::from_utf8_lossy(&b).into_owned(),
        _ => return RelayOpen::Unreachable,
    };
    let opened =
        serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|v| v["type"] == "opened");
    let sent = send_frame(tx, Message::Text(text.into()), timeout).await;
    if !opened {
        counters.add_host(Counter::SessionsRejected, 1);
        let why = "session not opened";
        end_connection(tx, None, CLOSE_POLICY, why, timeout).await;
        return RelayOpen::Refused;
    }
    if sent != Sent::Ok {
        return RelayOpen::Refused;
    }
    counters.add_host(Counter::RelaySessions, 1);
    RelayOpen::Opened(Box::new(up))
}

/// Re-reads the grants version every [`GRANTS_RECHECK`] while sessions
/// are open, so a grant change reaches sessions that send nothing (through
/// [`Host::grant_changes`]). Runs for as long as the async runtime does.
pub async fn watch_grants(host: Host) {
    let mut tick = tokio::time::interval(GRANTS_RECHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if host.counters().host().get(Counter::SessionsOpen) > 0 {
            host.grants_version();
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    Ok,
    Failed,
    /// The client took nothing for the session timeout: a client that
    /// stops reading fills the socket's buffers, and without a limit the
    /// send (and with it this session's task) would wait for ever.
    Stalled,
}

pub(crate) async fn send_frame(
    tx: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    msg: Message,
    limit: Option<std::time::Duration>,
) -> Sent {
    let sent = match limit {
        Some(t) => match tokio::time::timeout(t, tx.send(msg)).await {
            Ok(r) => r,
            Err(_) => return Sent::Stalled,
        },
        None => tx.send(msg).await,
    };
    if sent.is_ok() {
        Sent::Ok
    } else {
        Sent::Failed
    }
}

/// Sends one frame of an open connection; false when the connection is
/// done: the send failed, or stalled (counted as a timeout).
async fn send_or_end(
    tx: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    msg: Message,
    timeout: Option<std::time::Duration>,
    counters: &std::sync::Arc<crate::metrics::Counters>,
    open: Option<&OpenSession>,
) -> bool {
    match send_frame(tx, msg, timeout).await {
        Sent::Ok => true,
        Sent::Failed => false,
        Sent::Stalled => {
            count_timeout(counters, open);
            false
        }
    }
}

fn count_timeout(counters: &std::sync::Arc<crate::metrics::Counters>, open: Option<&OpenSession>) {
    match open {
        Some(s) => counters.space(&s.space).inc(Counter::SessionsTimedOut),
        None => counters.add_host(Counter::SessionsTimedOut, 1),
    }
}

fn parse_access(grant: Option<&str>) -> Option<Access> {
    match grant {
        Some("owner") => Some(Access::Owner),
        Some("write") => Some(Access::Write),
        Some("read") => Some(Access::Read),
        _ => None,
    }
}

/// Grants change while sessions are open (`spacewake grant` writes the host
/// directory from another process). When the grants version has moved since
/// this session read its grant, the grant is read again: a downgrade
/// applies from the next request, a revocation ends the session. A
/// directory that cannot be read keeps the access the session had.
fn refresh_access(host: &Host, s: &mut OpenSession) -> Result<(), ProtocolError> {
    let version = host.grants_version();
    if version == s.access_version {
        return Ok(());
    }
    let Ok(grant) = host.store().directory().access(&s.space, &s.did) else {
        return Ok(());
    };
    s.access_version = version;
    match parse_access(grant.as_deref()) {
        Some(a) => {
            s.access = a;
            Ok(())
        }
        None => Err(ProtocolError::new(
            ErrorCode::Forbidden,
            format!("{}'s access to space {} was revoked", s.did, s.space),
        )),
    }
}

/// [`refresh_access`], ending the connection on a revocation (told with
/// `forbidden`, closed with 1008, counted); false when it ended.
async fn keep_access(
    host: &Host,
    s: &mut OpenSession,
    tx: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    timeout: Option<std::time::Duration>,
) -> bool {
    match refresh_access(host, s) {
        Ok(()) => true,
        Err(e) => {
            host.counters()
                .space(&s.space)
                .inc(Counter::SessionsRevoked);
            end_connection(tx, Some(e), CLOSE_POLICY, "access revoked", timeout).await;
            false
        }
    }
}

/// Tells a client the host is shutting down (an id-less `internal` error,
/// then close 1011) and counts it.
pub(crate) async fn end_for_shutdown(
    tx: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    counters: &std::sync::Arc<crate::metrics::Counters>,
    timeout: Option<std::time::Duration>,
) {
    counters.add_host(Counter::SessionsClosedAtShutdown, 1);
    let e = ProtocolError::new(
        ErrorCode::Internal,
        "the server is shutting down; reconnect to resume from the last seq you saw",
    );
    end_connection(tx, Some(e), CLOSE_INTERNAL, "server shutting down", timeout).await;
}

/// The server's end of a connection: the error that explains it, if any,
/// then a close frame with `code` and `reason`. Best effort: the client
/// may be gone.
pub(crate) async fn end_connection(
    tx: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    error: Option<ProtocolError>,
    code: u16,
    reason: &'static str,
    timeout: Option<std::time::Duration>,
) {
    if let Some(e) = error {
        let text = Message::Text(e.to_server_message().to_text().into());
        let _ = send_frame(tx, text, timeout).await;
    }
    let close = Message::Close(Some(CloseFrame {
        code,
        reason: Utf8Bytes::from_static(reason),
    }));
    let _ = send_frame(tx, close, timeout).await;
}

pub(crate) async fn sleep_or_never(left: Option<std::time::Duration>) {
    match left {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

async fn open_session(
    host: &Host,
    nonce: &str,
    o: crate::protocol::messages::Open,
    sink: crate::host::UpdateSink,
    peer: Option<std::net::IpAddr>,
) -> Result<(OpenSession, ServerMessage), ProtocolError> {
    verify_open(nonce, &o.space, &o.did, &o.signature)?;
    let directory = host.store().directory();
    if directory.get(&o.space).ok().flatten().is_none() {
        if o.create != Some(true) {
            // A mistyped name must not create an empty space for its typist.
            return Err(ProtocolError::new(
                ErrorCode::UnknownSpace,
                format!(
                    "there is no space {:?} on this server; open it with `create: true` \
                     (or `spacewake spaces create`) to create it",
                    o.space
                ),
            )
            .with_details(json!({ "space": o.space })));
        }
        if host.is_shutting_down() {
            return Err(host_error(
                None,
                HostError::Unavailable {
                    space: o.space.clone(),
                    reason: "the host is shutting down".into(),
                },
            ));
        }
        create_space(host, &o.did, &o.space, peer).await?;
    }
    // Read before the grant, so a change in between is seen next time.
    let access_version = directory.grants_version().unwrap_or(0);
    let access = parse_access(directory.access(&o.space, &o.did).ok().flatten().as_deref())
        .ok_or_else(|| {
            ProtocolError::new(
                ErrorCode::Forbidden,
                format!("{} has no access to space {}", o.did, o.space),
            )
        })?;
    let id = NEXT_SESSION.fetch_add(1, Ordering::Relaxed);
    let head_seq = host
        .ask(
            &o.space,
            Trigger::Session,
            crate::host::Attach { session: id, sink },
        )
        .await
        .map_err(|e| host_error(None, e))?;
    let session = OpenSession {
        id,
        space: o.space.clone(),
        did: o.did,
        access,
        resume: o.resume.map(|r| r.seq),
        access_version,
    };
    let opened = ServerMessage::Opened(Opened {
        session: format!("s{id}"),
        space: o.space,
        access,
        head_seq,
    });
    Ok((session, opened))
}

/// An explicit create: the opener owns the new space, if it may create
/// (`--space-creators`), within its address's rate and its quota (a key
/// costs nothing to make; a space costs disk). The count and the create
/// happen under one lock, so concurrent creates cannot pass the quota.
async fn create_space(
    host: &Host,
    did: &str,
    space: &str,
    peer: Option<std::net::IpAddr>,
) -> Result<(), ProtocolError> {
    let cfg = host.config();
    if !cfg.space_creators.allows(did) {
        host.counters()
            .add_host(Counter::CreatesRefusedNotAllowed, 1);
        return Err(ProtocolError::new(
            ErrorCode::Forbidden,
            format!(
                "{did} may not create spaces on this host (it admits only the dids of \
                 `serve --space-creators`); space {space:?} was not created"
            ),
        )
        .with_details(json!({ "space": space })));
    }
    let _creating = host.creations().lock().await;
    let directory = host.store().directory();
    if directory.get(space).ok().flatten().is_some() {
        // Made by a create that held the lock before this one.
        return Ok(());
    }
    // Checked before the rate (a refused create takes no token) and again
    // where the space is made (the exact check, across a fleet's hosts).
    let limit = cfg.max_spaces_per_identity;
    if limit > 0 {
        let owned = directory.owned_by(did).unwrap_or(0);
        if owned >= limit {
            return Err(over_space_quota(host, did, space, limit, owned));
        }
    }
    if let Some(peer) = peer {
        let per_minute = cfg.space_creates_per_minute;
        let now = host.store().clock().now_ms();
        if let Err(retry_in_ms) = host.creations().take(peer, per_minute, now) {
            host.counters().add_host(Counter::CreatesRefusedByRate, 1);
            return Err(ProtocolError::new(
                ErrorCode::QuotaExceeded,
                format!(
                    "{peer} created {per_minute} spaces within the last minute (the rate this \
                     host allows one address); space {space:?} was not created; retry in {} s",
                    retry_in_ms.div_ceil(1_000)
                ),
            )
            .with_details(json!({
                "quota": "creationRate",
                "perMinute": per_minute,
                "retryInMs": retry_in_ms,
            })));
        }
    }
    let created = if limit > 0 {
        host.store().create_space_within(space, did, limit)
    } else {
        host.store().create_space(space, did).map(|()| None)
    };
    match created {
        Ok(None) | Err(crate::store::StoreError::SpaceExists(_)) => Ok(()),
        Ok(Some(owned)) => Err(over_space_quota(host, did, space, limit, owned)),
        Err(e) => Err(ProtocolError::new(ErrorCode::UnknownSpace, e.to_string())),
    }
}

/// The refusal of a create past the per-identity quota (counted).
fn over_space_quota(host: &Host, did: &str, space: &str, limit: u64, owned: u64) -> ProtocolError {
    host.counters().add_host(Counter::SpacesRefusedByQuota, 1);
    ProtocolError::new(
        ErrorCode::QuotaExceeded,
        format!(
            "{did} already owns {} (the limit of this host); space {space:?} was not created",
            crate::human::count(owned, "space", "spaces"),
        ),
    )
    .with_details(json!({ "quota": "spacesPerIdentity", "limit": limit, "owned": owned }))
}

async fn handle(
    host: &Host,
    s: &OpenSession,
    m: ClientMessage,
) -> Result<ServerMessage, ProtocolError> {
    // A refusal names the request it answers.
    let asked = m.id().cloned();
    let space = s.space.as_str();
    let fail = |e| host_error(asked.clone(), e);
    let ack = |id, appended: Option<crate::host::Appended>| {
        ServerMessage::Ack(Ack {
            id,
            seq: appended.map(|a| a.seq),
            duplicate: appended.map(|a| a.duplicate),
        })
    };
    // Each request is asked with its own reply type.
    let (id, req) = match m {
        ClientMessage::Ping(p) => return Ok(ServerMessage::Pong(Pong { id: p.id })),
        ClientMessage::Open(_) => unreachable!("handled by the caller"),
        ClientMessage::Send(e) => {
            let event = crate::host::SendEvent {
                author: Author {
                    principal: s.did.clone(),
                    session: Some(format!("s{}", s.id)),
                },
                piece: e.piece,
                path: to_path(Some(e.stream)),
                event_id: e.event_id,
                payload: e.payload,
            };
            let appended = host
                .ask(space, Trigger::Session, event)
                .await
                .map_err(fail)?;
            return Ok(ack(e.id, Some(appended)));
        }
        ClientMessage::Read(r) => {
            let read = crate::host::Read {
                piece: r.piece,
                doc: r.doc,
                path: to_path(r.path),
            };
            let v = host
                .ask(space, Trigger::Session, read)
                .await
                .map_err(fail)?;
            return Ok(ServerMessage::Value(ValueReply {
                id: r.id,
                value: v.value,
                seq: v.seq,
            }));
        }
        ClientMessage::Deploy(d) => {
            let deploy = crate::host::Deploy {
                entry: d.entry,
                files: d.files,
                export: d.export,
                argument: d.argument.unwrap_or(json!({})),
            };
            let piece = host
                .ask(space, Trigger::Session, deploy)
                .await
                .map_err(fail)?;
            return Ok(ServerMessage::Deployed(Deployed { id: d.id, piece }));
        }
        ClientMessage::Delete(d) => {
            host.ask(
                space,
                Trigger::Session,
                crate::host::DeletePiece { piece: d.piece },
            )
            .await
            .map_err(fail)?;
            return Ok(ack(d.id, None));
        }
        ClientMessage::Track(t) => (
            t.id,
            Request::Track {
                session: s.id,
                piece: t.piece,
                path: to_path(t.path),
                since: t.since.or(s.resume),
            },
        ),
        ClientMessage::Untrack(u) => (
            u.id,
            Request::Untrack {
                session: s.id,
                piece: u.piece,
                path: to_path(u.path),
            },
        ),
    };
    host.ask(space, Trigger::Session, req).await.map_err(fail)?;
    Ok(ack(id, None))
}

/// Maps a host error to the wire's error codes, with the details a client
/// acts on (how long to wait, who holds the space).
pub fn host_error(id: Option<crate::protocol::RequestId>, e: HostError) -> ProtocolError {
    let (code, details) = match &e {
        HostError::UnknownSpace(space) => {
            (ErrorCode::UnknownSpace, Some(json!({ "space": space })))
        }
        HostError::UnknownPiece(_) => (ErrorCode::UnknownPiece, None),
        HostError::PieceSetAside { reason, .. } => {
            (ErrorCode::UnknownPiece, Some(json!({ "setAside": reason })))
        }
        HostError::UnknownStream(_) => (ErrorCode::UnknownStream, None),
        HostError::InvalidPattern { diagnostics } => (
            ErrorCode::InvalidPattern,
            Some(json!({ "diagnostics": diagnostics })),
        ),
        HostError::InvalidArgument(m) => (
            ErrorCode::InvalidArgument,
            Some(json!({ "path": m.dotted(), "expected": m.expected, "got": m.got })),
        ),
        HostError::BadRequest(_) => (ErrorCode::BadMessage, None),
        HostError::BackingOff {
            failures,
            retry_in_ms,
            ..
        } => (
            ErrorCode::BackingOff,
            Some(json!({ "failures": failures, "retryInMs": retry_in_ms })),
        ),
        HostError::AtCapacity { limit, .. } => {
            (ErrorCode::Overloaded, Some(json!({ "limit": limit })))
        }
        HostError::HeldElsewhere {
            holder,
            retry_in_ms,
            ..
        } => (
            ErrorCode::HeldElsewhere,
            Some(json!({ "holder": holder, "retryInMs": retry_in_ms })),
        ),
        HostError::Unavailable { .. } => (ErrorCode::Unavailable, None),
        HostError::StorageQuota {
            used_bytes,
            incoming_bytes,
            limit_bytes,
            ..
        } => (
            ErrorCode::QuotaExceeded,
            Some(json!({
                "quota": "spaceBytes",
                "limit": limit_bytes,
                "used": used_bytes,
                "incoming": incoming_bytes,
            })),
        ),
        HostError::Internal(_) => (ErrorCode::Internal, None),
    };
    let mut pe = ProtocolError::new(code, e.to_string()).with_id(id);
    if let Some(d) = details {
        pe = pe.with_details(d);
    }
    pe
}

fn to_path(p: Option<Vec<PathSegment>>) -> Vec<PathSeg> {
    p.unwrap_or_default()
        .into_iter()
        .map(|s| match s {
            PathSegment::Key(k) => PathSeg::Key(k),
            PathSegment::Index(i) => PathSeg::Index(i as usize),
        })
        .collect()
}

fn to_wire_seg(s: PathSeg) -> PathSegment {
    match s {
        PathSeg::Key(k) => PathSegment::Key(k),
        PathSeg::Index(i) => PathSegment::Index(i as u64),
    }
}
