//! The broker's HTTP client: one `reqwest` client (rustls) whose every hop
//! goes through the egress policy.
//!
//! Redirects are followed here, not by the client, so each hop's URL is
//! checked ([`policy::check_absolute`]) before it is requested, a hop to
//! another origin drops `Authorization`, and the sixth is an error. Names
//! are resolved by [`CheckingResolver`], which refuses a name any of whose
//! addresses is forbidden: the check happens after DNS, on the very
//! addresses the connection will use, so a name that changes its answer
//! between a check and a connect cannot slip through. The body is read in
//! chunks up to the size cap; past it the request is an error, never a
//! truncated result.

use super::policy::{self, Allowlist};
use super::{FetchSpec, Outcome};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The time and size bounds of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchLimits {
    pub connect_timeout: Duration,
    /// From the first byte sent to the last byte received, redirects included.
    pub total_timeout: Duration,
    pub max_response_bytes: usize,
}

impl Default for FetchLimits {
    fn default() -> Self {
        FetchLimits {
            connect_timeout: Duration::from_secs(5),
            total_timeout: Duration::from_secs(30),
            max_response_bytes: 5 << 20,
        }
    }
}

/// A resolver error that is the policy's refusal, recognised again in the
/// client's error chain.
#[derive(Debug)]
struct EgressRefused(String);

impl std::fmt::Display for EgressRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for EgressRefused {}

/// Resolves names and refuses any whose addresses the policy forbids (a
/// name on the allowlist excepted: its port was checked with the URL).
struct CheckingResolver {
    allow: Allowlist,
}

impl reqwest::dns::Resolve for CheckingResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        let exempt = self.allow.lists_name(&host);
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if !exempt {
                for a in &addrs {
                    if let Some(why) = policy::forbidden_address(a.ip()) {
                        let e = EgressRefused(format!("{host} resolves to {}, {why}", a.ip()));
                        return Err(Box::new(e) as Box<dyn std::error::Error + Send + Sync>);
                    }
                }
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Sends requests under the policy.
pub struct HttpFetcher {
    client: reqwest::Client,
    origin: url::Url,
    allow: Allowlist,
    limits: FetchLimits,
}

impl HttpFetcher {
    pub fn new(origin: url::Url, allow: Allowlist, limits: FetchLimits) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(limits.connect_timeout)
            .dns_resolver(Arc::new(CheckingResolver {
                allow: allow.clone(),
            }))
            // No ambient proxy from the environment: the policy decides.
            .no_proxy()
            .user_agent(concat!("spacewake/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("the effect broker's HTTP client: {e}"))?;
        Ok(HttpFetcher {
            client,
            origin,
            allow,
            limits,
        })
    }

    /// The request, its redirects followed, its body whole: never longer
    /// than the total timeout.
    pub async fn fetch(&self, spec: &FetchSpec) -> Outcome {
        let total = self.limits.total_timeout;
        match tokio::time::timeout(total, self.fetch_hops(spec)).await {
            Ok(o) => o,
            Err(_) => Outcome::failed(
                "timeout",
                format!("no complete answer within {} ms", total.as_millis()),
            ),
        }
    }

    async fn fetch_hops(&self, spec: &FetchSpec) -> Outcome {
        let checked = match policy::check_url(&spec.url, &self.origin, &self.allow) {
            Ok(c) => c,
            Err(r) => return Outcome::Refused(r.0),
        };
        let mut url = checked.url;
        let Ok(mut method) = reqwest::Method::from_bytes(spec.method.as_bytes()) else {
            return Outcome::failed(
                "request",
                format!("{:?} is not an HTTP method", spec.method),
            );
        };
        let mut body = spec.body.clone();
        let mut authorization = true;
        for hop in 0..=policy::MAX_REDIRECTS {
            let mut req = self.client.request(method.clone(), url.clone());
            for (k, v) in &spec.headers {
                if !authorization && k.eq_ignore_ascii_case("authorization") {
                    continue;
                }
                req = req.header(k.as_str(), v.as_str());
            }
            if let Some(b) = &body {
                req = req.body(b.clone());
            }
            let mut resp = match req.send().await {
                Ok(r) => r,
                Err(e) => return classify(&e),
            };
            let status = resp.status();
            let location = resp
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .map(str::to_string);
            if let (true, Some(loc)) = (status.is_redirection(), location) {
                if hop == policy::MAX_REDIRECTS {
                    return Outcome::failed(
                        "tooManyRedirects",
                        format!("more than {} redirects", policy::MAX_REDIRECTS),
                    );
                }
                let next = match url.join(&loc) {
                    Ok(n) => n,
                    Err(e) => {
                        return Outcome::failed("request", format!("a bad redirect {loc:?}: {e}"))
                    }
                };
                let next = match policy::check_absolute(next, &self.allow) {
                    Ok(c) => c.url,
                    Err(r) => return Outcome::Refused(format!("a redirect to {}", r.0)),
                };
                if policy::changes_origin(&url, &next) {
                    authorization = false;
                }
                // As browsers do: 303 always, 301/302 after a POST, become GET.
                if status == reqwest::StatusCode::SEE_OTHER
                    || (method == reqwest::Method::POST
                        && (status == reqwest::StatusCode::MOVED_PERMANENTLY
                            || status == reqwest::StatusCode::FOUND))
                {
                    method = reqwest::Method::GET;
                    body = None;
                }
                url = next;
                continue;
            }
            let cap = self.limits.max_response_bytes;
            if resp.content_length().is_some_and(|n| n > cap as u64) {
                return too_large(cap);
            }
            let media_type = resp
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|c| c.to_str().ok())
                .and_then(|c| c.split(';').next())
                .map(|c| c.trim().to_ascii_lowercase())
                .filter(|c| !c.is_empty())
                .unwrap_or_else(|| "application/octet-stream".to_string());
            let mut bytes = Vec::new();
            loop {
                match resp.chunk().await {
                    Ok(Some(chunk)) => {
                        if bytes.len() + chunk.len() > cap {
                            return too_large(cap);
                        }
                        bytes.extend_from_slice(&chunk);
                    }
                    Ok(None) => break,
                    Err(e) => return classify(&e),
                }
            }
            return Outcome::Response {
                status: status.as_u16(),
                media_type,
                body: bytes,
            };
        }
        unreachable!("the loop returns on its last hop")
    }
}

fn too_large(cap: usize) -> Outcome {
    Outcome::failed(
        "tooLarge",
        format!("the response is larger than {cap} bytes"),
    )
}

/// A client error as an outcome: the policy's refusal if the resolver
/// refused, else why the request failed.
fn classify(e: &reqwest::Error) -> Outcome {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<EgressRefused>() {
            return Outcome::Refused(r.0.clone());
        }
        source = s.source();
    }
    if e.is_timeout() {
        Outcome::failed("timeout", "the server did not answer in time")
    } else if e.is_connect() {
        Outcome::failed(
            "unreachable",
            format!("could not connect: {}", root_cause(e)),
        )
    } else {
        Outcome::failed("request", root_cause(e))
    }
}

/// The innermost cause of a client error (reqwest's own message says
/// little: "error sending request").
pub(super) fn root_cause(e: &reqwest::Error) -> String {
    let mut last = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        last = s.to_string();
        source = s.source();
    }
    last
}
