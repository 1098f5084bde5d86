//! Turning an incoming WebSocket frame into a [`ClientMessage`], or into a
//! [`ProtocolError`] with a stable [`ErrorCode`] and a human sentence.
//!
//! Invariants:
//! - [`parse_client_frame`] never panics, whatever the bytes; every failure
//!   becomes an error whose code says which check failed, in this order:
//!   frame kind (`binaryFrame`), size (`frameTooLarge`), JSON syntax and shape
//!   (`badJson`), `type` (`unknownType`), fields (`badMessage`).
//! - An error carries the frame's `id` whenever one could be read, so the
//!   client can match the error to its request even when the rest of the
//!   message was bad.
//! - Work per frame is bounded: size is checked before parsing, serde_json
//!   caps nesting depth at 128, and the extra work to name a bad field is
//!   skipped for objects with many keys.
//! - Session-level checks the connection loop needs (open first, once;
//!   access level) live here too, so every session applies the same rules and
//!   words its errors the same way.

use serde_json::{Map, Value as Json};

use super::auth::AuthError;
use super::messages::{Access, ClientMessage, ErrorCode, ErrorReply, RequestId, ServerMessage};

/// Largest accepted text frame, in bytes: 1 MiB.
///
/// Why this number: the largest legitimate message is a `deploy` carrying a
/// pattern's sources, and 1 MiB holds far more TypeScript than a pattern
/// plausibly needs, while keeping the memory one frame can make the server
/// hold (the text plus its parsed JSON tree, a small multiple of the text)
/// bounded per session, so a thousand sessions cannot exhaust the host.
pub const MAX_FRAME_BYTES: usize = 1 << 20;

/// The limit of a `deploy` frame alone: a program's sources with the data
/// files it attaches (`dataFile`, each up to 4 MiB: a word list, a
/// gazetteer). Only a frame that parses and says `"type": "deploy"` may be
/// this large; deploys come from owners and writers, not from every session.
pub const MAX_DEPLOY_FRAME_BYTES: usize = 8 << 20;

/// The message-size limit to give the WebSocket library (16 MiB). It is set
/// above [`MAX_FRAME_BYTES`] on purpose: a frame between the two limits
/// reaches [`parse_client_frame`] and is answered with a `frameTooLarge`
/// error frame, and the session stays open. Only frames beyond this
/// transport limit make the library drop the connection (close code 1009).
pub const TRANSPORT_MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Objects with more keys than this skip the search for the offending field
/// (which re-parses once per key); no client message has more than 7 fields.
const MAX_KEYS_TO_BLAME: usize = 16;
/// Longest `message` in an error, in characters.
pub const MAX_MESSAGE_CHARS: usize = 1024;
/// Quoted input in error messages is cut to this many characters.
const QUOTE_CHARS: usize = 80;

/// An incoming WebSocket frame, independent of the WebSocket library.
/// Control frames (ping, pong, close) are the connection loop's business;
/// anything else that is not text is `Other`.
#[derive(Debug, Clone, Copy)]
pub enum Frame<'a> {
    Text(&'a str),
    Binary(&'a [u8]),
    /// Any other frame kind, named for the error message.
    Other(&'a str),
}

/// A rejected frame or request, ready to be sent as an `error` message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ProtocolError {
    pub code: ErrorCode,
    pub message: String,
    pub id: Option<RequestId>,
    pub details: Option<Json>,
}

impl ProtocolError {
    /// `message` is cut to [`MAX_MESSAGE_CHARS`]: serde errors quote input
    /// (an unknown field's name, say), and an error frame must stay small.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let mut message: String = message.into();
        if message.chars().count() > MAX_MESSAGE_CHARS {
            message = message.chars().take(MAX_MESSAGE_CHARS).collect::<String>() + "…";
        }
        Self {
            code,
            message,
            id: None,
            details: None,
        }
    }

    pub fn with_id(mut self, id: Option<RequestId>) -> Self {
        self.id = id;
        self
    }

    pub fn with_details(mut self, details: Json) -> Self {
        self.details = Some(details);
        self
    }

    /// The `error` message to send back.
    pub fn to_server_message(&self) -> ServerMessage {
        ServerMessage::Error(ErrorReply {
            id: self.id.clone(),
            code: self.code,
            message: self.message.clone(),
            details: self.details.clone(),
        })
    }
}

