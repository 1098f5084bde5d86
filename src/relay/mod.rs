//! The relay: on a fleet, any host answers for any space (`spec/fleet.md`,
//! *The relay*).
//!
//! A space is served by the one host holding its lease. A session, an
//! ingest or an operator action that reaches another host is passed on to
//! that holder, found in the fleet's host registry (where each host
//! publishes its address and key): a session by a WebSocket to the holder
//! that carries the client's own `open` and then every frame both ways
//! ([`pipe`]), a request by the same request sent on. The holder decides
//! everything as for a direct client: it checks the client's signature
//! over the challenge the client signed, and the space's access rules.
//!
//! Host to host, every request is signed by the sending host's key over
//! the time, both hosts' names, the method, path, body and what it vouches
//! for (`protocol::RelayRequest`); the receiver checks it against the key
//! the registry holds for the sender, and takes a session's challenge
//! nonce once only.

pub mod pipe;

use crate::clock::Clock;
use crate::metrics::{Counter, Counters};
use crate::protocol::{Identity, RelayRequest};
use crate::store::postgres::{PgStore, RegisteredHost};
use axum::http::HeaderMap;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The sending host's registered name.
pub const FROM: &str = "x-spacewake-relay-from";
/// When it signed (ms since the epoch, its clock).
pub const TIME: &str = "x-spacewake-relay-time";
/// What it vouches for: the session's challenge nonce, or the operator
/// whose signature it checked.
pub const EXTRA: &str = "x-spacewake-relay-extra";
/// Its signature over [`RelayRequest::message`].
pub const SIGNATURE: &str = "x-spacewake-relay-signature";

/// How far a relay request's time may be from the receiver's clock.
pub const WINDOW_MS: u64 = 30_000;
/// How long a host waits to reach the holder before answering
/// `heldElsewhere` itself.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long it waits for the holder's answer to a relayed open or request.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a registry row read is used again: a holder's key and address
/// never change (a new process is a new holder), only its liveness.
const REGISTRY_CACHE_MS: u64 = 2_000;

/// A WebSocket to the holder.
pub type Upstream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Why the holder could not be reached; the client is then answered
/// `heldElsewhere`, to retry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreachable {
    #[error("the holder {0} has not registered an address (an operator command's store, or an older host)")]
    NotRegistered(String),
    #[error("the holder {0} has not sent a heartbeat within a lease TTL")]
    NotAlive(String),
    #[error("the holder {holder} at {advertise} could not be reached: {why}")]
    Failed {
        holder: String,
        advertise: String,
        why: String,
    },
    #[error("the registry could not be read: {0}")]
    Registry(String),
}

/// Why a relay request to this host was refused (answered 401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("this host serves no relay (it is not on a fleet's database)")]
    NoRelay,
    #[error("{FROM} {0:?} is not a registered, live host of this fleet")]
    Unknown(String),
    #[error("{TIME} must be ms since the epoch within {WINDOW_MS} ms of this host's clock")]
    Stale,
    #[error("the relay signature does not verify: {0}")]
    Signature(String),
    #[error("this session's challenge was already used")]
    Replayed,
    #[error("{EXTRA} is not a session challenge (43 characters of base64url)")]
    NotAChallenge,
    #[error("the registry could not be read: {0}")]
    Registry(String),
}

/// A request another host relayed here, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relayed {
    /// The sending host's name.
    pub from: String,
    /// What it vouched for ([`EXTRA`]).
    pub extra: String,
}

/// This host's side of the relay, on a fleet's database.
pub struct Relay {
    key: Identity,
    store: PgStore,
    clock: Arc<dyn Clock>,
    counters: Arc<Counters>,
    http: reqwest::Client,
    /// Registry rows read lately, with when.
    registry: Mutex<HashMap<String, (RegisteredHost, u64)>>,
    /// Challenge nonces of relayed sessions accepted, with when: each is
    /// taken once.
    nonces: Mutex<HashMap<String, u64>>,
}

