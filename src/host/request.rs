//! What passes between the edges (sessions, HTTP, the waker, operators)
//! and a space server: the [`Request`]s a host dispatches, their
//! [`Reply`]s, the [`HostError`]s they can end in, and why a space was
//! activated ([`Trigger`]).

use crate::metrics::Counter;
use crate::store::{Author, PathSeg};
use serde_json::Value;
use std::collections::BTreeMap;

/// Why a space was activated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    Session,
    Events,
    Warm,
    Boot,
    Schedule,
    /// An operator's read-modify-write of the space's plane: the space
    /// file is opened on a space-server thread, with no lease and no
    /// runtime unless other requests arrive meanwhile.
    Operator,
}

impl Trigger {
    pub(crate) fn counter(self) -> Counter {
        match self {
            Trigger::Session => Counter::ActivationsSession,
            Trigger::Events => Counter::ActivationsEvents,
            Trigger::Warm => Counter::ActivationsWarm,
            Trigger::Boot => Counter::ActivationsBoot,
            Trigger::Schedule => Counter::ActivationsSchedule,
            Trigger::Operator => Counter::ActivationsOperator,
        }
    }
}

/// An operator's action on one space's file ([`Host::operate`]); its
/// result is JSON for the operator API.
pub struct Operation(
    #[allow(clippy::type_complexity)]
    pub  Box<dyn FnOnce(&mut crate::store::Space) -> crate::operator::OpResult<Value> + Send>,
);

impl std::fmt::Debug for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Operation")
    }
}

pub type SessionId = u64;

/// What a session may do in a space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    Read,
    Write,
    Owner,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::Owner => "owner",
        }
    }
}

/// A value pushed to a session after a commit changed something it tracks.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub seq: u64,
    pub piece: String,
    pub path: Vec<PathSeg>,
    pub value: Value,
}

/// Where a space server sends a session's updates.
pub type UpdateSink = tokio::sync::mpsc::UnboundedSender<Update>;

/// A request to a space server.
#[derive(Debug)]
pub enum Request {
    Attach {
        session: SessionId,
        sink: UpdateSink,
    },
    Detach {
        session: SessionId,
    },
    Track {
        session: SessionId,
        piece: String,
        path: Vec<PathSeg>,
        since: Option<u64>,
    },
    Untrack {
        session: SessionId,
        piece: String,
        path: Vec<PathSeg>,
    },
    Send {
        author: Author,
        piece: String,
        path: Vec<PathSeg>,
        event_id: Option<String>,
        payload: Value,
    },
    Read {
        piece: Option<String>,
        doc: Option<String>,
        path: Vec<PathSeg>,
    },
    Deploy {
        entry: String,
        files: BTreeMap<String, String>,
        export: Option<String>,
        argument: Value,
    },
    /// Identity-less warm demand for these pieces, for this tenure.
    Warm {
        pieces: Vec<String>,
    },
    /// Something changed on disk (events appended elsewhere): look again.
    Wake,
    /// Fire the space's due schedule entries (write-first), then deliver.
    FireDue,
    /// The host is shutting down: finish the wave in flight, start no
    /// other, release the lease, checkpoint and close the file.
    Stop,
    /// An operator's action, run on the space server's own handle of the
    /// file (so no second handle moves the directory behind its back).
    Operate(Operation),
    /// A wake falls due at `due_ms`: activate now and stay active until
    /// then, so the wake fires on time instead of after an activation.
    Prepare {
        due_ms: u64,
    },
    /// The host clock jumped (a manual clock): look at the timers again.
    /// Not activity: it postpones no park.
    ClockMoved,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// What an [`Operation`] returned (its own errors included).
    Operated(crate::operator::OpResult<Value>),
    Done,
    Attached {
        head_seq: u64,
    },
    Appended {
        seq: u64,
        duplicate: bool,
    },
    Value {
        value: Value,
        seq: u64,
    },
    Deployed {
        piece: String,
    },
}

/// Errors a request can end in; mapped to wire codes at the edge. The
/// four reasons a space cannot be reached are four variants, because a
/// client acts differently on each: a typo (`UnknownSpace`), a broken
/// space that is retried with back-off (`BackingOff`), a full host
/// (`AtCapacity`), and a space another host serves (`HeldElsewhere`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HostError {
    #[error("there is no space {0:?} on this host")]
    UnknownSpace(String),
    #[error("no piece {0:?} in this space")]
    UnknownPiece(String),
    #[error("{0}")]
    UnknownStream(String),
    #[error("the pattern does not compile")]
    InvalidPattern { diagnostics: String },
    /// A deploy's argument does not fit the pattern's argument type.
    #[error("{0}")]
    InvalidArgument(crate::runtime::argument::ArgumentMismatch),
    #[error("{0}")]
    BadRequest(String),
    #[error("space {space:?} failed to activate {failures} time(s) ({cause}); it is retried in {retry_in_ms} ms")]
    BackingOff {
        space: String,
        failures: u32,
        retry_in_ms: u64,
        cause: String,
    },
    #[error("the host is at its limit of {limit} active spaces (--max-active-spaces), so space {space:?} cannot be activated now; retry shortly")]
    AtCapacity { space: String, limit: usize },
    #[error("space {space:?} is served by another host ({holder}); its lease ends in {retry_in_ms} ms unless renewed")]
    HeldElsewhere {
        space: String,
        holder: String,
        retry_in_ms: u64,
    },
    /// The space's server stopped before answering (its tenure ended with
    /// an error, or the host is shutting down).
    #[error("space {space:?} is unavailable: {reason}")]
    Unavailable { space: String, reason: String },
    #[error("internal error: {0}")]
    Internal(String),
}

impl HostError {
    /// How long a client should wait before trying again, when waiting helps.
    pub fn retry_after_ms(&self) -> Option<u64> {
        match self {
            HostError::BackingOff { retry_in_ms, .. }
            | HostError::HeldElsewhere { retry_in_ms, .. } => Some(*retry_in_ms),
            HostError::AtCapacity { .. } | HostError::Unavailable { .. } => Some(1_000),
            _ => None,
        }
    }
}

pub type Responder = tokio::sync::oneshot::Sender<Result<Reply, HostError>>;

pub(crate) struct Cmd {
    pub req: Request,
    pub reply: Option<Responder>,
}

pub(crate) fn shutting_down(space: &str) -> HostError {
    HostError::Unavailable {
        space: space.to_string(),
        reason: "the host is shutting down".into(),
    }
}

pub(crate) fn stopped_before_reply(space: &str) -> HostError {
    HostError::Unavailable {
        space: space.to_string(),
        reason: "the space server stopped before replying".into(),
    }
}
