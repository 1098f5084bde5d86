//! A small async protocol client over tokio-tungstenite, for tests, the
//! benchmark load generator and CLI subcommands.
//!
//! [`Client::connect`] performs the whole opening handshake (read the
//! challenge, sign it for the space, send `open`, wait for `opened`).
//! [`Client::request`] sends one message and waits for the reply carrying the
//! same id; `update`s that arrive meanwhile are buffered in arrival order and
//! handed out by [`Client::next_update`].
//!
//! Invariants:
//! - Updates are never dropped or reordered by the client: whatever
//!   `request` reads past is queued, and `next_update` drains the queue
//!   before reading the socket.
//! - [`Client::last_seq`] is the highest update seq received, the value to
//!   pass as `resume` when reconnecting.
//! - Every wait is bounded by a timeout, so a silent server fails a test
//!   instead of hanging it.
//! - An `error` without an id that arrives while a request is pending is
//!   taken as that request's reply: the server omits the id only when it
//!   could not read one from the frame, and `request` has one frame in flight.

use std::collections::VecDeque;
use std::time::Duration;

use crate::clock::Timeout;
use futures_util::{SinkExt as _, StreamExt as _};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::auth::sign_open;
use super::did::Identity;
use super::frames::Frame;
use super::messages::{
    ClientMessage, ErrorReply, Open, Opened, RequestId, Resume, Seq, ServerMessage, Update,
};

/// How long `connect` and `request` wait by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

type WsStream = WebSocketStream<MaybeTlsStream<TcpStream>>;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("websocket error: {0}")]
    WebSocket(Box<tokio_tungstenite::tungstenite::Error>),
    #[error("the server closed the connection{}", close_text(.code, .reason))]
    Closed {
        /// The close frame's code (1011: the server is shutting down or the
        /// space's server stopped; 1008: refused; 1009: a frame too large).
        code: Option<u16>,
        reason: String,
    },
    #[error("no {0} from the server within {1:?}")]
    Timeout(&'static str, Duration),
    #[error("the server sent a frame that is not a protocol message: {0}")]
    BadFrame(String),
    #[error("expected {expected} from the server, got `{got}`")]
    Unexpected { expected: &'static str, got: String },
    #[error("the server refused: {}: {}", .0.code, .0.message)]
    Refused(ErrorReply),
    #[error("request() needs a message with an id (`open` is sent by connect)")]
    NoId,
}

fn close_text(code: &Option<u16>, reason: &str) -> String {
    match code {
        Some(c) if reason.is_empty() => format!(" (close code {c})"),
        Some(c) => format!(" (close code {c}: {reason})"),
        None => String::new(),
    }
}

impl From<tokio_tungstenite::tungstenite::Error> for ClientError {
    fn from(e: tokio_tungstenite::tungstenite::Error) -> Self {
        ClientError::WebSocket(Box::new(e))
    }
}

/// An open session.
pub struct Client {
    ws: WsStream,
    updates: VecDeque<Update>,
    next_id: i64,
    last_seq: Option<Seq>,
    timeout: Duration,
    opened: Opened,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("opened", &self.opened)
            .field("buffered_updates", &self.updates.len())
            .field("last_seq", &self.last_seq)
            .finish()
    }
}

/// How [`Client::connect_with`] opens its session.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    /// Create the space (owned by this identity) if it does not exist.
    pub create: bool,
    /// Resume after this seq (the [`Client::last_seq`] of an earlier
    /// connection).
    pub resume: Option<Seq>,
    /// Answer a `heldElsewhere` refusal at once instead of waiting its
    /// `retryInMs` and trying again (for up to [`HELD_RETRY_LIMIT`]).
    pub once: bool,
}

/// How long [`Client::connect_with`] keeps retrying a space another host
/// holds (one that cannot relay to it, or a holder that just died, whose
/// lease must expire first).
pub const HELD_RETRY_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

