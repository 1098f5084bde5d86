//! The wire protocol's message types: JSON objects in WebSocket text frames,
//! each tagged by a `"type"` field, with camelCase field names.
//!
//! [`ClientMessage`] is what a client may send, [`ServerMessage`] what the
//! server sends. `schema/protocol/*.schema.json` describe the same shapes and
//! a test keeps them in step with these types.
//!
//! Invariants:
//! - Client messages are parsed strictly (`deny_unknown_fields`): a misspelt
//!   optional field is an error, never silently ignored. Server messages are
//!   parsed leniently by the client so a newer server can add fields.
//! - Optional fields that are absent are not serialized, so a message
//!   round-trips through JSON to an equal value.
//! - `id` is chosen by the client and echoed unchanged in the reply; it is a
//!   string of at most [`MAX_ID_LEN`] bytes or a 64-bit signed integer.
//! - [`ClientMessage::validate`] checks what serde cannot (one-of fields,
//!   non-empty lists); a message that parses and validates is well formed,
//!   though the space may still refuse it (unknown piece, access).

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value as Json;

/// The protocol name and version announced in the challenge.
pub const PROTOCOL_VERSION: &str = "spacewake/1";
/// Longest accepted string request id, in bytes. Ids are echoed in replies
/// and logged; a short cap keeps that cheap.
pub const MAX_ID_LEN: usize = 256;
/// Event ids (`eventId`) are 1 to this many characters: idempotency keys,
/// stored with every event and looked up on every append.
pub const MAX_EVENT_ID_CHARS: usize = 512;

/// A space-global commit sequence number.
pub type Seq = u64;

/// A client-chosen request id, echoed back in the reply.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RequestId {
    Int(i64),
    Text(String),
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Int(n) => write!(f, "{n}"),
            RequestId::Text(s) => write!(f, "{s:?}"),
        }
    }
}

impl From<i64> for RequestId {
    fn from(n: i64) -> Self {
        RequestId::Int(n)
    }
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        RequestId::Text(s.to_string())
    }
}

impl Serialize for RequestId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RequestId::Int(n) => s.serialize_i64(*n),
            RequestId::Text(t) => s.serialize_str(t),
        }
    }
}

// Hand-written rather than `#[serde(untagged)]` so a bad id gets a message
// that says what an id may be, instead of "did not match any variant".
impl<'de> Deserialize<'de> for RequestId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RequestId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    "a request id: a string of at most {MAX_ID_LEN} bytes or a 64-bit integer"
                )
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<RequestId, E> {
                Ok(RequestId::Int(n))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<RequestId, E> {
                i64::try_from(n)
                    .map(RequestId::Int)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(n), &self))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RequestId, E> {
                if s.len() > MAX_ID_LEN {
                    return Err(E::invalid_length(s.len(), &self));
                }
                Ok(RequestId::Text(s.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// One step of a path into a piece's result or a document: an object key or
/// an array index.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathSegment {
    Key(String),
    Index(u64),
}

impl From<&str> for PathSegment {
    fn from(s: &str) -> Self {
        PathSegment::Key(s.to_string())
    }
}

impl From<u64> for PathSegment {
    fn from(n: u64) -> Self {
        PathSegment::Index(n)
    }
}

impl Serialize for PathSegment {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            PathSegment::Key(k) => s.serialize_str(k),
            PathSegment::Index(i) => s.serialize_u64(*i),
        }
    }
}

