//! The store's shared record types: what a commit carries (author, class,
//! document operations, new events) and what reads and commits return
//! (records, events, streams, the lease). A leaf: it imports no other file
//! of the store but `path`, so the store's files no longer import each
//! other in a circle.

use super::path::PathSeg;
use serde::Serialize;
use serde_json::Value;

/// The three classes of commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CommitClass {
    /// Written on behalf of a principal: client writes, event appends.
    Authored,
    /// Written by the space's executor (the lease holder) from a wave.
    Derived,
    /// Written by the host itself (provisioning, migrations of data).
    System,
}

impl CommitClass {
    pub fn as_str(self) -> &'static str {
        match self {
            CommitClass::Authored => "authored",
            CommitClass::Derived => "derived",
            CommitClass::System => "system",
        }
    }
}

/// Who authored a commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Author {
    /// A `did:key`, or `"server"` for the host itself.
    pub principal: String,
    pub session: Option<String>,
}

impl Author {
    pub fn server() -> Self {
        Author {
            principal: "server".into(),
            session: None,
        }
    }
    pub fn principal(p: impl Into<String>) -> Self {
        Author {
            principal: p.into(),
            session: None,
        }
    }
}

/// How deeply a stored value (a document, an event payload) may nest
/// arrays and objects. The reader (serde_json) refuses past 127 levels, so
/// a commit is refused past this many: whatever is stored loads again,
/// with room to spare for the few levels a run's result wraps around a
/// document it hands back.
pub const MAX_VALUE_DEPTH: usize = 100;

/// How many levels of arrays and objects `v` nests (a scalar is 0).
/// Iterative, so a value nested past any limit is measured without
/// recursion.
pub fn value_depth(v: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(a) => {
                deepest = deepest.max(d + 1);
                stack.extend(a.iter().map(|x| (x, d + 1)));
            }
            Value::Object(m) => {
                deepest = deepest.max(d + 1);
                stack.extend(m.values().map(|x| (x, d + 1)));
            }
            _ => {}
        }
    }
    deepest
}

impl CommitRequest {
    /// Refuses a commit whose documents or payloads would nest past
    /// [`MAX_VALUE_DEPTH`]: checked when written, so nothing stored fails to
    /// load later. A patch counts its path (the document around it).
    pub fn check_depth(&self) -> Result<(), String> {
        let too_deep = |what: &str, depth: usize| {
            Err(format!(
                "{what} would nest {depth} levels of arrays and objects (the limit is {MAX_VALUE_DEPTH})"
            ))
        };
        for op in &self.ops {
            let depth = match op {
                DocOp::Set { value, .. } => value_depth(value),
                DocOp::Patch { path, value, .. } => path.len() + value_depth(value),
                DocOp::Delete { .. } => 0,
            };
            if depth > MAX_VALUE_DEPTH {
                return too_deep(&format!("document {:?}", op.doc_id()), depth);
            }
        }
        for e in &self.events {
            let depth = value_depth(&e.payload);
            if depth > MAX_VALUE_DEPTH {
                return too_deep(&format!("the payload of event {:?}", e.event_id), depth);
            }
        }
        Ok(())
    }
}

/// One document operation of a commit.
#[derive(Debug, Clone, PartialEq)]
pub enum DocOp {
    /// Replace the whole document.
    Set { id: String, value: Value },
    /// Write `value` at `path` inside the document (see `path::set_at`).
    Patch {
        id: String,
        path: Vec<PathSeg>,
        value: Value,
    },
    /// Remove the document.
    Delete { id: String },
}

impl DocOp {
    pub fn doc_id(&self) -> &str {
        match self {
            DocOp::Set { id, .. } | DocOp::Patch { id, .. } | DocOp::Delete { id } => id,
        }
    }
    pub(super) fn kind(&self) -> &'static str {
        match self {
            DocOp::Set { .. } => "set",
            DocOp::Patch { .. } => "patch",
            DocOp::Delete { .. } => "delete",
        }
    }
}

