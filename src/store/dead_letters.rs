//! Events that failed their tenure, and the dead letters they become: the
//! rows behind "no event can wedge a space" (`spec/serving-loop.md`,
//! *Dead letters*). The store keeps the rows; when to retry and when to give
//! up is the runtime's decision.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An undelivered event whose waves failed their tenure `attempts` times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFailure {
    pub event_id: String,
    pub attempts: u32,
    pub last_error: String,
}

/// An event consumed without delivery after its retries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetter {
    pub event_id: String,
    pub stream: String,
    pub seq: u64,
    pub payload: Value,
    pub fired_by: String,
    pub attempts: u32,
    pub error: String,
    pub dead_lettered_ms: u64,
}