impl Client {
    /// Connects to `url` (e.g. `ws://127.0.0.1:8080/ws`) and opens a session
    /// on the existing space `space` as `identity`.
    pub async fn connect(
        url: &str,
        identity: &Identity,
        space: &str,
    ) -> Result<(Client, Opened), ClientError> {
        Self::connect_with(url, identity, space, OpenOptions::default()).await
    }

    /// Like [`Client::connect`], creating the space if it does not exist.
    pub async fn connect_creating(
        url: &str,
        identity: &Identity,
        space: &str,
    ) -> Result<(Client, Opened), ClientError> {
        let opts = OpenOptions {
            create: true,
            ..OpenOptions::default()
        };
        Self::connect_with(url, identity, space, opts).await
    }

    /// Like [`Client::connect`], asking the server to resume after `resume`
    /// (the [`Client::last_seq`] of a previous connection).
    pub async fn connect_resuming(
        url: &str,
        identity: &Identity,
        space: &str,
        resume: Option<Seq>,
    ) -> Result<(Client, Opened), ClientError> {
        let opts = OpenOptions {
            resume,
            ..OpenOptions::default()
        };
        Self::connect_with(url, identity, space, opts).await
    }

    /// Connects and opens a session as `opts` say. A `heldElsewhere`
    /// refusal is waited out (its `retryInMs`, at least 50 ms and at most
    /// 5 s at a time) and tried again, for up to [`HELD_RETRY_LIMIT`],
    /// unless `opts.once`.
    pub async fn connect_with(
        url: &str,
        identity: &Identity,
        space: &str,
        opts: OpenOptions,
    ) -> Result<(Client, Opened), ClientError> {
        let limit = Timeout::after(HELD_RETRY_LIMIT);
        loop {
            match Self::open_once(url, identity, space, opts).await {
                Err(ClientError::Refused(e))
                    if !opts.once && e.code == crate::protocol::ErrorCode::HeldElsewhere =>
                {
                    let ms = e
                        .details
                        .as_ref()
                        .and_then(|d| d["retryInMs"].as_u64())
                        .unwrap_or(1_000)
                        .clamp(50, 5_000);
                    let wait = std::time::Duration::from_millis(ms);
                    if limit.left() < wait {
                        return Err(ClientError::Refused(e));
                    }
                    tokio::time::sleep(wait).await;
                }
                other => return other,
            }
        }
    }

    /// One connection and open, as `opts` say.
    async fn open_once(
        url: &str,
        identity: &Identity,
        space: &str,
        opts: OpenOptions,
    ) -> Result<(Client, Opened), ClientError> {
        let resume = opts.resume;
        let deadline = Timeout::after(DEFAULT_TIMEOUT);
        let (mut ws, _response) = tokio::time::timeout(
            deadline.left(),
            // Small request/reply frames: Nagle plus delayed ACKs would add 40 ms.
            tokio_tungstenite::connect_async_with_config(url, None, true),
        )
        .await
        .map_err(|_| ClientError::Timeout("WebSocket handshake", DEFAULT_TIMEOUT))??;
        let challenge = match read_message(&mut ws, deadline, "challenge").await? {
            ServerMessage::Challenge(c) => c,
            ServerMessage::Error(e) => return Err(ClientError::Refused(e)),
            other => {
                return Err(ClientError::Unexpected {
                    expected: "challenge",
                    got: other.type_name().into(),
                })
            }
        };
        let open = ClientMessage::Open(Open {
            space: space.to_string(),
            did: identity.did(),
            signature: sign_open(identity, &challenge.nonce, space),
            resume: resume.map(|seq| Resume { seq }),
            create: opts.create.then_some(true),
        });
        ws.send(Message::text(
            serde_json::to_string(&open).expect("serializes"),
        ))
        .await?;
        let opened = match read_message(&mut ws, deadline, "opened").await? {
            ServerMessage::Opened(o) => o,
            ServerMessage::Error(e) => return Err(ClientError::Refused(e)),
            other => {
                return Err(ClientError::Unexpected {
                    expected: "opened",
                    got: other.type_name().into(),
                })
            }
        };
        let client = Client {
            ws,
            updates: VecDeque::new(),
            next_id: 1,
            last_seq: resume,
            timeout: DEFAULT_TIMEOUT,
            opened: opened.clone(),
        };
        Ok((client, opened))
    }