impl<'de> Deserialize<'de> for PathSegment {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = PathSegment;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a path segment: a string key or a non-negative integer index")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<PathSegment, E> {
                Ok(PathSegment::Index(n))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<PathSegment, E> {
                u64::try_from(n)
                    .map(PathSegment::Index)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(n), &self))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<PathSegment, E> {
                Ok(PathSegment::Key(s.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// Renders a path the way the scenario files write it (`items.0.title`), for
/// error messages.
pub fn display_path(path: &[PathSegment]) -> String {
    path.iter()
        .map(|s| match s {
            PathSegment::Key(k) => k.clone(),
            PathSegment::Index(i) => i.to_string(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// What a session may do in its space. Ordered: each level includes the one
/// before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Track and read.
    Read,
    /// Also send events and deploy pieces.
    Write,
    /// Also change the space's ACL.
    Owner,
}

impl Access {
    /// Whether a session holding `self` may do something that requires `needed`.
    pub fn allows(self, needed: Access) -> bool {
        self >= needed
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::Owner => "owner",
        }
    }
}

// ---------------------------------------------------------------- client → server

/// A message from client to server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ClientMessage {
    Open(Open),
    Track(Track),
    Untrack(Untrack),
    Send(SendEvent),
    Read(ReadValue),
    Deploy(Deploy),
    Delete(DeletePiece),
    Ping(Ping),
}

/// Opens the session: must be the first message on a connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Open {
    pub space: String,
    pub did: String,
    /// base64url ed25519 signature over [`super::auth::open_message`].
    pub signature: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<Resume>,
    /// Create the space, owned by `did`, if it does not exist yet. Without
    /// it, opening a space that does not exist is `unknownSpace`: a
    /// mistyped name never creates an empty space.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create: Option<bool>,
}

/// Resume point of a reconnecting client: the last seq it saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resume {
    pub seq: Seq,
}

/// Adds a piece (or a path inside its result) to the session's demand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Track {
    pub id: RequestId,
    pub piece: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<Vec<PathSegment>>,
    /// Deliver every change after this seq (for a resuming client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Seq>,
}

/// Removes what a matching `track` added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Untrack {
    pub id: RequestId,
    pub piece: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<Vec<PathSegment>>,
}

/// Sends an event to the stream found at `stream` in the piece's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SendEvent {
    pub id: RequestId,
    pub piece: String,
    pub stream: Vec<PathSegment>,
    pub payload: Json,
    /// Client-chosen idempotency key: an event id the space has already
    /// accepted is acknowledged again without being appended twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
}

/// Reads once (no tracking): a piece's result (or a path in it), or a raw document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadValue {
    pub id: RequestId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub piece: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<Vec<PathSegment>>,
}

/// Compiles a pattern from `files` and runs it as a new piece.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Deploy {
    pub id: RequestId,
    /// The file in `files` whose export is the pattern.
    pub entry: String,
    /// File name → TypeScript/TSX source.
    pub files: BTreeMap<String, String>,
    /// The export to run; the default export when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export: Option<String>,
    /// The pattern's argument; its declared defaults fill what is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument: Option<Json>,
}

/// Deletes a piece of the space (owner only); answered with `ack`. Its
/// result, argument and listing are removed and its schedule entries leave
/// the index in the same commit; its pending wakes end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeletePiece {
    pub id: RequestId,
    pub piece: String,
}

/// Liveness check; answered with `pong`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ping {
    pub id: RequestId,
}