impl Relay {
    pub fn new(key: Identity, store: PgStore, counters: Arc<Counters>) -> anyhow::Result<Relay> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(ANSWER_TIMEOUT)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Relay {
            key,
            clock: store.clock().clone(),
            store,
            counters,
            http,
            registry: Mutex::new(HashMap::new()),
            nonces: Mutex::new(HashMap::new()),
        })
    }

    /// This host's did (its key's, as the registry publishes it).
    pub fn did(&self) -> String {
        self.key.did()
    }

    /// This host's registered name (its lease-holder name).
    pub fn me(&self) -> &str {
        self.store.holder()
    }

    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// The registry's row for `holder`, from the cache when fresh.
    fn lookup(&self, holder: &str) -> Result<Option<RegisteredHost>, String> {
        let now = self.clock.now_ms();
        if let Some((row, at)) = self.registry.lock().unwrap().get(holder) {
            if now.saturating_sub(*at) < REGISTRY_CACHE_MS {
                return Ok(Some(row.clone()));
            }
        }
        let store = self.store.clone();
        let h = holder.to_string();
        let row =
            crate::store::off_runtime(move || store.registered(&h)).map_err(|e| e.to_string())?;
        if let Some(r) = &row {
            self.registry
                .lock()
                .unwrap()
                .insert(holder.to_string(), (r.clone(), now));
        }
        Ok(row)
    }

    /// Where `holder` can be reached, if it registered and is alive.
    fn target(&self, holder: &str) -> Result<RegisteredHost, Unreachable> {
        match self.lookup(holder) {
            Err(e) => Err(Unreachable::Registry(e)),
            Ok(None) => Err(Unreachable::NotRegistered(holder.to_string())),
            Ok(Some(r)) if !r.alive => Err(Unreachable::NotAlive(holder.to_string())),
            Ok(Some(r)) => Ok(r),
        }
    }

    /// The headers that sign a request to `to`.
    fn sign(
        &self,
        to: &str,
        method: &str,
        path_and_query: &str,
        extra: &str,
        body: &[u8],
    ) -> [(&'static str, String); 4] {
        let time_ms = self.clock.now_ms();
        let signature = RelayRequest {
            time_ms,
            from: self.me(),
            to,
            method,
            path_and_query,
            extra,
            body,
        }
        .sign(&self.key);
        [
            (FROM, self.me().to_string()),
            (TIME, time_ms.to_string()),
            (EXTRA, extra.to_string()),
            (SIGNATURE, signature),
        ]
    }

    /// Opens a session on `holder` for a client: connects to its `/ws` as
    /// this host, vouching for the challenge `nonce` the client signed,
    /// sends the client's `open` frame and waits for the holder's answer.
    /// Returns the connection and that answer (an `opened` or the holder's
    /// refusal), to pass on.
    pub async fn open_session(
        &self,
        holder: &str,
        nonce: &str,
        open: tokio_tungstenite::tungstenite::Message,
    ) -> Result<(Upstream, tokio_tungstenite::tungstenite::Message), Unreachable> {
        use futures_util::{SinkExt, StreamExt};
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let target = self.target(holder)?;
        let failed = |why: String| Unreachable::Failed {
            holder: holder.to_string(),
            advertise: target.advertise.clone(),
            why,
        };
        let url = format!("ws://{}/ws", target.advertise);
        let mut request = url
            .as_str()
            .into_client_request()
            .map_err(|e| failed(e.to_string()))?;
        for (name, value) in self.sign(holder, "GET", "/ws", nonce, b"") {
            let value = value
                .parse()
                .map_err(|_| failed(format!("{name} is not a header value")))?;
            request.headers_mut().insert(name, value);
        }
        let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
            .max_message_size(Some(crate::protocol::TRANSPORT_MAX_MESSAGE_BYTES))
            .max_frame_size(Some(crate::protocol::TRANSPORT_MAX_MESSAGE_BYTES));
        let connect = tokio_tungstenite::connect_async_with_config(request, Some(config), true);
        let (mut up, _) = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| failed("no connection within 2 s".into()))?
            .map_err(|e| failed(e.to_string()))?;
        up.send(open).await.map_err(|e| failed(e.to_string()))?;
        let answer = async {
            while let Some(m) = up.next().await {
                match m {
                    Ok(
                        m @ (tokio_tungstenite::tungstenite::Message::Text(_)
                        | tokio_tungstenite::tungstenite::Message::Binary(_)),
                    ) => return Ok(m),
                    Ok(tokio_tungstenite::tungstenite::Message::Close(c)) => {
                        return Err(format!("closed before answering: {c:?}"))
                    }
                    Ok(_) => continue,
                    Err(e) => return Err(e.to_string()),
                }
            }
            Err("closed before answering".to_string())
        };
        let answer = tokio::time::timeout(ANSWER_TIMEOUT, answer)
            .await
            .map_err(|_| failed("no answer to the open within 15 s".into()))?
            .map_err(failed)?;
        Ok((up, answer))
    }

    /// Sends an HTTP request on to `holder` (an ingest, a warm request, an
    /// operator action): the same method, path and body, the client's own
    /// `headers` (its signature), and this host's, vouching for `extra`.
    /// Returns the holder's answer as it came.
    pub async fn forward(
        &self,
        holder: &str,
        method: &axum::http::Method,
        path_and_query: &str,
        headers: &[(&str, &str)],
        extra: &str,
        body: axum::body::Bytes,
    ) -> Result<axum::response::Response, Unreachable> {
        let target = self.target(holder)?;
        let failed = |why: String| Unreachable::Failed {
            holder: holder.to_string(),
            advertise: target.advertise.clone(),
            why,
        };
        let url = format!("http://{}{}", target.advertise, path_and_query);
        let method = reqwest::Method::from_bytes(method.as_str().as_bytes())
            .map_err(|e| failed(e.to_string()))?;
        let mut req = self.http.request(method.clone(), &url);
        for (name, value) in headers {
            if !value.is_empty() {
                req = req.header(*name, *value);
            }
        }
        for (name, value) in self.sign(holder, method.as_str(), path_and_query, extra, &body) {
            req = req.header(name, value);
        }
        let answer = req
            .body(body)
            .send()
            .await
            .map_err(|e| failed(e.to_string()))?;
        let status = answer.status().as_u16();
        let mut out = axum::response::Response::builder().status(status);
        for name in ["content-type", "retry-after"] {
            if let Some(v) = answer.headers().get(name) {
                out = out.header(name, v.as_bytes());
            }
        }
        let bytes = answer.bytes().await.map_err(|e| failed(e.to_string()))?;
        out.body(axum::body::Body::from(bytes))
            .map_err(|e| failed(e.to_string()))
    }

    /// Checks a request that says another host relayed it: the sender is
    /// registered and alive, signed within the window, for this host, this
    /// exact request. `Ok(None)` for a request nobody relayed.
    pub fn check(
        &self,
        headers: &HeaderMap,
        method: &str,
        path_and_query: &str,
        body: &[u8],
    ) -> Result<Option<Relayed>, Refusal> {
        let get = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
        let from = get(FROM);
        if from.is_empty() {
            return Ok(None);
        }
        let refused = |r: Refusal| {
            self.counters.add_host(Counter::RelayRefused, 1);
            Err(r)
        };
        let Ok(time_ms) = get(TIME).parse::<u64>() else {
            return refused(Refusal::Stale);
        };
        if time_ms.abs_diff(self.clock.now_ms()) > WINDOW_MS {
            return refused(Refusal::Stale);
        }
        let sender = match self.lookup(from) {
            Err(e) => return refused(Refusal::Registry(e)),
            Ok(Some(r)) if r.alive => r,
            Ok(_) => return refused(Refusal::Unknown(from.to_string())),
        };
        let extra = get(EXTRA);
        let request = RelayRequest {
            time_ms,
            from,
            to: self.me(),
            method,
            path_and_query,
            extra,
            body,
        };
        if let Err(e) = request.verify(&sender.did, get(SIGNATURE)) {
            return refused(Refusal::Signature(e.to_string()));
        }
        Ok(Some(Relayed {
            from: from.to_string(),
            extra: extra.to_string(),
        }))
    }

    /// Another host that holds `space`'s lease live, if one does: an
    /// operator action on it is that host's to do (this one would act on
    /// the space's rows beside a running tenure that does not see it).
    pub fn holder_elsewhere(&self, space: &str) -> Option<crate::host::HostError> {
        let store = self.store.clone();
        let id = space.to_string();
        let held = crate::store::off_runtime(move || store.live_holder(&id)).ok()??;
        (held.0 != self.me()).then(|| crate::host::HostError::HeldElsewhere {
            space: space.to_string(),
            holder: held.0,
            retry_in_ms: held.1,
        })
    }

    /// Takes a relayed session's challenge nonce, refusing one taken
    /// before (a replay of a captured relay request) and anything that is
    /// not a challenge as hosts issue them (so none is ever short enough
    /// to repeat).
    pub fn take_nonce(&self, nonce: &str) -> Result<(), Refusal> {
        let refused = |r: Refusal| {
            self.counters.add_host(Counter::RelayRefused, 1);
            Err(r)
        };
        if nonce.len() != 43 {
            return refused(Refusal::NotAChallenge);
        }
        let now = self.clock.now_ms();
        let mut seen = self.nonces.lock().unwrap();
        // Past twice the window a relay request carrying it is stale anyway.
        seen.retain(|_, at| now.saturating_sub(*at) <= 2 * WINDOW_MS);
        if seen.contains_key(nonce) {
            drop(seen);
            return refused(Refusal::Replayed);
        }
        seen.insert(nonce.to_string(), now);
        Ok(())
    }
}