    /// What the server said when the session opened.
    pub fn opened(&self) -> &Opened {
        &self.opened
    }

    /// Highest update seq seen (or the resume point), for reconnecting.
    pub fn last_seq(&self) -> Option<Seq> {
        self.last_seq
    }

    /// How long [`Client::request`] waits for its reply.
    pub fn set_request_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// A request id not used before on this client.
    pub fn fresh_id(&mut self) -> RequestId {
        let id = RequestId::Int(self.next_id);
        self.next_id += 1;
        id
    }

    /// Sends `message` and returns the reply with the same id (which may be
    /// an `error` message: the server's refusal is a normal reply here).
    pub async fn request(&mut self, message: ClientMessage) -> Result<ServerMessage, ClientError> {
        let id = message.id().cloned().ok_or(ClientError::NoId)?;
        let text = serde_json::to_string(&message).expect("client messages serialize");
        self.ws.send(Message::text(text)).await?;
        let deadline = Timeout::after(self.timeout);
        loop {
            let reply = match self.read(deadline, "reply").await? {
                ServerMessage::Update(u) => {
                    self.updates.push_back(u);
                    continue;
                }
                reply => reply,
            };
            match reply.id() {
                Some(reply_id) if *reply_id == id => return Ok(reply),
                None if matches!(reply, ServerMessage::Error(_)) => return Ok(reply),
                // A late reply to an earlier request that timed out.
                _ => continue,
            }
        }
    }

    /// Sends a raw text frame, for tests of malformed input. Read the answer
    /// with [`Client::recv`].
    pub async fn send_text(&mut self, text: impl Into<String>) -> Result<(), ClientError> {
        self.ws.send(Message::text(text.into())).await?;
        Ok(())
    }

    /// Sends a raw binary frame, for tests of the `binaryFrame` error.
    pub async fn send_binary(&mut self, bytes: Vec<u8>) -> Result<(), ClientError> {
        self.ws.send(Message::binary(bytes)).await?;
        Ok(())
    }