impl ClientMessage {
    /// Every `type` a client may send, in the order the spec lists them.
    pub const TYPES: &'static [&'static str] = &[
        "open", "track", "untrack", "send", "read", "deploy", "delete", "ping",
    ];

    /// The wire name of this message's type.
    pub fn type_name(&self) -> &'static str {
        match self {
            ClientMessage::Open(_) => "open",
            ClientMessage::Track(_) => "track",
            ClientMessage::Untrack(_) => "untrack",
            ClientMessage::Send(_) => "send",
            ClientMessage::Read(_) => "read",
            ClientMessage::Deploy(_) => "deploy",
            ClientMessage::Delete(_) => "delete",
            ClientMessage::Ping(_) => "ping",
        }
    }

    /// The request id, for every message but `open` (which is answered by
    /// `opened` or an id-less error).
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            ClientMessage::Open(_) => None,
            ClientMessage::Track(m) => Some(&m.id),
            ClientMessage::Untrack(m) => Some(&m.id),
            ClientMessage::Send(m) => Some(&m.id),
            ClientMessage::Read(m) => Some(&m.id),
            ClientMessage::Deploy(m) => Some(&m.id),
            ClientMessage::Delete(m) => Some(&m.id),
            ClientMessage::Ping(m) => Some(&m.id),
        }
    }

    /// The least access a session needs to send this message: READ may open,
    /// track, read and ping; sending events and deploying need WRITE;
    /// deleting a piece needs OWNER.
    pub fn required_access(&self) -> Access {
        match self {
            ClientMessage::Delete(_) => Access::Owner,
            ClientMessage::Send(_) | ClientMessage::Deploy(_) => Access::Write,
            _ => Access::Read,
        }
    }

    /// Checks the rules serde's derive cannot express. The error names the
    /// field it is about; it is reported as `badMessage`.
    pub fn validate(&self) -> Result<(), RuleViolation> {
        let violation = |field: &'static str, reason: String| Err(RuleViolation { field, reason });
        let nonempty = |field: &'static str, value: &str| {
            if value.is_empty() {
                violation(field, format!("`{field}` must not be empty"))
            } else {
                Ok(())
            }
        };
        match self {
            ClientMessage::Open(m) => {
                nonempty("space", &m.space)?;
                nonempty("did", &m.did)?;
                nonempty("signature", &m.signature)
            }
            ClientMessage::Track(m) => nonempty("piece", &m.piece),
            ClientMessage::Untrack(m) => nonempty("piece", &m.piece),
            ClientMessage::Send(m) => check_send(&m.piece, &m.stream, m.event_id.as_deref()),
            ClientMessage::Read(m) => match (&m.piece, &m.doc) {
                (Some(p), None) => nonempty("piece", p),
                (None, Some(d)) => nonempty("doc", d),
                (Some(_), Some(_)) => violation(
                    "doc",
                    "`read` takes either `piece` or `doc`, not both".into(),
                ),
                (None, None) => violation("piece", "`read` needs one of `piece` or `doc`".into()),
            },
            ClientMessage::Deploy(m) => {
                nonempty("entry", &m.entry)?;
                if !m.files.contains_key(&m.entry) {
                    return violation(
                        "entry",
                        format!(
                            "`entry` names {:?}, which is not one of the `files`",
                            m.entry
                        ),
                    );
                }
                if let Some(e) = &m.export {
                    nonempty("export", e)?;
                }
                Ok(())
            }
            ClientMessage::Delete(m) => nonempty("piece", &m.piece),
            ClientMessage::Ping(_) => Ok(()),
        }
    }
}

/// The rules of an event sent to a stream, the same over the WebSocket
/// (`send`) and HTTP ingest: a piece, a stream path of at least one
/// segment, and an event id (when given) of 1 to [`MAX_EVENT_ID_CHARS`]
/// characters.
pub fn check_send(
    piece: &str,
    stream: &[PathSegment],
    event_id: Option<&str>,
) -> Result<(), RuleViolation> {
    if piece.is_empty() {
        return Err(RuleViolation {
            field: "piece",
            reason: "`piece` must not be empty".into(),
        });
    }
    if stream.is_empty() {
        return Err(RuleViolation {
            field: "stream",
            reason: "`stream` must name a path with at least one segment".into(),
        });
    }
    if let Some(e) = event_id {
        let n = e.chars().count();
        if n == 0 || n > MAX_EVENT_ID_CHARS {
            return Err(RuleViolation {
                field: "eventId",
                reason: format!("`eventId` must be 1 to {MAX_EVENT_ID_CHARS} characters (got {n})"),
            });
        }
    }
    Ok(())
}

/// A message that parsed but breaks a rule of its type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct RuleViolation {
    /// The wire name of the field at fault.
    pub field: &'static str,
    /// A sentence naming the field and the rule.
    pub reason: String,
}

