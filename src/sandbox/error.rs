//! Error classification for everything the sandbox runs.
//!
//! Invariant: every failure of a call surfaces as exactly one [`SandboxError`]
//! variant, chosen by host-side facts first (the interrupt handler's preempt
//! flag, the capability-denial record, the resolver's failure record) and only
//! then by the shape of the JS exception. Host-side facts win because pattern
//! code can catch, rethrow or forge JS errors, but it cannot touch host state.

use std::fmt;

/// Why a call was preempted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreemptCause {
    /// The deterministic budget (interrupt-handler polls) ran out.
    Budget,
    /// The call allocated more bytes in total than its allocation budget
    /// (`SandboxConfig::alloc_budget_bytes`); deterministic like `Budget`.
    AllocationBudget,
    /// The optional CPU-time safety net fired (see `SandboxConfig::cpu_limit`).
    CpuDeadline,
}

impl fmt::Display for PreemptCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PreemptCause::Budget => f.write_str("budget exhausted"),
            PreemptCause::AllocationBudget => f.write_str("allocation budget exhausted"),
            PreemptCause::CpuDeadline => f.write_str("CPU-time safety net"),
        }
    }
}

/// Every way a sandboxed call can fail.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// The call ran past its budget (in interrupt polls) and was stopped by an
    /// uncatchable interrupt. Its effects must be discarded by the embedder.
    #[error("preempted after {polls} of {budget} budget polls ({cause})")]
    Preempted {
        /// The budget the call ran under, in interrupt polls.
        budget: u64,
        /// Polls consumed when it was stopped.
        polls: u64,
        /// What fired.
        cause: PreemptCause,
    },
    /// The runtime hit its memory limit while running the call.
    #[error("out of memory (runtime limit {limit_bytes} bytes)")]
    OutOfMemory {
        /// The configured per-runtime limit.
        limit_bytes: usize,
    },
    /// Pattern code threw (and did not catch) an exception.
    #[error("{name}: {message}{}", pattern_site(stack.as_deref()))]
    Threw {
        /// The error's `name` (`TypeError`, ...); empty when a non-Error value was thrown.
        name: String,
        /// The error's `message`, or the thrown value rendered as a string.
        message: String,
        /// The JS stack, when the engine recorded one.
        stack: Option<String>,
    },
    /// Pattern code used a capability its mode does not grant (`Date.now()` in
    /// reactive code, the `Function` constructor, ...). Sticky: reported even
    /// when the code caught the JS `CapabilityError`.
    #[error("capability {capability} denied: {message}")]
    Capability {
        /// Which capability, e.g. `Date.now()`.
        capability: String,
        /// The sentence the JS error carried.
        message: String,
    },
    /// An import could not be resolved (unknown specifier, or a module that
    /// may not import the one it asked for), or a module set is inconsistent.
    #[error("module error: cannot import {specifier:?} from {importer:?}: {message}")]
    Module {
        /// What was imported.
        specifier: String,
        /// Who imported it (empty for the embedder's entry import).
        importer: String,
        /// Why it failed.
        message: String,
    },
    /// A failure of the embedding itself (stale handle, engine error, re-entrant
    /// call, conversion failure); never caused by ordinary pattern behaviour.
    #[error("sandbox internal error: {0}")]
    Internal(String),
}

/// The error a native host function returns; it is thrown into JS as an
/// `Error` whose `name` is `name`, so pattern code may catch it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostError {
    /// The JS error name, e.g. `"HostError"` or `"NotFound"`.
    pub name: String,
    /// The JS error message.
    pub message: String,
}

impl HostError {
    /// A `HostError` with the default name `"HostError"`.
    pub fn new(message: impl Into<String>) -> Self {
        HostError {
            name: "HostError".to_string(),
            message: message.into(),
        }
    }
}

/// Where in pattern code a thrown error came from, as ` (at FILE:LINE:COL)`:
/// the innermost frame of the stack outside the host's own modules (the API,
/// `spacewake:` modules), so an author sees the line to look at. Empty when
/// the stack names no such frame.
fn pattern_site(stack: Option<&str>) -> String {
    let Some(stack) = stack else {
        return String::new();
    };
    for line in stack.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("at ") else {
            continue;
        };
        // `at name (file:line:col)` or `at file:line:col`.
        let loc = match (rest.rfind('('), rest.ends_with(')')) {
            (Some(i), true) => &rest[i + 1..rest.len() - 1],
            _ => rest,
        };
        if loc == "native"
            || loc.starts_with("commonfabric")
            || loc.starts_with("spacewake:")
            || loc.starts_with('<')
        {
            continue;
        }
        return format!(" (at {loc})");
    }
    String::new()
}

#[cfg(test)]
mod site_tests {
    use super::pattern_site;

    #[test]
    fn the_site_is_the_innermost_frame_of_pattern_code() {
        let stack = "    at get (commonfabric:120:5)\n    at total (pc-1/r/main.tsx:14:22)\n    at <eval> (pc-1/r/main.tsx:30:1)\n";
        assert_eq!(pattern_site(Some(stack)), " (at pc-1/r/main.tsx:14:22)");
        assert_eq!(pattern_site(Some("    at f (commonfabric:1:1)\n")), "");
        assert_eq!(pattern_site(None), "");
    }
}
