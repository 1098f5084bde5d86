//! Logging and, when an OTLP endpoint is configured, OpenTelemetry span
//! export.
//!
//! Without an endpoint this is exactly the plain `fmt` subscriber the binary
//! always had: no exporter, no background thread, no extra layer.
//!
//! With one (`spacewake serve --otlp-endpoint http://collector:4318`, or
//! `OTEL_EXPORTER_OTLP_ENDPOINT`), the crate's spans — one `wave` span per
//! wave, with its `space` attribute and the "wave committed" event carrying
//! `events`, `seq`, `handlers` and `derivations` — are batched by the SDK's
//! batch span processor (its own OS thread; no tokio runtime needed) and
//! POSTed as OTLP/HTTP protobuf to `<endpoint>/v1/traces` by
//! [`crate::http_client::BlockingHttp`] (reqwest over rustls), to an
//! `http://` or `https://` endpoint.

use crate::http_client::BlockingHttp;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// The OTLP/HTTP path for traces, appended to the configured base endpoint.
pub const TRACES_PATH: &str = "/v1/traces";

/// Default per-request timeout (connect, write, read each), overridable with
/// `OTEL_EXPORTER_OTLP_TIMEOUT` in milliseconds.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest response body kept (collectors answer with a small protobuf).
const MAX_RESPONSE_BODY: usize = 64 * 1024;

/// Keeps the tracer provider alive; [`Telemetry::shutdown`] flushes it.
#[must_use = "call shutdown() on exit so buffered spans are exported"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are being exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Export what is buffered and stop the exporter thread (a no-op
    /// without an endpoint).
    pub fn shutdown(mut self) {
        if let Some(provider) = self.provider.take() {
            if let Err(e) = provider.shutdown() {
                eprintln!("warning: flushing OpenTelemetry spans: {e}");
            }
        }
    }
}

/// Install the global subscriber: `fmt` on stderr filtered by `SPACEWAKE_LOG`
/// (else `default_filter`), plus the OpenTelemetry layer when
/// `otlp_endpoint` is a non-empty URL.
pub fn init(default_filter: &str, otlp_endpoint: Option<&str>) -> anyhow::Result<Telemetry> {
    let env_filter = || {
        tracing_subscriber::EnvFilter::try_from_env("SPACEWAKE_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter))
    };
    // Colour only on a terminal, and never with NO_COLOR set: a log written
    // to a file or a pipe carries no escape codes.
    let ansi = {
        use std::io::IsTerminal;
        std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
    };
    let endpoint = otlp_endpoint.map(str::trim).filter(|s| !s.is_empty());
    let Some(endpoint) = endpoint else {
        tracing_subscriber::fmt()
            .with_env_filter(env_filter())
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .init();
        return Ok(Telemetry { provider: None });
    };
    let traces_url = traces_url(endpoint)?;
    let provider = tracer_provider(&traces_url, timeout_from_env())?;
    let tracer = provider.tracer("spacewake");
    // The crate's own spans and events (debug included, so a wave's
    // "wave committed" event lands on its span); never the exporter's own
    // logs, and nothing from dependencies.
    let otel_filter = tracing_subscriber::filter::Targets::new()
        .with_target("spacewake", tracing::Level::DEBUG)
        .with_target(
            "spacewake::telemetry",
            tracing::level_filters::LevelFilter::OFF,
        );
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(ansi)
                .with_filter(env_filter()),
        )
        .with(
            tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(otel_filter),
        )
        .init();
    tracing::info!(endpoint = %traces_url, "exporting OpenTelemetry spans");
    Ok(Telemetry {
        provider: Some(provider),
    })
}

/// Build a tracer provider that batches spans to `traces_url` (a full
/// `http://…/v1/traces` URL) with [`OtlpHttpClient`].
pub fn tracer_provider(traces_url: &str, timeout: Duration) -> anyhow::Result<SdkTracerProvider> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(OtlpHttpClient::new(timeout)?)
        .with_endpoint(traces_url)
        .with_timeout(timeout)
        .build()
        .map_err(|e| anyhow::anyhow!("building the OTLP span exporter: {e}"))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("spacewake")
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_attribute(opentelemetry::KeyValue::new(
            "process.pid",
            i64::from(std::process::id()),
        ))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// The OTLP/HTTP traces URL for a base endpoint (`http://host:4318` →
/// `http://host:4318/v1/traces`; an endpoint already ending in `/v1/traces`
/// is kept). `http://` and `https://` are accepted.
pub fn traces_url(endpoint: &str) -> anyhow::Result<String> {
    let endpoint = endpoint.trim();
    let lower = endpoint.to_ascii_lowercase();
    anyhow::ensure!(
        lower.starts_with("http://") || lower.starts_with("https://"),
        "OTLP endpoint {endpoint}: expected an http:// or https:// URL such as http://127.0.0.1:4318"
    );
    let base = endpoint.trim_end_matches('/');
    let url = if base.ends_with(TRACES_PATH) {
        base.to_string()
    } else {
        format!("{base}{TRACES_PATH}")
    };
    let uri: http::Uri = url
        .parse()
        .map_err(|e| anyhow::anyhow!("OTLP endpoint {endpoint}: {e}"))?;
    anyhow::ensure!(
        uri.host().is_some_and(|h| !h.is_empty()),
        "OTLP endpoint {endpoint}: no host"
    );
    Ok(url)
}

fn timeout_from_env() -> Duration {
    std::env::var("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_TIMEOUT"))
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .map_or(DEFAULT_TIMEOUT, Duration::from_millis)
}

/// The OTLP exporter's HTTP client: [`BlockingHttp`], logging a
/// failing collector once per outage rather than once per batch.
#[derive(Debug)]
pub struct OtlpHttpClient {
    http: BlockingHttp,
    /// Set while the last export failed.
    failing: AtomicBool,
}

impl OtlpHttpClient {
    pub fn new(timeout: Duration) -> anyhow::Result<Self> {
        Ok(OtlpHttpClient {
            http: BlockingHttp::new(timeout, MAX_RESPONSE_BODY)
                .map_err(|e| anyhow::anyhow!("making the OTLP HTTP client: {e}"))?,
            failing: AtomicBool::new(false),
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpHttpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let result = self.http.send_blocking(&request);
        let ok = matches!(&result, Ok(r) if r.status().is_success());
        let was_failing = self.failing.swap(!ok, Ordering::Relaxed);
        match (&result, was_failing) {
            (Err(e), false) => {
                tracing::warn!(error = %e, "OpenTelemetry span export failed; spans are dropped until the collector is reachable");
            }
            (Ok(r), false) if !ok => {
                tracing::warn!(status = r.status().as_u16(), url = %request.uri(), "OpenTelemetry collector refused spans");
            }
            (_, true) if ok => tracing::info!("OpenTelemetry span export recovered"),
            _ => {}
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_url_appends_the_signal_path() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector/otlp/v1/traces").unwrap(),
            "http://collector/otlp/v1/traces"
        );
        assert_eq!(
            traces_url("https://collector:4318").unwrap(),
            "https://collector:4318/v1/traces"
        );
        assert!(traces_url("collector:4318").is_err());
        assert!(traces_url("http://").is_err());
    }
}
