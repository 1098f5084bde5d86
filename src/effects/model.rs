//! Model calls: `generateText`, `generateObject` and `llm`, sent to the
//! operator's model endpoint, which speaks the OpenAI-compatible
//! chat-completions protocol (`POST {endpoint}/chat/completions`).
//!
//! The endpoint is the operator's own choice (`serve --model-endpoint`), so
//! it is reached without the egress policy pattern URLs go through (it may
//! well be a model server on the host's network); the budgets of the space
//! still pace the calls like any effect. The request's shape and the
//! answer's reading are pure functions here; [`ModelClient`] is the thin
//! shell that sends one.

use super::http::root_cause;
use super::{EffectKind, Outcome};
use serde_json::{json, Value};
use std::time::Duration;

/// The operator's model endpoint.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// Base URL: requests go to `{endpoint}/chat/completions`.
    pub endpoint: url::Url,
    /// Sent as `Authorization: Bearer …` when set.
    pub key: Option<String>,
    /// The model asked for when a call names none.
    pub default_model: String,
    /// Connect and answer, in all.
    pub timeout: Duration,
    pub max_response_bytes: usize,
}

/// One call as pattern code asked for it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCall {
    pub model: Option<String>,
    /// Chat messages, `{role, content}`, the system prompt first.
    pub messages: Vec<Value>,
    pub max_tokens: Option<u64>,
    pub stop: Option<String>,
    /// `generateObject`: the JSON Schema the answer must match; `None` for
    /// free JSON (`llm` with `mode: "json"`) or text.
    pub schema: Option<Value>,
    pub json: bool,
}

impl ModelCall {
    /// The call a builtin's resolved inputs ask for: `prompt` (a string or
    /// content parts) or `messages`, with `system`, `model`, `maxTokens`,
    /// `stop`, `schema`, `mode`. `None` when there is nothing to ask (no
    /// prompt, no message): the builtin then answers the idle state.
    pub fn from_inputs(kind: EffectKind, inputs: &Value) -> Option<ModelCall> {
        let mut messages = Vec::new();
        if let Some(system) = inputs.get("system").and_then(Value::as_str) {
            if !system.trim().is_empty() {
                messages.push(json!({"role": "system", "content": system}));
            }
        }
        match (inputs.get("prompt"), inputs.get("messages")) {
            (Some(p), _) if !is_empty_content(p) => {
                messages.push(json!({"role": "user", "content": content(p)}));
            }
            (_, Some(Value::Array(ms))) => {
                for m in ms {
                    let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
                    let Some(c) = m.get("content").filter(|c| !is_empty_content(c)) else {
                        continue;
                    };
                    messages.push(json!({"role": role, "content": content(c)}));
                }
            }
            _ => {}
        }
        if !messages.iter().any(|m| m["role"] != "system") {
            return None;
        }
        let schema = match kind {
            EffectKind::GenerateObject => inputs.get("schema").filter(|s| s.is_object()).cloned(),
            _ => None,
        };
        let json = kind == EffectKind::GenerateObject
            || inputs.get("mode").and_then(Value::as_str) == Some("json");
        Some(ModelCall {
            model: inputs
                .get("model")
                .and_then(Value::as_str)
                .filter(|m| !m.is_empty())
                .map(str::to_string),
            messages,
            max_tokens: inputs.get("maxTokens").and_then(Value::as_u64),
            stop: inputs
                .get("stop")
                .and_then(Value::as_str)
                .map(str::to_string),
            schema,
            json,
        })
    }

    /// The chat-completions request body.
    pub fn body(&self, default_model: &str) -> Value {
        let mut messages = self.messages.clone();
        if let Some(schema) = &self.schema {
            // Said in words too: not every compatible server honours
            // `response_format`.
            messages.insert(
                0,
                json!({"role": "system", "content": format!(
                    "Answer with one JSON value matching this JSON Schema, and nothing else: {schema}"
                )}),
            );
        }
        let mut body = json!({
            "model": self.model.as_deref().unwrap_or(default_model),
            "messages": messages,
        });
        if let Some(n) = self.max_tokens {
            body["max_tokens"] = json!(n);
        }
        if let Some(s) = &self.stop {
            body["stop"] = json!(s);
        }
        if let Some(schema) = &self.schema {
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": {"name": "result", "schema": schema},
            });
        } else if self.json {
            body["response_format"] = json!({"type": "json_object"});
        }
        body
    }
}