impl From<ProtocolError> for ServerMessage {
    fn from(e: ProtocolError) -> Self {
        ServerMessage::Error(ErrorReply {
            id: e.id,
            code: e.code,
            message: e.message,
            details: e.details,
        })
    }
}

impl From<AuthError> for ProtocolError {
    fn from(e: AuthError) -> Self {
        ProtocolError::bad_signature(&e, "session not opened")
    }
}

impl From<super::messages::RuleViolation> for ProtocolError {
    fn from(v: super::messages::RuleViolation) -> Self {
        ProtocolError::new(ErrorCode::BadMessage, v.reason)
            .with_details(serde_json::json!({ "field": v.field }))
    }
}

impl ProtocolError {
    /// A refused signature: `badSignature`, the reason in `details.reason`,
    /// the sentence after `what` (`session not opened`, `request refused`).
    pub fn bad_signature(e: &AuthError, what: &str) -> ProtocolError {
        let reason = match e {
            AuthError::MalformedDid(_) => "malformedDid",
            AuthError::MalformedSignature(_) => "malformedSignature",
            AuthError::SignatureMismatch(_) => "signatureMismatch",
        };
        ProtocolError::new(ErrorCode::BadSignature, format!("{what}: {e}"))
            .with_details(serde_json::json!({ "reason": reason }))
    }
}

/// Parses one incoming frame into a client message.
pub fn parse_client_frame(frame: Frame<'_>) -> Result<ClientMessage, ProtocolError> {
    let text = match frame {
        Frame::Text(text) => text,
        Frame::Binary(bytes) => {
            return Err(ProtocolError::new(
                ErrorCode::BinaryFrame,
                format!(
                    "got a binary frame of {} bytes; this protocol uses JSON text frames only",
                    bytes.len()
                ),
            ))
        }
        Frame::Other(kind) => {
            return Err(ProtocolError::new(
                ErrorCode::BinaryFrame,
                format!(
                    "got a {} frame; this protocol uses JSON text frames only",
                    quote(kind)
                ),
            ))
        }
    };
    let too_large = |limit: usize, what: &str| {
        ProtocolError::new(
            ErrorCode::FrameTooLarge,
            format!(
                "frame is {} bytes; the limit is {limit} bytes ({what})",
                text.len()
            ),
        )
        .with_details(serde_json::json!({ "size": text.len(), "limit": limit }))
    };
    if text.len() > MAX_DEPLOY_FRAME_BYTES {
        return Err(too_large(MAX_DEPLOY_FRAME_BYTES, "8 MiB, for a deploy"));
    }
    let value: Json = serde_json::from_str(text).map_err(|e| {
        if text.len() > MAX_FRAME_BYTES {
            return too_large(MAX_FRAME_BYTES, "1 MiB");
        }
        ProtocolError::new(ErrorCode::BadJson, format!("frame is not valid JSON: {e}"))
    })?;
    if text.len() > MAX_FRAME_BYTES && value.get("type").and_then(Json::as_str) != Some("deploy") {
        return Err(too_large(MAX_FRAME_BYTES, "1 MiB"));
    }
    let Json::Object(object) = value else {
        return Err(ProtocolError::new(
            ErrorCode::BadJson,
            format!(
                "a frame must be a JSON object with a `type` field; got {}",
                kind_of(&value)
            ),
        ));
    };
    // Read the id first so every later error can be matched to its request.
    let id = object
        .get("id")
        .and_then(|v| serde_json::from_value::<RequestId>(v.clone()).ok());
    let type_name = match object.get("type") {
        None => {
            return Err(ProtocolError::new(
                ErrorCode::UnknownType,
                format!(
                    "message has no `type` field; expected one of {}",
                    ClientMessage::TYPES.join(", ")
                ),
            )
            .with_id(id))
        }
        Some(Json::String(t)) if ClientMessage::TYPES.contains(&t.as_str()) => t.clone(),
        Some(other) => {
            let raw = match other {
                Json::String(t) => t.clone(),
                v => v.to_string(),
            };
            let shown = quote(&raw);
            let raw: String = raw.chars().take(QUOTE_CHARS).collect();
            return Err(ProtocolError::new(
                ErrorCode::UnknownType,
                format!(
                    "unknown message type {shown}; expected one of {}",
                    ClientMessage::TYPES.join(", ")
                ),
            )
            .with_id(id)
            .with_details(serde_json::json!({ "type": raw })));
        }
    };
    let blame_input = (object.len() <= MAX_KEYS_TO_BLAME).then(|| object.clone());
    let message = serde_json::from_value::<ClientMessage>(Json::Object(object)).map_err(|e| {
        let field = named_field(&e.to_string()).or_else(|| {
            blame_input
                .as_ref()
                .and_then(|o| blame_field(o, &e.to_string()))
        });
        let message = match &field {
            Some(f) if !e.to_string().contains("field `") => {
                format!("bad `{type_name}` message: field `{f}`: {e}")
            }
            _ => format!("bad `{type_name}` message: {e}"),
        };
        let err = ProtocolError::new(ErrorCode::BadMessage, message).with_id(id.clone());
        match field {
            Some(f) => err.with_details(serde_json::json!({ "field": f })),
            None => err,
        }
    })?;
    message.validate().map_err(|v| {
        ProtocolError::new(
            ErrorCode::BadMessage,
            format!("bad `{type_name}` message: {}", v.reason),
        )
        .with_id(id.clone())
        .with_details(serde_json::json!({ "field": v.field }))
    })?;
    Ok(message)
}

