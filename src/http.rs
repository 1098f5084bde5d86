//! The HTTP edge: the operator routes. Only this module knows HTTP.
//!
//! - `GET /api/health/stats`: `{"ok": true, "servingLoop": {...counters}}`
//! - `GET /metrics`: the same counters in Prometheus text format.

use crate::metrics::Counters;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use std::sync::Arc;

#[derive(Clone)]
pub struct HttpState {
    pub counters: Arc<Counters>,
    pub spaces_registered: Arc<dyn Fn() -> u64 + Send + Sync>,
}

pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/api/health/stats", get(health_stats))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn health_stats(State(s): State<HttpState>) -> impl IntoResponse {
    Json(json!({
        "ok": true,
        "spacesRegistered": (s.spaces_registered)(),
        "servingLoop": s.counters.serving_loop_json(),
    }))
}

async fn metrics(State(s): State<HttpState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.counters.prometheus_text(),
    )
}