fn is_empty_content(c: &Value) -> bool {
    match c {
        Value::Null => true,
        Value::String(s) => s.trim().is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Content as the protocol takes it: a string, or the reference's parts
/// (`{type: "text", text}`; an image part as `image_url`).
fn content(c: &Value) -> Value {
    let Value::Array(parts) = c else {
        return match c {
            Value::String(_) => c.clone(),
            other => Value::String(other.to_string()),
        };
    };
    Value::Array(
        parts
            .iter()
            .map(|p| match p.get("type").and_then(Value::as_str) {
                Some("image") => json!({"type": "image_url", "image_url": {"url": p.get("image").cloned().unwrap_or(Value::Null)}}),
                _ => json!({"type": "text", "text": p.get("text").and_then(Value::as_str).unwrap_or("")}),
            })
            .collect(),
    )
}

/// What a completion answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub text: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// Reads a chat-completions answer: the first choice's text and the usage.
pub fn parse_completion(body: &[u8]) -> Result<Completion, String> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the model endpoint's answer is not JSON: {e}"))?;
    let text = v
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .ok_or("the model endpoint's answer has no choices[0].message.content")?;
    let n = |p: &str| v.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    Ok(Completion {
        text: text.to_string(),
        prompt_tokens: n("/usage/prompt_tokens"),
        completion_tokens: n("/usage/completion_tokens"),
    })
}

/// The JSON value in a model's text: the text itself, or a fenced block.
pub fn json_in(text: &str) -> Result<Value, String> {
    let t = text.trim();
    let inner = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .and_then(|r| r.trim_end().strip_suffix("```"))
        .unwrap_or(t);
    serde_json::from_str(inner.trim()).map_err(|e| format!("the model's answer is not JSON: {e}"))
}

/// Sends calls to the endpoint.
pub struct ModelClient {
    client: reqwest::Client,
    cfg: ModelConfig,
}

impl ModelClient {
    pub fn new(cfg: ModelConfig) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .connect_timeout(cfg.timeout)
            .no_proxy()
            .user_agent(concat!("spacewake/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("the model client: {e}"))?;
        Ok(ModelClient { client, cfg })
    }

    /// One call, answered within the timeout: the endpoint's response
    /// (read by [`super::state::settled`]) or why there is none.
    pub async fn call(&self, call: &ModelCall) -> Outcome {
        let url = format!(
            "{}/chat/completions",
            self.cfg.endpoint.as_str().trim_end_matches('/')
        );
        let mut req = self
            .client
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(call.body(&self.cfg.default_model).to_string());
        if let Some(k) = &self.cfg.key {
            req = req.bearer_auth(k);
        }
        let limit = self.cfg.max_response_bytes;
        let exchange = async {
            let mut resp = req.send().await?;
            let status = resp.status().as_u16();
            let mut body = Vec::new();
            while let Some(chunk) = resp.chunk().await? {
                if body.len() + chunk.len() > limit {
                    return Ok(Outcome::failed(
                        "tooLarge",
                        format!("the model's answer is larger than {limit} bytes"),
                    ));
                }
                body.extend_from_slice(&chunk);
            }
            Ok::<_, reqwest::Error>(Outcome::Response {
                status,
                media_type: "application/json".to_string(),
                body,
            })
        };
        match tokio::time::timeout(self.cfg.timeout, exchange).await {
            Ok(Ok(o)) => o,
            Ok(Err(e)) if e.is_connect() => Outcome::failed(
                "unreachable",
                format!(
                    "could not connect to the model endpoint: {}",
                    root_cause(&e)
                ),
            ),
            Ok(Err(e)) => Outcome::failed("request", root_cause(&e)),
            Err(_) => Outcome::failed(
                "timeout",
                format!(
                    "the model endpoint did not answer within {} ms",
                    self.cfg.timeout.as_millis()
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_or_messages_make_a_call_and_nothing_to_ask_makes_none() {
        let c = ModelCall::from_inputs(
            EffectKind::GenerateText,
            &json!({"prompt": "hi", "system": "be brief", "maxTokens": 9}),
        )
        .unwrap();
        assert_eq!(c.messages.len(), 2);
        let b = c.body("m0");
        assert_eq!(b["model"], "m0");
        assert_eq!(b["max_tokens"], 9);
        assert_eq!(b["messages"][1], json!({"role": "user", "content": "hi"}));
        assert!(b.get("response_format").is_none());
        let c = ModelCall::from_inputs(
            EffectKind::Llm,
            &json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
                    "model": "m1", "mode": "json"}),
        )
        .unwrap();
        let b = c.body("m0");
        assert_eq!(b["model"], "m1");
        assert_eq!(b["response_format"]["type"], "json_object");
        assert_eq!(b["messages"][0]["content"][0]["text"], "x");
        for nothing in [
            json!({}),
            json!({"prompt": "  "}),
            json!({"system": "s", "messages": []}),
        ] {
            assert_eq!(
                ModelCall::from_inputs(EffectKind::GenerateText, &nothing),
                None
            );
        }
        let schema = json!({"type": "object", "properties": {"a": {"type": "number"}}});
        let c = ModelCall::from_inputs(
            EffectKind::GenerateObject,
            &json!({"prompt": "p", "schema": schema}),
        )
        .unwrap();
        let b = c.body("m");
        assert_eq!(b["response_format"]["json_schema"]["schema"], schema);
        assert!(b["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("JSON Schema"));
    }

    #[test]
    fn a_completion_is_read_with_its_usage() {
        let body = br#"{"choices":[{"message":{"role":"assistant","content":"ok"}}],
                        "usage":{"prompt_tokens":7,"completion_tokens":2}}"#;
        assert_eq!(
            parse_completion(body).unwrap(),
            Completion {
                text: "ok".into(),
                prompt_tokens: 7,
                completion_tokens: 2
            }
        );
        assert!(parse_completion(b"{}").is_err());
        assert!(parse_completion(b"nope").is_err());
        assert_eq!(json_in("```json\n{\"a\":1}\n```").unwrap(), json!({"a": 1}));
        assert_eq!(json_in(" [1] ").unwrap(), json!([1]));
        assert!(json_in("sure! {").is_err());
    }
}