/// The field serde names in its own message ("unknown field `x`", "missing
/// field `x`", "duplicate field `x`").
fn named_field(serde_message: &str) -> Option<String> {
    let rest = &serde_message[serde_message.find("field `")? + "field `".len()..];
    Some(rest[..rest.find('`')?].to_string())
}

/// Finds which top-level field a serde error is about when the error does not
/// say ("invalid type: string, expected u64"). serde's derived visitor stops
/// at the first bad field it meets, and reports missing fields only after the
/// whole object, so the culprit is the first key whose removal changes the
/// error; removing a healthy field leaves the same error in place.
fn blame_field(object: &Map<String, Json>, original: &str) -> Option<String> {
    if original.contains("field `") {
        // serde already names it (unknown, missing or duplicate field).
        return None;
    }
    object
        .keys()
        .filter(|k| k.as_str() != "type")
        .find(|key| {
            let mut without = object.clone();
            without.remove(key.as_str());
            match serde_json::from_value::<ClientMessage>(Json::Object(without)) {
                Ok(_) => true,
                Err(e) => e.to_string() != original,
            }
        })
        .cloned()
}

/// Enforces the session's first rule: `open` first, and only once.
pub fn check_phase(session_open: bool, message: &ClientMessage) -> Result<(), ProtocolError> {
    let is_open_message = matches!(message, ClientMessage::Open(_));
    match (session_open, is_open_message) {
        (false, true) | (true, false) => Ok(()),
        (false, false) => Err(ProtocolError::new(
            ErrorCode::NotOpen,
            format!(
                "the session is not open: send `open` (signed challenge) before `{}`",
                message.type_name()
            ),
        )
        .with_id(message.id().cloned())),
        (true, true) => Err(ProtocolError::new(
            ErrorCode::AlreadyOpen,
            "the session is already open; a connection opens one session",
        )),
    }
}

/// Refuses a message the session's access level does not allow.
pub fn check_access(granted: Access, message: &ClientMessage) -> Result<(), ProtocolError> {
    let needed = message.required_access();
    if granted.allows(needed) {
        return Ok(());
    }
    Err(ProtocolError::new(
        ErrorCode::Forbidden,
        format!(
            "`{}` needs {} access; this session has {} access",
            message.type_name(),
            needed.as_str().to_uppercase(),
            granted.as_str().to_uppercase()
        ),
    )
    .with_id(message.id().cloned())
    .with_details(serde_json::json!({ "required": needed, "granted": granted })))
}

