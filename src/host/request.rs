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

/// A session joins the space; answered with the space's head seq.
#[derive(Debug)]
pub struct Attach {
    pub session: SessionId,
    pub sink: UpdateSink,
}

/// Appends an event to a piece's stream; answered with its seq.
#[derive(Debug)]
pub struct SendEvent {
    pub author: Author,
    pub piece: String,
    pub path: Vec<PathSeg>,
    pub event_id: Option<String>,
    pub payload: Value,
}

/// Reads a piece's result (pulling what it needs) or a document.
#[derive(Debug)]
pub struct Read {
    pub piece: Option<String>,
    pub doc: Option<String>,
    pub path: Vec<PathSeg>,
}

/// Compiles a pattern and instantiates it as a new piece; answered with
/// the piece's id.
#[derive(Debug)]
pub struct Deploy {
    pub entry: String,
    pub files: BTreeMap<String, String>,
    pub export: Option<String>,
    pub argument: Value,
}

/// Deletes a piece (`SpaceRuntime::delete_piece`); answered with how many
/// of its wakes were pending and ended with it.
#[derive(Debug)]
pub struct DeletePiece {
    pub piece: String,
}

/// A request to a space server. The four that answer with data are their
/// own types ([`Ask`] gives each its reply type); the rest answer `Done`.
#[derive(Debug)]
pub enum Request {
    Attach(Attach),
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
    Send(SendEvent),
    Read(Read),
    Deploy(Deploy),
    DeletePiece(DeletePiece),
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
    /// An effect's outcome, from the broker: the next wave commits it. A
    /// parked space drops it (the request is sent again when next pulled).
    EffectDone(crate::runtime::effects::EffectDone),
}

/// What a space server answers; [`Ask`] unpacks it into the reply type of
/// the request that was asked.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// What an [`Operation`] returned (its own errors included).
    Operated(crate::operator::OpResult<Value>),
    Done,
    Attached {
        head_seq: u64,
    },
    Appended(Appended),
    Value(ValueAt),
    Deployed {
        piece: String,
    },
    Deleted {
        ended_wakes: u64,
    },
}

/// An appended event's place in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub seq: u64,
    /// The event id was seen before: `seq` is the commit that first
    /// appended it, and nothing was appended now.
    pub duplicate: bool,
}

/// A value read, with the seq of the commit it reflects.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueAt {
    pub value: Value,
    pub seq: u64,
}

/// A request with a reply type of its own: what [`Host::ask`] returns.
///
/// [`Host::ask`]: super::Host::ask
pub trait Ask: Into<Request> {
    type Reply;
    /// The reply, if `reply` is this request's kind of answer; otherwise
    /// `reply` back (formatted only then, for the error).
    fn unpack(reply: Reply) -> Result<Self::Reply, Reply>;
}

impl From<Attach> for Request {
    fn from(a: Attach) -> Request {
        Request::Attach(a)
    }
}

impl Ask for Attach {
    /// The space's head seq when the session joined.
    type Reply = u64;
    fn unpack(reply: Reply) -> Result<u64, Reply> {
        match reply {
            Reply::Attached { head_seq } => Ok(head_seq),
            other => Err(other),
        }
    }
}

impl From<SendEvent> for Request {
    fn from(e: SendEvent) -> Request {
        Request::Send(e)
    }
}

impl Ask for SendEvent {
    type Reply = Appended;
    fn unpack(reply: Reply) -> Result<Appended, Reply> {
        match reply {
            Reply::Appended(a) => Ok(a),
            other => Err(other),
        }
    }
}

impl From<Read> for Request {
    fn from(r: Read) -> Request {
        Request::Read(r)
    }
}

impl Ask for Read {
    type Reply = ValueAt;
    fn unpack(reply: Reply) -> Result<ValueAt, Reply> {
        match reply {
            Reply::Value(v) => Ok(v),
            other => Err(other),
        }
    }
}

impl From<Deploy> for Request {
    fn from(d: Deploy) -> Request {
        Request::Deploy(d)
    }
}

impl Ask for Deploy {
    /// The new piece's id.
    type Reply = String;
    fn unpack(reply: Reply) -> Result<String, Reply> {
        match reply {
            Reply::Deployed { piece } => Ok(piece),
            other => Err(other),
        }
    }
}

impl From<DeletePiece> for Request {
    fn from(d: DeletePiece) -> Request {
        Request::DeletePiece(d)
    }
}

impl Ask for DeletePiece {
    /// The pending wakes that ended with the piece.
    type Reply = u64;
    fn unpack(reply: Reply) -> Result<u64, Reply> {
        match reply {
            Reply::Deleted { ended_wakes } => Ok(ended_wakes),
            other => Err(other),
        }
    }
}

impl From<Operation> for Request {
    fn from(o: Operation) -> Request {
        Request::Operate(o)
    }
}

impl Ask for Operation {
    type Reply = crate::operator::OpResult<Value>;
    fn unpack(reply: Reply) -> Result<Self::Reply, Reply> {
        match reply {
            Reply::Operated(r) => Ok(r),
            other => Err(other),
        }
    }
}

/// Any request, answered with whatever the server replied (the requests
/// that answer `Done`, and code that forwards replies as they come).
impl Ask for Request {
    type Reply = Reply;
    fn unpack(reply: Reply) -> Result<Reply, Reply> {
        Ok(reply)
    }
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
    /// A piece this tenure could not load (`SpaceRuntime::set_aside`).
    #[error("piece {piece:?} is set aside: {reason}; events already sent to it are kept as dead letters")]
    PieceSetAside { piece: String, reason: String },
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
    /// The space's file holds its storage quota (`--space-quota-mib`).
    #[error(
        "space {space:?} holds {} of its storage quota of {} (--space-quota-mib); \
         this write of {} was refused: delete documents in it, or ask the operator for more",
        crate::human::bytes(*used_bytes), crate::human::bytes(*limit_bytes),
        crate::human::bytes(*incoming_bytes)
    )]
    StorageQuota {
        space: String,
        used_bytes: u64,
        incoming_bytes: u64,
        limit_bytes: u64,
    },
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