    /// The next message from the socket, whatever it is (buffered updates are
    /// not returned here); `None` if nothing arrives within `timeout`.
    pub async fn recv(&mut self, timeout: Duration) -> Result<Option<ServerMessage>, ClientError> {
        match self.read(Timeout::after(timeout), "message").await {
            Ok(m) => Ok(Some(m)),
            Err(ClientError::Timeout(..)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The next pushed update: a buffered one first, else the next from the
    /// socket; `None` if none arrives within `timeout`. Replies that arrive
    /// meanwhile (to no pending request) are discarded.
    pub async fn next_update(&mut self, timeout: Duration) -> Result<Option<Update>, ClientError> {
        if let Some(u) = self.updates.pop_front() {
            return Ok(Some(u));
        }
        let deadline = Timeout::after(timeout);
        loop {
            match self.read(deadline, "update").await {
                Ok(ServerMessage::Update(u)) => return Ok(Some(u)),
                Ok(_) => continue,
                Err(ClientError::Timeout(..)) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }

    /// Closes the WebSocket politely.
    pub async fn close(mut self) -> Result<(), ClientError> {
        self.ws.close(None).await?;
        Ok(())
    }

    async fn read(
        &mut self,
        deadline: Timeout,
        waiting_for: &'static str,
    ) -> Result<ServerMessage, ClientError> {
        let message = read_message(&mut self.ws, deadline, waiting_for).await?;
        if let ServerMessage::Update(u) = &message {
            self.last_seq = Some(self.last_seq.map_or(u.seq, |s| s.max(u.seq)));
        }
        Ok(message)
    }
}

/// Reads frames until a protocol message arrives. Control frames are answered
/// by tungstenite itself and skipped here.
async fn read_message(
    ws: &mut WsStream,
    deadline: Timeout,
    waiting_for: &'static str,
) -> Result<ServerMessage, ClientError> {
    loop {
        let frame = tokio::time::timeout(deadline.left(), ws.next())
            .await
            .map_err(|_| ClientError::Timeout(waiting_for, deadline.limit()))?;
        let frame = match frame {
            None => {
                return Err(ClientError::Closed {
                    code: None,
                    reason: String::new(),
                })
            }
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(frame)) => frame,
        };
        let text = match to_frame(&frame) {
            Some(Frame::Text(text)) => text,
            Some(Frame::Binary(b)) => {
                return Err(ClientError::BadFrame(format!(
                    "binary frame of {} bytes",
                    b.len()
                )))
            }
            Some(Frame::Other("close")) => {
                let (code, reason) = match &frame {
                    Message::Close(Some(f)) => (Some(u16::from(f.code)), f.reason.to_string()),
                    _ => (None, String::new()),
                };
                return Err(ClientError::Closed { code, reason });
            }
            _ => continue,
        };
        return serde_json::from_str(text).map_err(|e| ClientError::BadFrame(e.to_string()));
    }
}

/// Views a tungstenite message as a protocol [`Frame`]; `None` for the
/// control frames (ping, pong) the library answers itself.
pub fn to_frame(message: &Message) -> Option<Frame<'_>> {
    match message {
        Message::Text(t) => Some(Frame::Text(t.as_str())),
        Message::Binary(b) => Some(Frame::Binary(b)),
        Message::Close(_) => Some(Frame::Other("close")),
        Message::Frame(_) => Some(Frame::Other("raw")),
        Message::Ping(_) | Message::Pong(_) => None,
    }
}

#[cfg(test)]
mod tests {
    //! The client against a tiny in-test server that speaks just enough of the
    //! protocol (challenge, open with real signature checks, ping, track,
    //! send) to prove the client's framing, auth and update buffering.
    use super::super::auth::{new_nonce, verify_open};
    use super::super::frames::{check_phase, parse_client_frame, ProtocolError};
    use super::super::messages::{Access, Ack, Challenge, ErrorCode, Ping, Pong, SendEvent, Track};
    use super::*;
    use serde_json::json;
    use tokio::net::TcpListener;

    const SPACE: &str = "home";

    async fn serve_one(stream: TcpStream) {
        let mut ws = tokio_tungstenite::accept_async(stream).await.unwrap();
        let nonce = new_nonce();
        let send = |m: ServerMessage| Message::text(m.to_text());
        ws.send(send(ServerMessage::Challenge(Challenge::new(
            nonce.clone(),
        ))))
        .await
        .unwrap();
        let mut open = false;
        let mut seq: Seq = 7;
        while let Some(Ok(frame)) = ws.next().await {
            let Some(frame) = to_frame(&frame) else {
                continue;
            };
            if matches!(frame, Frame::Other("close")) {
                break;
            }
            let parsed = parse_client_frame(frame).and_then(|m| {
                check_phase(open, &m)?;
                Ok(m)
            });
            let replies: Vec<ServerMessage> = match parsed {
                Err(e) => vec![e.into()],
                Ok(ClientMessage::Open(o)) => {
                    match verify_open(&nonce, &o.space, &o.did, &o.signature) {
                        Err(e) => {
                            let err: ProtocolError = e.into();
                            ws.send(send(err.into())).await.unwrap();
                            break; // a failed open ends the connection
                        }
                        Ok(()) if o.space != SPACE => {
                            let err = ProtocolError::new(
                                ErrorCode::UnknownSpace,
                                format!("no space named {:?}", o.space),
                            );
                            ws.send(send(err.into())).await.unwrap();
                            break; // as the spec says: a failed open ends the connection
                        }
                        Ok(()) => {
                            open = true;
                            vec![ServerMessage::Opened(Opened {
                                session: "s-test".into(),
                                space: o.space,
                                access: Access::Write,
                                head_seq: o.resume.map_or(seq, |r| r.seq.max(seq)),
                            })]
                        }
                    }
                }
                Ok(ClientMessage::Ping(Ping { id })) => vec![ServerMessage::Pong(Pong { id })],
                Ok(ClientMessage::Track(Track { id, .. })) => {
                    vec![ServerMessage::Ack(Ack {
                        id,
                        seq: None,
                        duplicate: None,
                    })]
                }
                Ok(ClientMessage::Send(SendEvent {
                    id, piece, payload, ..
                })) => {
                    // Push the resulting update *before* the ack, the order a
                    // real wave produces, to exercise the client's buffering.
                    seq += 1;
                    vec![
                        ServerMessage::Update(Update {
                            seq,
                            piece,
                            path: vec!["value".into()],
                            value: payload,
                        }),
                        ServerMessage::Ack(Ack {
                            id,
                            seq: Some(seq),
                            duplicate: Some(false),
                        }),
                    ]
                }
                Ok(other) => vec![ProtocolError::new(
                    ErrorCode::Internal,
                    format!("test server does not implement `{}`", other.type_name()),
                )
                .with_id(other.id().cloned())
                .into()],
            };
            for reply in replies {
                ws.send(send(reply)).await.unwrap();
            }
        }
    }

    async fn start_server() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve_one(stream));
            }
        });
        format!("ws://{addr}/ws")
    }

    #[tokio::test]
    async fn connect_opens_and_pings() {
        let url = start_server().await;
        let id = Identity::generate();
        let (mut client, opened) = Client::connect(&url, &id, SPACE).await.unwrap();
        assert_eq!(opened.space, SPACE);
        assert_eq!(opened.access, Access::Write);
        assert_eq!(opened.head_seq, 7);
        let ping_id = client.fresh_id();
        let reply = client
            .request(ClientMessage::Ping(Ping {
                id: ping_id.clone(),
            }))
            .await
            .unwrap();
        assert_eq!(reply, ServerMessage::Pong(Pong { id: ping_id }));
        client.close().await.unwrap();
    }

    #[tokio::test]
    async fn updates_pushed_before_a_reply_are_buffered_in_order() {
        let url = start_server().await;
        let (mut client, _) = Client::connect(&url, &Identity::generate(), SPACE)
            .await
            .unwrap();
        let track_id = client.fresh_id();
        let ack = client
            .request(ClientMessage::Track(Track {
                id: track_id.clone(),
                piece: "counter".into(),
                path: None,
                since: None,
            }))
            .await
            .unwrap();
        assert_eq!(ack.id(), Some(&track_id));
        for n in 1..=3 {
            let id = client.fresh_id();
            let reply = client
                .request(ClientMessage::Send(SendEvent {
                    id: id.clone(),
                    piece: "counter".into(),
                    stream: vec!["increment".into()],
                    payload: json!(n),
                    event_id: None,
                }))
                .await
                .unwrap();
            assert_eq!(
                reply,
                ServerMessage::Ack(Ack {
                    id,
                    seq: Some(7 + n),
                    duplicate: Some(false),
                })
            );
        }
        assert_eq!(client.last_seq(), Some(10));
        for n in 1..=3u64 {
            let update = client
                .next_update(Duration::from_secs(5))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(update.seq, 7 + n);
            assert_eq!(update.value, json!(n));
        }
        assert!(client
            .next_update(Duration::from_millis(50))
            .await
            .unwrap()
            .is_none());
    }

    #[tokio::test]
    async fn error_replies_keep_the_session() {
        let url = start_server().await;
        let (mut client, _) = Client::connect(&url, &Identity::generate(), SPACE)
            .await
            .unwrap();
        client.send_text("{not json").await.unwrap();
        let Some(ServerMessage::Error(e)) = client.recv(Duration::from_secs(5)).await.unwrap()
        else {
            panic!("expected an error")
        };
        assert_eq!(e.code, ErrorCode::BadJson);
        client.send_binary(vec![1, 2, 3]).await.unwrap();
        let Some(ServerMessage::Error(e)) = client.recv(Duration::from_secs(5)).await.unwrap()
        else {
            panic!("expected an error")
        };
        assert_eq!(e.code, ErrorCode::BinaryFrame);
        // A request the server refuses comes back as a reply with its id.
        let id = client.fresh_id();
        let reply = client
            .request(ClientMessage::Read(super::super::messages::ReadValue {
                id: id.clone(),
                piece: Some("counter".into()),
                doc: None,
                path: None,
            }))
            .await
            .unwrap();
        let ServerMessage::Error(e) = reply else {
            panic!("expected an error, got {reply:?}")
        };
        assert_eq!((e.id, e.code), (Some(id), ErrorCode::Internal));
        // Still open.
        let id = client.fresh_id();
        assert!(matches!(
            client
                .request(ClientMessage::Ping(Ping { id }))
                .await
                .unwrap(),
            ServerMessage::Pong(_)
        ));
    }

    #[tokio::test]
    async fn unknown_space_is_refused() {
        let url = start_server().await;
        let err = Client::connect(&url, &Identity::generate(), "elsewhere")
            .await
            .unwrap_err();
        let ClientError::Refused(e) = err else {
            panic!("expected a refusal, got {err:?}")
        };
        assert_eq!(e.code, ErrorCode::UnknownSpace);
    }

    /// A hand-rolled connection that signs the wrong bytes never opens.
    #[tokio::test]
    async fn bad_signature_never_opens() {
        let url = start_server().await;
        let id = Identity::generate();
        for forged in ["another nonce", "another space", "another key", "garbage"] {
            let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
            let deadline = Timeout::after(Duration::from_secs(5));
            let ServerMessage::Challenge(c) =
                read_message(&mut ws, deadline, "challenge").await.unwrap()
            else {
                panic!("no challenge")
            };
            let signature = match forged {
                "another nonce" => sign_open(&id, &new_nonce(), SPACE),
                "another space" => sign_open(&id, &c.nonce, "elsewhere"),
                "another key" => sign_open(&Identity::generate(), &c.nonce, SPACE),
                _ => "AAAA".into(),
            };
            let open = ClientMessage::Open(Open {
                space: SPACE.into(),
                did: id.did(),
                signature,
                resume: None,
                create: None,
            });
            ws.send(Message::text(serde_json::to_string(&open).unwrap()))
                .await
                .unwrap();
            let ServerMessage::Error(e) = read_message(&mut ws, deadline, "error").await.unwrap()
            else {
                panic!("{forged}: opened with a forged signature")
            };
            assert_eq!(e.code, ErrorCode::BadSignature, "{forged}");
            // And nothing after it is served: the server hung up.
            let after = read_message(&mut ws, deadline, "close").await;
            assert!(
                matches!(
                    after,
                    Err(ClientError::Closed { .. }) | Err(ClientError::WebSocket(_))
                ),
                "{forged}: {after:?}"
            );
        }
    }

    #[tokio::test]
    async fn messages_before_open_are_refused() {
        let url = start_server().await;
        let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
        let deadline = Timeout::after(Duration::from_secs(5));
        read_message(&mut ws, deadline, "challenge").await.unwrap();
        ws.send(Message::text(r#"{"type":"ping","id":"early"}"#))
            .await
            .unwrap();
        let ServerMessage::Error(e) = read_message(&mut ws, deadline, "error").await.unwrap()
        else {
            panic!("expected notOpen")
        };
        assert_eq!(e.code, ErrorCode::NotOpen);
        assert_eq!(e.id, Some(RequestId::Text("early".into())));
    }

    #[tokio::test]
    async fn resume_point_is_carried() {
        let url = start_server().await;
        let (client, opened) =
            Client::connect_resuming(&url, &Identity::generate(), SPACE, Some(40))
                .await
                .unwrap();
        assert_eq!(opened.head_seq, 40);
        assert_eq!(client.last_seq(), Some(40));
    }
}
