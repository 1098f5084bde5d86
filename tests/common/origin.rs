//! A small HTTP server of the tests' own on 127.0.0.1, for the effect
//! broker to reach (through `--egress-allow`): JSON, text and a feed whose
//! body the test sets, redirects, a large body, a drip, an echo of the
//! `Authorization` header; a model speaking the OpenAI-compatible
//! chat-completions protocol (`/v1/chat/completions`, and a slow one under
//! `/slow/v1`); it counts hits per path and the most requests it had in
//! flight at once.

#![allow(dead_code)]

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
pub struct Seen {
    hits: Mutex<HashMap<String, usize>>,
    now: AtomicUsize,
    pub most_at_once: AtomicUsize,
    /// What `/feed` answers (and its content type).
    pub feed: Mutex<(String, String)>,
    /// Where `/far` redirects (another origin of the test's).
    pub far: Mutex<String>,
    /// The last chat-completions request: its body and `Authorization`.
    pub model_request: Mutex<Option<(serde_json::Value, String)>>,
}

impl Seen {
    pub fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    pub fn total_hits(&self) -> usize {
        self.hits.lock().unwrap().values().sum()
    }

    pub fn set_feed(&self, content_type: &str, body: &str) {
        *self.feed.lock().unwrap() = (content_type.to_string(), body.to_string());
    }
}

/// A running origin; it stops with its runtime when dropped.
pub struct Origin {
    pub addr: SocketAddr,
    pub seen: Arc<Seen>,
    _rt: tokio::runtime::Runtime,
}

impl Origin {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `127.0.0.1:PORT`, as `--egress-allow` takes it.
    pub fn allow(&self) -> String {
        self.addr.to_string()
    }
}

async fn counted(
    State(seen): State<Arc<Seen>>,
    path: String,
    f: impl std::future::Future<Output = Response>,
) -> Response {
    *seen.hits.lock().unwrap().entry(path).or_default() += 1;
    let n = seen.now.fetch_add(1, Ordering::SeqCst) + 1;
    seen.most_at_once.fetch_max(n, Ordering::SeqCst);
    let r = f.await;
    seen.now.fetch_sub(1, Ordering::SeqCst);
    r
}

pub fn start() -> Origin {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let seen = Arc::new(Seen::default());
    seen.set_feed("application/json", r#"{"items":[]}"#);
    let app = Router::new()
        .route(
            "/json",
            get(|s: State<Arc<Seen>>| {
                counted(s, "/json".into(), async {
                    (
                        [(header::CONTENT_TYPE, "application/json")],
                        r#"{"answer":42,"label":"real"}"#,
                    )
                        .into_response()
                })
            }),
        )
        .route(
            "/text",
            get(|s: State<Arc<Seen>>| {
                counted(s, "/text".into(), async { "hello".into_response() })
            }),
        )
        .route(
            "/slow",
            get(|s: State<Arc<Seen>>| {
                counted(s, "/slow".into(), async {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    "slow".into_response()
                })
            }),
        )
        .route(
            "/feed",
            get(|s: State<Arc<Seen>>| {
                let (ct, body) = s.feed.lock().unwrap().clone();
                counted(s, "/feed".into(), async move {
                    ([(header::CONTENT_TYPE, ct)], body).into_response()
                })
            }),
        )
        .route(
            "/redirect/{n}",
            get(|s: State<Arc<Seen>>, Path(n): Path<u32>| {
                counted(s, format!("/redirect/{n}"), async move {
                    if n == 0 {
                        "arrived".into_response()
                    } else {
                        (
                            StatusCode::FOUND,
                            [(header::LOCATION, format!("/redirect/{}", n - 1))],
                        )
                            .into_response()
                    }
                })
            }),
        )
        .route(
            "/to-metadata",
            get(|s: State<Arc<Seen>>| {
                counted(s, "/to-metadata".into(), async {
                    (
                        StatusCode::FOUND,
                        [(header::LOCATION, "http://169.254.169.254/latest/meta-data")],
                    )
                        .into_response()
                })
            }),
        )
        .route(
            "/far",
            get(|s: State<Arc<Seen>>| {
                let to = s.far.lock().unwrap().clone();
                counted(s, "/far".into(), async move {
                    (StatusCode::FOUND, [(header::LOCATION, to)]).into_response()
                })
            }),
        )
        .route(
            "/near",
            get(|s: State<Arc<Seen>>| {
                counted(s, "/near".into(), async {
                    (StatusCode::FOUND, [(header::LOCATION, "/auth")]).into_response()
                })
            }),
        )
        .route(
            "/auth",
            get(|s: State<Arc<Seen>>, h: HeaderMap| {
                counted(s, "/auth".into(), async move {
                    let a = h
                        .get(header::AUTHORIZATION)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("none")
                        .to_string();
                    a.into_response()
                })
            }),
        )
        .route(
            "/big",
            get(|s: State<Arc<Seen>>| {
                counted(s, "/big".into(), async {
                    "x".repeat(2 << 20).into_response()
                })
            }),
        )
        .route(
            "/drip",
            get(|s: State<Arc<Seen>>| {
                counted(s, "/drip".into(), async {
                    let stream = futures_util::stream::unfold(0u32, |i| async move {
                        if i >= 60 {
                            return None;
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        Some((
                            Ok::<_, std::io::Error>(axum::body::Bytes::from_static(b"x")),
                            i + 1,
                        ))
                    });
                    axum::body::Body::from_stream(stream).into_response()
                })
            }),
        )
        .route(
            "/v1/chat/completions",
            post(
                |s: State<Arc<Seen>>, headers: HeaderMap, body: axum::body::Bytes| async move {
                    let seen = s.0.clone();
                    counted(s, "/v1/chat/completions".into(), async move {
                        complete(&seen, &headers, &body)
                    })
                    .await
                },
            ),
        )
        .route(
            "/slow/v1/chat/completions",
            post(|s: State<Arc<Seen>>| {
                counted(s, "/slow/v1/chat/completions".into(), async {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    "late".into_response()
                })
            }),
        )
        .with_state(seen.clone());
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Origin {
        addr,
        seen,
        _rt: rt,
    }
}

/// The test model: it answers `You said: <the last user message>`, or, asked
/// for JSON (`response_format`), `{"answer": <that message>, "words": N}`;
/// tokens are words.
fn complete(seen: &Seen, headers: &HeaderMap, body: &[u8]) -> Response {
    let Ok(req) = serde_json::from_slice::<serde_json::Value>(body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    *seen.model_request.lock().unwrap() = Some((req.clone(), auth));
    let text = |c: &serde_json::Value| match c {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    };
    let messages = req["messages"].as_array().cloned().unwrap_or_default();
    let last = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| text(&m["content"]))
        .unwrap_or_default();
    let words = |s: &str| s.split_whitespace().count();
    let content = if req.get("response_format").is_some() {
        serde_json::json!({"answer": last, "words": words(&last)}).to_string()
    } else {
        format!("You said: {last}")
    };
    let prompt_tokens: usize = messages.iter().map(|m| words(&text(&m["content"]))).sum();
    let answer = serde_json::json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": req["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": words(&content),
                  "total_tokens": prompt_tokens + words(&content)},
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
        .into_response()
}