fn kind_of(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// Quotes untrusted text for an error message, cut short so an error frame
/// never echoes a large input.
fn quote(s: &str) -> String {
    if s.chars().count() <= QUOTE_CHARS {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(QUOTE_CHARS).collect();
        format!("{head:?}…")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::messages::examples;
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use serde_json::json;

    fn parse(text: &str) -> Result<ClientMessage, ProtocolError> {
        parse_client_frame(Frame::Text(text))
    }

    fn code(text: &str) -> ErrorCode {
        parse(text).unwrap_err().code
    }

    #[test]
    fn valid_examples_parse() {
        for msg in examples::client() {
            let text = serde_json::to_string(&msg).unwrap();
            assert_eq!(parse(&text).unwrap(), msg);
        }
    }

    #[test]
    fn frame_kind_and_size() {
        assert_eq!(
            parse_client_frame(Frame::Binary(b"{}")).unwrap_err().code,
            ErrorCode::BinaryFrame
        );
        assert_eq!(
            parse_client_frame(Frame::Other("continuation"))
                .unwrap_err()
                .code,
            ErrorCode::BinaryFrame
        );
        let huge = format!(
            r#"{{"type":"ping","id":1,"x":"{}"}}"#,
            "a".repeat(MAX_FRAME_BYTES)
        );
        let err = parse(&huge).unwrap_err();
        assert_eq!(err.code, ErrorCode::FrameTooLarge);
        assert!(err.message.contains("1048576"), "{}", err.message);
        // A deploy may be larger (its data files), up to its own limit.
        let deploy = |n: usize| {
            format!(
                r#"{{"type":"deploy","id":1,"entry":"p.tsx","files":{{"p.tsx":"{}"}}}}"#,
                "a".repeat(n)
            )
        };
        assert_ne!(
            parse(&deploy(2 * MAX_FRAME_BYTES)).map_err(|e| e.code),
            Err(ErrorCode::FrameTooLarge)
        );
        let err = parse(&deploy(MAX_DEPLOY_FRAME_BYTES)).unwrap_err();
        assert_eq!(err.code, ErrorCode::FrameTooLarge);
        assert!(err.message.contains("8388608"), "{}", err.message);
        // Not JSON and over 1 MiB: too large, whatever it says.
        let err = parse(&format!("{{{}", "a".repeat(MAX_FRAME_BYTES))).unwrap_err();
        assert_eq!(err.code, ErrorCode::FrameTooLarge);
        // Exactly at the limit is fine as far as size goes.
        let pad = MAX_FRAME_BYTES - r#"{"type":"ping","id":""}"#.len();
        let at_limit = format!(r#"{{"type":"ping","id":"{}"}}"#, " ".repeat(pad));
        assert_eq!(at_limit.len(), MAX_FRAME_BYTES);
        assert_ne!(code(&at_limit), ErrorCode::FrameTooLarge);
    }

    #[test]
    fn json_errors() {
        assert_eq!(code("{"), ErrorCode::BadJson);
        assert_eq!(code(""), ErrorCode::BadJson);
        assert_eq!(code("[1,2]"), ErrorCode::BadJson);
        assert_eq!(code("\"ping\""), ErrorCode::BadJson);
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(code(&deep), ErrorCode::BadJson);
    }

    #[test]
    fn type_errors_name_the_type() {
        let err = parse(r#"{"id": 1}"#).unwrap_err();
        assert_eq!(err.code, ErrorCode::UnknownType);
        assert_eq!(err.id, Some(RequestId::Int(1)));
        let err = parse(r#"{"type": "warm", "id": "w", "pieces": []}"#).unwrap_err();
        assert_eq!(err.code, ErrorCode::UnknownType);
        assert!(err.message.contains("\"warm\""), "{}", err.message);
        assert_eq!(err.details, Some(json!({"type": "warm"})));
        assert_eq!(err.id, Some(RequestId::Text("w".into())));
        let err = parse(r#"{"type": 7}"#).unwrap_err();
        assert_eq!(err.code, ErrorCode::UnknownType);
        assert!(err.message.contains('7'), "{}", err.message);
        // Server message types are not client message types.
        assert_eq!(code(r#"{"type": "pong", "id": 1}"#), ErrorCode::UnknownType);
    }

    #[test]
    fn field_errors_name_the_field() {
        let cases = [
            (r#"{"type":"track","id":1}"#, "piece"),
            (r#"{"type":"track","id":1,"piece":"p","sinse":3}"#, "sinse"),
            (
                r#"{"type":"track","id":1,"piece":"p","since":"3"}"#,
                "since",
            ),
            (r#"{"type":"track","id":1,"piece":7}"#, "piece"),
            (
                r#"{"type":"track","id":1,"piece":"p","path":[true]}"#,
                "path",
            ),
            (
                r#"{"type":"open","space":"s","did":"d","signature":"x","resume":{"seq":-1}}"#,
                "resume",
            ),
            (
                r#"{"type":"send","id":1,"piece":"p","stream":["inc"]}"#,
                "payload",
            ),
            (r#"{"type":"ping","id":{"a":1}}"#, "id"),
            (r#"{"type":"read","id":1}"#, "piece"),
            (
                r#"{"type":"deploy","id":1,"entry":"a.tsx","files":{"b.tsx":""}}"#,
                "entry",
            ),
        ];
        for (text, field) in cases {
            let err = parse(text).unwrap_err();
            assert_eq!(err.code, ErrorCode::BadMessage, "{text}");
            assert!(
                err.message.contains(&format!("`{field}`")),
                "{text}: {}",
                err.message
            );
            assert_eq!(
                err.details.as_ref().map(|d| &d["field"]),
                Some(&json!(field)),
                "{text}"
            );
        }
        // The id survives a bad message so the client can match the error.
        assert_eq!(
            parse(r#"{"type":"track","id":"abc"}"#).unwrap_err().id,
            Some(RequestId::Text("abc".into()))
        );
    }

    #[test]
    fn phase_rules() {
        let msgs = examples::client();
        let open = &msgs[0];
        let ping = msgs.last().unwrap();
        assert!(check_phase(false, open).is_ok());
        assert!(check_phase(true, ping).is_ok());
        let err = check_phase(false, ping).unwrap_err();
        assert_eq!(err.code, ErrorCode::NotOpen);
        assert_eq!(err.id, ping.id().cloned());
        assert_eq!(
            check_phase(true, open).unwrap_err().code,
            ErrorCode::AlreadyOpen
        );
    }

    #[test]
    fn access_is_enforced() {
        for msg in examples::client() {
            let read = check_access(Access::Read, &msg);
            match msg {
                ClientMessage::Send(_) | ClientMessage::Deploy(_) => {
                    let err = read.unwrap_err();
                    assert_eq!(err.code, ErrorCode::Forbidden);
                    assert!(err.message.contains("WRITE"), "{}", err.message);
                    assert_eq!(err.id, msg.id().cloned());
                    check_access(Access::Write, &msg).unwrap();
                }
                ClientMessage::Delete(_) => {
                    read.unwrap_err();
                    let err = check_access(Access::Write, &msg).unwrap_err();
                    assert_eq!(err.code, ErrorCode::Forbidden);
                    assert!(err.message.contains("OWNER"), "{}", err.message);
                }
                _ => {
                    read.unwrap();
                    check_access(Access::Write, &msg).unwrap();
                }
            }
            check_access(Access::Owner, &msg).unwrap();
        }
    }

    #[test]
    fn auth_errors_become_bad_signature() {
        let err: ProtocolError =
            AuthError::SignatureMismatch(super::super::auth::SIGNED_FOR_OPEN).into();
        assert_eq!(err.code, ErrorCode::BadSignature);
        let wire = serde_json::to_value(err.to_server_message()).unwrap();
        assert_eq!(wire["type"], "error");
        assert_eq!(wire["code"], "badSignature");
        assert_eq!(wire["details"]["reason"], "signatureMismatch");
    }

    // ------------------------------------------------------------ fuzz

    fn random_string(rng: &mut StdRng) -> String {
        let len = rng.random_range(0..12);
        (0..len)
            .map(|_| match rng.random_range(0..4) {
                0 => rng.random_range(b'a'..=b'z') as char,
                1 => char::from_u32(rng.random_range(0..0x11_0000)).unwrap_or('?'),
                2 => ['"', '\\', '{', '}', ':', '\0'][rng.random_range(0..6)],
                _ => rng.random_range(b'0'..=b'9') as char,
            })
            .collect()
    }

    pub(crate) fn random_json(rng: &mut StdRng, depth: u32) -> Json {
        let leaf = depth == 0 || rng.random_bool(0.4);
        match rng.random_range(0..if leaf { 5 } else { 7 }) {
            0 => Json::Null,
            1 => Json::Bool(rng.random()),
            2 => match rng.random_range(0..3) {
                0 => json!(rng.random::<i64>()),
                1 => json!(rng.random::<u64>()),
                _ => json!(rng.random::<f64>() * 1e6),
            },
            3 => Json::String(random_string(rng)),
            4 => {
                let types = ClientMessage::TYPES;
                Json::String(types[rng.random_range(0..types.len())].to_string())
            }
            5 => Json::Array(
                (0..rng.random_range(0..4))
                    .map(|_| random_json(rng, depth - 1))
                    .collect(),
            ),
            _ => {
                let keys = [
                    "type", "id", "piece", "path", "since", "space", "payload", "x",
                ];
                Json::Object(
                    (0..rng.random_range(0..5))
                        .map(|_| {
                            let k = if rng.random_bool(0.7) {
                                keys[rng.random_range(0..keys.len())].to_string()
                            } else {
                                random_string(rng)
                            };
                            (k, random_json(rng, depth - 1))
                        })
                        .collect(),
                )
            }
        }
    }

    pub(crate) fn mutate(rng: &mut StdRng, msg: &ClientMessage) -> String {
        let Json::Object(mut obj) = serde_json::to_value(msg).unwrap() else {
            unreachable!()
        };
        let keys: Vec<String> = obj.keys().cloned().collect();
        match rng.random_range(0..6) {
            0 => {
                obj.remove(&keys[rng.random_range(0..keys.len())]);
            }
            1 => {
                obj.insert(random_string(rng), random_json(rng, 2));
            }
            2 => {
                let k = &keys[rng.random_range(0..keys.len())];
                obj.insert(k.clone(), random_json(rng, 2));
            }
            3 => {
                obj.insert("type".into(), random_json(rng, 1));
            }
            4 => {
                // Byte-level damage to the JSON text.
                let mut bytes = Json::Object(obj).to_string().into_bytes();
                for _ in 0..rng.random_range(1..4) {
                    let i = rng.random_range(0..bytes.len());
                    bytes[i] = rng.random();
                }
                return String::from_utf8_lossy(&bytes).into_owned();
            }
            _ => {
                let mut text = Json::Object(obj).to_string();
                text.truncate(rng.random_range(0..text.len()));
                return text;
            }
        }
        Json::Object(obj).to_string()
    }

    /// 10,000 random frames: never a panic; always a message (that
    /// validates and round-trips) or an error with a known code and a
    /// sentence, which serializes to a valid `error` message.
    #[test]
    fn fuzz_random_frames() {
        let mut rng = StdRng::seed_from_u64(0x5ace_3a4e);
        let valid = examples::client();
        let mut seen_codes = std::collections::BTreeSet::new();
        let mut ok = 0;
        for i in 0..10_000 {
            let kind = rng.random_range(0..100);
            let outcome = match kind {
                0..=9 => {
                    let bytes: Vec<u8> =
                        (0..rng.random_range(0..64)).map(|_| rng.random()).collect();
                    parse_client_frame(Frame::Binary(&bytes))
                }
                10..=29 => {
                    let bytes: Vec<u8> =
                        (0..rng.random_range(0..64)).map(|_| rng.random()).collect();
                    parse(&String::from_utf8_lossy(&bytes))
                }
                30..=59 => parse(&random_json(&mut rng, 4).to_string()),
                60..=98 => {
                    let base = &valid[rng.random_range(0..valid.len())];
                    parse(&mutate(&mut rng, base))
                }
                _ => {
                    // A huge frame, over or just under the limit.
                    let size = MAX_FRAME_BYTES + rng.random_range(0..2048) - 1024;
                    let text = format!(r#"{{"type":"ping","id":"{}"}}"#, "x".repeat(size));
                    parse(&text)
                }
            };
            match outcome {
                Ok(msg) => {
                    ok += 1;
                    msg.validate().unwrap();
                    let text = serde_json::to_string(&msg).unwrap();
                    assert_eq!(parse(&text).unwrap(), msg, "frame {i}");
                }
                Err(err) => {
                    assert!(!err.message.is_empty(), "frame {i}");
                    assert!(err.message.len() < 4096, "frame {i}: error echoes too much");
                    seen_codes.insert(err.code.as_str());
                    let wire: Json =
                        serde_json::from_str(&err.to_server_message().to_text()).unwrap();
                    assert_eq!(wire["type"], "error");
                    assert_eq!(wire["code"], err.code.as_str());
                    let back: ServerMessage = serde_json::from_value(wire).unwrap();
                    assert_eq!(back.type_name(), "error");
                }
            }
        }
        // The generator reaches every parse-level outcome.
        for c in [
            "binaryFrame",
            "frameTooLarge",
            "badJson",
            "unknownType",
            "badMessage",
        ] {
            assert!(
                seen_codes.contains(c),
                "fuzz never produced {c}: {seen_codes:?}"
            );
        }
        assert!(
            ok > 100,
            "only {ok} frames parsed; mutations too destructive"
        );
    }
}