// ---------------------------------------------------------------- server → client

/// A message from server to client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ServerMessage {
    Challenge(Challenge),
    Opened(Opened),
    Ack(Ack),
    Value(ValueReply),
    Deployed(Deployed),
    Pong(Pong),
    Update(Update),
    Error(ErrorReply),
}

/// Sent by the server as soon as the WebSocket is up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Challenge {
    /// Fresh per connection: 32 random bytes, unpadded base64url.
    pub nonce: String,
    /// Always [`PROTOCOL_VERSION`].
    pub protocol: String,
}

impl Challenge {
    pub fn new(nonce: String) -> Self {
        Self {
            nonce,
            protocol: PROTOCOL_VERSION.to_string(),
        }
    }
}

/// The session is open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Opened {
    /// Server-chosen session id (for logs and support, not a credential).
    pub session: String,
    pub space: String,
    pub access: Access,
    /// The space's latest committed seq when the session opened.
    pub head_seq: Seq,
}

/// A request succeeded; `seq` is the commit it produced or observed, if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ack {
    pub id: RequestId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<Seq>,
    /// Only in the answer to `send`: whether the event id was already
    /// stored (then nothing was appended, and `seq` is the commit that
    /// first appended it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate: Option<bool>,
}

/// The answer to `read`: the value as of commit `seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValueReply {
    pub id: RequestId,
    pub value: Json,
    pub seq: Seq,
}

/// The answer to `deploy`: the new piece's id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Deployed {
    pub id: RequestId,
    pub piece: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pong {
    pub id: RequestId,
}

/// Server-pushed: the tracked value at `path` of `piece` changed in commit `seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Update {
    pub seq: Seq,
    pub piece: String,
    pub path: Vec<PathSegment>,
    pub value: Json,
}

/// A request (or frame) failed. `id` is present whenever the failing frame
/// carried a readable id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorReply {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<RequestId>,
    pub code: ErrorCode,
    /// A human sentence; not for matching (match on `code`).
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Json>,
}

impl ServerMessage {
    /// Every `type` the server may send.
    pub const TYPES: &'static [&'static str] = &[
        "challenge",
        "opened",
        "ack",
        "value",
        "deployed",
        "pong",
        "update",
        "error",
    ];

    pub fn type_name(&self) -> &'static str {
        match self {
            ServerMessage::Challenge(_) => "challenge",
            ServerMessage::Opened(_) => "opened",
            ServerMessage::Ack(_) => "ack",
            ServerMessage::Value(_) => "value",
            ServerMessage::Deployed(_) => "deployed",
            ServerMessage::Pong(_) => "pong",
            ServerMessage::Update(_) => "update",
            ServerMessage::Error(_) => "error",
        }
    }

    /// The request id this message answers, if it is a reply.
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            ServerMessage::Ack(m) => Some(&m.id),
            ServerMessage::Value(m) => Some(&m.id),
            ServerMessage::Deployed(m) => Some(&m.id),
            ServerMessage::Pong(m) => Some(&m.id),
            ServerMessage::Error(m) => m.id.as_ref(),
            ServerMessage::Challenge(_) | ServerMessage::Opened(_) | ServerMessage::Update(_) => {
                None
            }
        }
    }

    /// The JSON text of this message, ready for a text frame.
    pub fn to_text(&self) -> String {
        // Serializing these types cannot fail: every map key is a string and
        // there are no non-finite floats outside `Json` values (which cannot
        // hold them).
        serde_json::to_string(self).expect("server messages always serialize")
    }
}