/// How often the fleet's addresses are read again for the connection cap.
const ADDRESSES_EVERY: Duration = Duration::from_secs(5);

/// Keeps `uncapped` to the addresses of the fleet's live hosts, so the
/// per-peer connection cap does not refuse the connections another host
/// opens to relay its clients' sessions here (one each). Runs for as long
/// as the async runtime does.
pub async fn keep_fleet_addresses(
    relay: Arc<Relay>,
    uncapped: Arc<std::sync::RwLock<std::collections::HashSet<std::net::IpAddr>>>,
) {
    use std::net::ToSocketAddrs;
    loop {
        let store = relay.store.clone();
        let read = tokio::task::spawn_blocking(move || {
            let found = store.fleet_addresses().ok()?;
            // A name resolves here (off the runtime): a host may advertise one.
            Some(
                found
                    .iter()
                    .filter_map(|a| a.to_socket_addrs().ok())
                    .flatten()
                    .map(|a| a.ip())
                    .collect::<std::collections::HashSet<_>>(),
            )
        })
        .await;
        if let Ok(Some(ips)) = read {
            *uncapped.write().unwrap_or_else(|p| p.into_inner()) = ips;
        }
        tokio::time::sleep(ADDRESSES_EVERY).await;
    }
}

/// Who holds a space, from a `heldElsewhere` refusal's details.
pub fn holder_of(e: &crate::protocol::ProtocolError) -> Option<String> {
    if e.code != crate::protocol::ErrorCode::HeldElsewhere {
        return None;
    }
    e.details.as_ref()?["holder"].as_str().map(str::to_string)
}
