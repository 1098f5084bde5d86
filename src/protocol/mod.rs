//! The spacewake wire protocol: how a client proves its identity, what it may
//! send, what the server answers, and how raw frames become messages.
//!
//! - [`did`]: ed25519 `did:key` names and the client [`did::Identity`].
//! - [`auth`]: the session-opening challenge and its verification.
//! - [`messages`]: the typed client and server messages (JSON, `type`-tagged).
//! - [`frames`]: frame → message parsing with stable error codes, and the
//!   session rules (open first, access levels) every connection applies.
//! - [`client`]: a small async WebSocket client for tests and the CLI.
//!
//! The normative description is `spec/protocol.md`; the JSON Schemas in
//! `schema/protocol/` describe the same messages and are checked against
//! these types by tests. This module holds no server state: the serving loop
//! owns sessions and spaces and calls into here.

pub mod auth;
pub mod client;
pub mod did;
pub mod frames;
pub mod messages;

pub use auth::{
    ingest_message, new_nonce, open_message, operator_message, sign_ingest, sign_open,
    sign_operator, verify_ingest, verify_open, verify_operator, AuthError, RelayRequest,
};
pub use did::{decode_did_key, encode_did_key, DidError, Identity};
pub use frames::{
    check_access, check_phase, parse_client_frame, Frame, ProtocolError, MAX_FRAME_BYTES,
    TRANSPORT_MAX_MESSAGE_BYTES,
};
pub use messages::{
    Access, ClientMessage, ErrorCode, PathSegment, RequestId, RuleViolation, Seq, ServerMessage,
    PROTOCOL_VERSION,
};

#[cfg(test)]
mod schema_tests;