/// Stable, machine-matchable error codes. The spec lists when each occurs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ErrorCode {
    /// A binary (or other non-text) frame: the protocol is JSON text only.
    BinaryFrame,
    /// A text frame over [`super::frames::MAX_FRAME_BYTES`].
    FrameTooLarge,
    /// The frame is not JSON, or not a JSON object.
    BadJson,
    /// `type` is missing, not a string, or not a client message type.
    UnknownType,
    /// A known type with a missing, extra or wrongly typed field.
    BadMessage,
    /// A message other than `open` before the session is open.
    NotOpen,
    /// A second `open` on an open session.
    AlreadyOpen,
    /// The open signature (or its did) is malformed or does not verify.
    BadSignature,
    /// The session's access does not allow this message, or the did has no
    /// grant on the space.
    Forbidden,
    UnknownPiece,
    UnknownStream,
    /// A deployed pattern failed to compile or validate.
    InvalidPattern,
    /// A deploy's argument does not fit the pattern's argument type
    /// (`details: {path, expected, got}`).
    InvalidArgument,
    /// The space does not exist on this host (and `open` did not ask to
    /// create it), or its id is not a valid space id.
    UnknownSpace,
    /// A server-side failure; the request may be retried.
    Internal,
    /// The host is at its limit of active spaces; retry shortly.
    Overloaded,
    /// The space failed to activate and is retried with back-off; retry
    /// after `details.retryInMs`.
    BackingOff,
    /// Another host holds the space's lease; retry after
    /// `details.retryInMs` (when the lease can expire).
    HeldElsewhere,
    /// The space's server stopped before answering, or the host is
    /// shutting down; reconnect and retry.
    Unavailable,
    /// `open` asked to create a space, and the identity already owns as
    /// many as the host allows (`details: {limit, owned}`).
    QuotaExceeded,
}

impl ErrorCode {
    pub const ALL: &'static [ErrorCode] = &[
        ErrorCode::BinaryFrame,
        ErrorCode::FrameTooLarge,
        ErrorCode::BadJson,
        ErrorCode::UnknownType,
        ErrorCode::BadMessage,
        ErrorCode::NotOpen,
        ErrorCode::AlreadyOpen,
        ErrorCode::BadSignature,
        ErrorCode::Forbidden,
        ErrorCode::UnknownPiece,
        ErrorCode::UnknownStream,
        ErrorCode::InvalidPattern,
        ErrorCode::InvalidArgument,
        ErrorCode::UnknownSpace,
        ErrorCode::Internal,
        ErrorCode::Overloaded,
        ErrorCode::BackingOff,
        ErrorCode::HeldElsewhere,
        ErrorCode::Unavailable,
        ErrorCode::QuotaExceeded,
    ];

    /// The camelCase wire spelling (also the counter label).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BinaryFrame => "binaryFrame",
            ErrorCode::FrameTooLarge => "frameTooLarge",
            ErrorCode::BadJson => "badJson",
            ErrorCode::UnknownType => "unknownType",
            ErrorCode::BadMessage => "badMessage",
            ErrorCode::NotOpen => "notOpen",
            ErrorCode::AlreadyOpen => "alreadyOpen",
            ErrorCode::BadSignature => "badSignature",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::UnknownPiece => "unknownPiece",
            ErrorCode::UnknownStream => "unknownStream",
            ErrorCode::InvalidPattern => "invalidPattern",
            ErrorCode::InvalidArgument => "invalidArgument",
            ErrorCode::UnknownSpace => "unknownSpace",
            ErrorCode::Internal => "internal",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::BackingOff => "backingOff",
            ErrorCode::HeldElsewhere => "heldElsewhere",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::QuotaExceeded => "quotaExceeded",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
pub(crate) mod examples {
    //! One or more example of every message type, shared by the round-trip,
    //! schema and fuzz tests. Together the examples of a type use every field
    //! the type has (the schema test checks this).
    use super::*;
    use serde_json::json;