/// An operation as written: the document's value after it (None = deleted).
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedOp {
    pub doc_id: String,
    pub op: &'static str,
    pub path: Option<Vec<PathSeg>>,
    pub doc_after: Option<Value>,
}

/// An event to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub event_id: String,
    pub stream: String,
    pub payload: Value,
    /// The principal that fired it, or `"server"`.
    pub fired_by: String,
}

impl NewEvent {
    /// The event as stored, appended by commit `seq` at `at_ms`.
    pub(crate) fn appended(self, seq: u64, at_ms: u64) -> EventRecord {
        EventRecord {
            event_id: self.event_id,
            stream: self.stream,
            seq,
            payload: self.payload,
            fired_by: self.fired_by,
            fired_at_ms: at_ms,
        }
    }
}

/// A stored event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRecord {
    pub event_id: String,
    pub stream: String,
    pub seq: u64,
    pub payload: Value,
    pub fired_by: String,
    pub fired_at_ms: u64,
}

/// A stream's head and watermark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamState {
    pub stream: String,
    pub head_seq: u64,
    pub watermark_seq: u64,
}

/// Proof of holding the space's lease for one tenure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    pub holder: String,
    pub tenure: u64,
    pub expires_at_ms: u64,
}

/// Everything one commit writes.
#[derive(Debug, Clone)]
pub struct CommitRequest {
    pub class: CommitClass,
    pub author: Author,
    pub ops: Vec<DocOp>,
    pub events: Vec<NewEvent>,
    /// Streams whose watermark this commit advances, to the given seq.
    pub watermarks: Vec<(String, u64)>,
    /// Required for a derived commit.
    pub lease: Option<Lease>,
    /// Take the space's lease for a new tenure in this commit's transaction
    /// (as [`FileSpace::acquire_lease`] would); a live lease of another holder
    /// refuses the whole commit (`NotLeaseHolder`). The firing that begins
    /// a scheduled tenure takes its lease this way (`spec/scheduling.md`).
    pub take_lease: bool,
    /// Give the lease (`lease`) back in this commit's transaction when,
    /// with the commit applied, the space has no undelivered event left: a
    /// tenure that parks after its last wave needs no transaction of its own
    /// for the release. Honoured only on a file held exclusively (no other
    /// writer can move the directory between the commit and the settling
    /// of its projection); elsewhere the lease is kept, as without the flag.
    pub release_lease_if_idle: bool,
}

impl CommitRequest {
    pub fn new(class: CommitClass, author: Author) -> Self {
        CommitRequest {
            class,
            author,
            ops: Vec::new(),
            events: Vec::new(),
            watermarks: Vec::new(),
            lease: None,
            take_lease: false,
            release_lease_if_idle: false,
        }
    }
    pub fn op(mut self, op: DocOp) -> Self {
        self.ops.push(op);
        self
    }
    pub fn event(mut self, e: NewEvent) -> Self {
        self.events.push(e);
        self
    }
}

/// What a commit did.
#[derive(Debug, Clone, PartialEq)]
pub struct CommitOutcome {
    /// The commit's seq; `None` when there was nothing to commit (every
    /// event was a duplicate and there were no operations or watermarks).
    pub seq: Option<u64>,
    pub appended: Vec<String>,
    /// Event ids that were already stored, with the seq that stored them.
    pub duplicates: Vec<(String, u64)>,
    /// The lease taken, for a request with `take_lease`.
    pub lease: Option<Lease>,
    /// The lease was given back in this commit (`release_lease_if_idle`).
    pub lease_released: bool,
}

/// A document head as read.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DocRead {
    pub value: Value,
    /// The seq of the commit that last wrote the document.
    pub seq: u64,
    pub rev: u64,
}

/// A commit as recorded in the log.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CommitRecord {
    pub seq: u64,
    pub class: String,
    pub principal: String,
    pub session: Option<String>,
    pub at_ms: u64,
    pub ops: Vec<LoggedOp>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoggedOp {
    pub doc_id: String,
    pub op: String,
    pub path: Option<Value>,
    pub value: Option<Value>,
}
