//! Effects on the server: pattern code's `fetch*` builtins, served by one
//! host broker outside the sandbox (`spec/effects.md`).
//!
//! An effect is a node of a piece's graph (kind `"effect"`) whose output,
//! `{pending, result, error}`, the runtime computes by asking the
//! [`Broker`]: when the node is pulled and its request (its resolved inputs)
//! differs from the one its stored output answers, the runtime writes
//! `pending` and submits the request; the broker sends it, under the egress
//! policy ([`policy`]) and the space's budgets ([`budget`]), and hands the
//! [`Outcome`] back to the space, whose next wave commits it whole. A
//! result, once committed, is the answer to that request until the inputs
//! change: a parked space serves it without asking again, and a restart
//! refetches nothing.
//!
//! Invariants: pattern code has no other path to the network; nothing here
//! knows of JavaScript or of the store (the runtime turns an outcome into
//! state, [`state`]); the policy and the budgets are pure.

pub mod broker;
pub mod budget;
pub mod http;
pub mod mock;
pub mod model;
pub mod policy;
pub mod state;

pub use broker::{Broker, BrokerConfig, Delivery};

use serde_json::Value;

/// The builtins served by the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EffectKind {
    FetchJson,
    FetchJsonUnchecked,
    FetchText,
    FetchBinary,
    /// The older `fetchData({url, mode, options})`: JSON unless `mode: "text"`.
    FetchData,
    /// Model calls to the operator's endpoint ([`model`]).
    GenerateText,
    GenerateObject,
    Llm,
}

impl EffectKind {
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "fetchJson" => Self::FetchJson,
            "fetchJsonUnchecked" => Self::FetchJsonUnchecked,
            "fetchText" => Self::FetchText,
            "fetchBinary" => Self::FetchBinary,
            "fetchData" => Self::FetchData,
            "generateText" => Self::GenerateText,
            "generateObject" => Self::GenerateObject,
            "llm" => Self::Llm,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::FetchJson => "fetchJson",
            Self::FetchJsonUnchecked => "fetchJsonUnchecked",
            Self::FetchText => "fetchText",
            Self::FetchBinary => "fetchBinary",
            Self::FetchData => "fetchData",
            Self::GenerateText => "generateText",
            Self::GenerateObject => "generateObject",
            Self::Llm => "llm",
        }
    }

    pub fn is_model(self) -> bool {
        matches!(self, Self::GenerateText | Self::GenerateObject | Self::Llm)
    }
}

/// What the broker is asked to do: an HTTP request under the egress
/// policy, or a call to the operator's model endpoint.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Fetch(FetchSpec),
    Model(model::ModelCall),
}

impl Request {
    /// The request a builtin's resolved inputs ask for, if any.
    pub fn from_inputs(kind: EffectKind, inputs: &Value) -> Option<Request> {
        if kind.is_model() {
            model::ModelCall::from_inputs(kind, inputs).map(Request::Model)
        } else {
            FetchSpec::from_inputs(inputs).map(Request::Fetch)
        }
    }
}

/// One HTTP request as pattern code asked for it (its URL not yet resolved
/// against the serving origin, nor checked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchSpec {
    pub url: String,
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<String>,
}

impl FetchSpec {
    /// The request a builtin's resolved inputs ask for: `url` and
    /// `options` (`method`, `headers`, `body`: a string, or JSON otherwise).
    /// `None` when there is no URL (the builtin then answers the idle state).
    pub fn from_inputs(inputs: &Value) -> Option<FetchSpec> {
        let url = inputs.get("url").and_then(Value::as_str)?.trim();
        if url.is_empty() {
            return None;
        }
        let options = inputs.get("options");
        let method = options
            .and_then(|o| o.get("method"))
            .and_then(Value::as_str)
            .unwrap_or("GET")
            .to_ascii_uppercase();
        let mut headers: Vec<(String, String)> = options
            .and_then(|o| o.get("headers"))
            .and_then(Value::as_object)
            .map(|h| {
                h.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        headers.sort();
        let body = match options.and_then(|o| o.get("body")) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
        };
        Some(FetchSpec {
            url: url.to_string(),
            method,
            headers,
            body,
        })
    }
}

/// What became of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The final response (after redirects), its body whole.
    Response {
        status: u16,
        media_type: String,
        body: Vec<u8>,
    },
    /// The policy refused it (`egressRefused`); nothing was sent past it.
    Refused(String),
    /// It failed on the way: unreachable, timed out, too large, held too
    /// long, ...: `code: message`.
    Failed { code: &'static str, message: String },
}

impl Outcome {
    pub fn failed(code: &'static str, message: impl Into<String>) -> Self {
        Outcome::Failed {
            code,
            message: message.into(),
        }
    }
}