    pub fn client() -> Vec<ClientMessage> {
        vec![
            ClientMessage::Open(Open {
                space: "home".into(),
                did: "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK".into(),
                signature: "c2ln".into(),
                resume: None,
                create: None,
            }),
            ClientMessage::Open(Open {
                space: "home".into(),
                did: "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK".into(),
                signature: "c2ln".into(),
                resume: Some(Resume { seq: 41 }),
                create: Some(true),
            }),
            ClientMessage::Track(Track {
                id: 1.into(),
                piece: "counter-1".into(),
                path: None,
                since: None,
            }),
            ClientMessage::Track(Track {
                id: "t2".into(),
                piece: "feed".into(),
                path: Some(vec!["items".into(), 0.into(), "title".into()]),
                since: Some(41),
            }),
            ClientMessage::Untrack(Untrack {
                id: 3.into(),
                piece: "feed".into(),
                path: Some(vec!["items".into()]),
            }),
            ClientMessage::Untrack(Untrack {
                id: 3.into(),
                piece: "feed".into(),
                path: None,
            }),
            ClientMessage::Send(SendEvent {
                id: 4.into(),
                piece: "counter-1".into(),
                stream: vec!["increment".into()],
                payload: json!({}),
                event_id: None,
            }),
            ClientMessage::Send(SendEvent {
                id: 5.into(),
                piece: "counter-1".into(),
                stream: vec!["increment".into()],
                payload: json!({"by": 2}),
                event_id: Some("evt-7f3a".into()),
            }),
            ClientMessage::Read(ReadValue {
                id: 6.into(),
                piece: Some("counter-1".into()),
                doc: None,
                path: Some(vec!["value".into()]),
            }),
            ClientMessage::Read(ReadValue {
                id: 7.into(),
                piece: None,
                doc: Some("doc:settings".into()),
                path: None,
            }),
            ClientMessage::Deploy(Deploy {
                id: 8.into(),
                entry: "counter.tsx".into(),
                files: BTreeMap::from([(
                    "counter.tsx".to_string(),
                    "export default pattern(() => ({}));".to_string(),
                )]),
                export: Some("counter".into()),
                argument: Some(json!({"value": 0})),
            }),
            ClientMessage::Deploy(Deploy {
                id: 9.into(),
                entry: "main.tsx".into(),
                files: BTreeMap::from([("main.tsx".to_string(), String::new())]),
                export: None,
                argument: None,
            }),
            ClientMessage::Ping(Ping { id: 10.into() }),
            ClientMessage::Delete(DeletePiece {
                id: 11.into(),
                piece: "pc-0123456789abcdef".into(),
            }),
        ]
    }

    pub fn server() -> Vec<ServerMessage> {
        vec![
            ServerMessage::Challenge(Challenge::new(
                "q5pB9S3n0rRzq6r3Qh9cJmZkT1vW2xY4aB7cD8eF0gH".into(),
            )),
            ServerMessage::Opened(Opened {
                session: "s-01".into(),
                space: "home".into(),
                access: Access::Write,
                head_seq: 42,
            }),
            ServerMessage::Ack(Ack {
                id: 1.into(),
                seq: None,
                duplicate: None,
            }),
            ServerMessage::Ack(Ack {
                id: 4.into(),
                seq: Some(43),
                duplicate: Some(false),
            }),
            ServerMessage::Value(ValueReply {
                id: 6.into(),
                value: json!(1),
                seq: 43,
            }),
            ServerMessage::Deployed(Deployed {
                id: 8.into(),
                piece: "counter-1".into(),
            }),
            ServerMessage::Pong(Pong { id: 10.into() }),
            ServerMessage::Update(Update {
                seq: 44,
                piece: "counter-1".into(),
                path: vec!["value".into()],
                value: json!(2),
            }),
            ServerMessage::Error(ErrorReply {
                id: None,
                code: ErrorCode::NotOpen,
                message: "the session is not open: send `open` first".into(),
                details: None,
            }),
            ServerMessage::Error(ErrorReply {
                id: Some(5.into()),
                code: ErrorCode::Forbidden,
                message: "READ access cannot send events".into(),
                details: Some(json!({"required": "write", "granted": "read"})),
            }),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn client_examples_round_trip_and_validate() {
        for msg in examples::client() {
            let text = serde_json::to_string(&msg).unwrap();
            let back: ClientMessage = serde_json::from_str(&text).unwrap();
            assert_eq!(back, msg, "{text}");
            msg.validate().unwrap();
        }
    }

    #[test]
    fn server_examples_round_trip() {
        for msg in examples::server() {
            let text = msg.to_text();
            let back: ServerMessage = serde_json::from_str(&text).unwrap();
            assert_eq!(back, msg, "{text}");
        }
    }

    #[test]
    fn wire_spelling_is_camel_case() {
        let open = serde_json::to_value(&examples::server()[1]).unwrap();
        assert_eq!(
            open,
            json!({"type": "opened", "session": "s-01", "space": "home",
                   "access": "write", "headSeq": 42})
        );
        let send = serde_json::to_value(&examples::client()[7]).unwrap();
        assert_eq!(send["eventId"], "evt-7f3a");
        assert_eq!(send["type"], "send");
        for code in ErrorCode::ALL {
            assert_eq!(serde_json::to_value(code).unwrap(), json!(code.as_str()));
        }
    }

    #[test]
    fn type_lists_match_variants() {
        let client: Vec<_> = examples::client().iter().map(|m| m.type_name()).collect();
        for t in ClientMessage::TYPES {
            assert!(client.contains(t), "no example of {t}");
        }
        let server: Vec<_> = examples::server().iter().map(|m| m.type_name()).collect();
        for t in ServerMessage::TYPES {
            assert!(server.contains(t), "no example of {t}");
        }
    }

    #[test]
    fn ids_and_path_segments() {
        let id: RequestId = serde_json::from_value(json!(-3)).unwrap();
        assert_eq!(id, RequestId::Int(-3));
        assert!(serde_json::from_value::<RequestId>(json!(1.5)).is_err());
        assert!(serde_json::from_value::<RequestId>(json!(u64::MAX)).is_err());
        assert!(serde_json::from_value::<RequestId>(json!("x".repeat(300))).is_err());
        let err = serde_json::from_value::<RequestId>(json!(null)).unwrap_err();
        assert!(err.to_string().contains("request id"), "{err}");
        let seg: PathSegment = serde_json::from_value(json!(2)).unwrap();
        assert_eq!(seg, PathSegment::Index(2));
        assert!(serde_json::from_value::<PathSegment>(json!(-1)).is_err());
        assert!(serde_json::from_value::<PathSegment>(json!(true)).is_err());
        assert_eq!(
            display_path(&["items".into(), 0.into(), "title".into()]),
            "items.0.title"
        );
    }

    #[test]
    fn access_rules() {
        assert!(Access::Owner.allows(Access::Write));
        assert!(Access::Write.allows(Access::Read));
        assert!(!Access::Read.allows(Access::Write));
        for msg in examples::client() {
            let expected = match msg {
                ClientMessage::Send(_) | ClientMessage::Deploy(_) => Access::Write,
                ClientMessage::Delete(_) => Access::Owner,
                _ => Access::Read,
            };
            assert_eq!(msg.required_access(), expected);
        }
    }

    #[test]
    fn validation_catches_what_serde_cannot() {
        let read = |v| {
            serde_json::from_value::<ClientMessage>(v)
                .unwrap()
                .validate()
        };
        assert!(read(json!({"type": "read", "id": 1})).is_err());
        assert!(read(json!({"type": "read", "id": 1, "piece": "a", "doc": "b"})).is_err());
        assert!(
            read(json!({"type": "send", "id": 1, "piece": "a", "stream": [], "payload": 1}))
                .unwrap_err()
                .field
                == "stream"
        );
        assert!(
            read(json!({"type": "deploy", "id": 1, "entry": "a.tsx", "files": {}}))
                .unwrap_err()
                .reason
                .contains("entry")
        );
    }
}
