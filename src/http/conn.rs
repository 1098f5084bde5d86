//! The accept loop: connections and their limits (`spec/serving-loop.md`,
//! *Connection limits*).
//!
//! Our own loop over hyper's HTTP/1 connection rather than `axum::serve`,
//! so that a connection that never finishes cannot be held for ever: a cap
//! on connections per peer address, an idle timeout until a connection's
//! first byte, a header-read timeout from then on (and for each next
//! request of a kept-alive connection), and, in `session.rs`, a deadline
//! for a WebSocket to open its session.

use crate::metrics::{Counter, Counters};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// The connection knobs (`serve` flags); `None` or 0 switches one off.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// From a request's first byte to the end of its head.
    pub header_read: Option<Duration>,
    /// From accept to a connection's first byte.
    pub idle: Option<Duration>,
    /// Connections one peer address may hold at once (0: no cap).
    pub per_peer: usize,
}

/// Addresses the per-peer cap does not apply to: on a fleet, the other
/// hosts', each of which opens one connection per session it relays here
/// (kept current by `relay::keep_fleet_addresses` from the registry).
pub type Uncapped = Arc<std::sync::RwLock<std::collections::HashSet<IpAddr>>>;

/// The peer address of the connection a request came on, as a request
/// extension (absent when the router is served some other way, as in the
/// benchmarks).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

/// How many connections each peer address holds.
#[derive(Default)]
struct PeerTable {
    held: Mutex<HashMap<IpAddr, usize>>,
}

impl PeerTable {
    /// A guard for one more connection from `ip`, or `None` at the cap.
    fn admit(self: &Arc<Self>, ip: IpAddr, cap: usize) -> Option<PeerGuard> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = held.entry(ip).or_insert(0);
        if cap > 0 && *n >= cap {
            return None;
        }
        *n += 1;
        Some(PeerGuard {
            table: self.clone(),
            ip,
        })
    }
}

/// One connection's place in its peer's count, given back when the
/// connection's socket is dropped (also after a WebSocket upgrade, since
/// the upgraded stream owns the socket and with it this guard).
struct PeerGuard {
    table: Arc<PeerTable>,
    ip: IpAddr,
}

impl Drop for PeerGuard {
    fn drop(&mut self) {
        let mut held = self.table.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.ip);
            }
        }
    }
}

/// A connection's socket, with its peer guard and whether the client sent
/// anything since the server last wrote: a header-read timeout with
/// nothing read since the last response is an idle kept-alive connection,
/// not a slow head.
struct Watched {
    tcp: TcpStream,
    read_since_write: Arc<AtomicBool>,
    _peer: PeerGuard,
    _open: OpenGauge,
}

/// The `connections.open` gauge, held by the socket.
struct OpenGauge(Arc<Counters>);

impl Drop for OpenGauge {
    fn drop(&mut self) {
        self.0.add_host(Counter::ConnectionsOpen, -1);
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.tcp).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.read_since_write.store(true, Ordering::Relaxed);
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.tcp).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.read_since_write.store(false, Ordering::Relaxed);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.read_since_write.store(false, Ordering::Relaxed);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

/// Serves `app` on `listener` until `stop` resolves, then lets the plain
/// HTTP requests in flight finish (upgraded WebSockets end with the host's
/// shutdown signal, not here).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    uncapped: Uncapped,
    counters: Arc<Counters>,
    stop: impl Future<Output = ()>,
) {
    let peers = Arc::new(PeerTable::default());
    // Every connection task holds a receiver: `closed()` on the sender
    // says they are all gone.
    let (draining, drain_rx) = tokio::sync::watch::channel(false);
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, mostly: wait rather than spin.
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let uncapped = uncapped
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&peer.ip());
        let cap = if uncapped { 0 } else { limits.per_peer };
        let Some(guard) = peers.admit(peer.ip(), cap) else {
            counters.add_host(Counter::ConnectionsRefusedPerPeer, 1);
            refuse_at_cap(tcp);
            continue;
        };
        counters.add_host(Counter::ConnectionsAccepted, 1);
        counters.add_host(Counter::ConnectionsOpen, 1);
        let open = OpenGauge(counters.clone());
        // Sessions exchange small frames, and Nagle's algorithm with
        // delayed ACKs would hold each for up to 40 ms.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let task = Connection {
            tcp,
            peer,
            guard,
            open,
            app: app.clone(),
            limits,
            counters: counters.clone(),
            drain: drain_rx.clone(),
        };
        tokio::spawn(task.run());
    }
    drop(listener);
    drop(drain_rx);
    let _ = draining.send(true);
    draining.closed().await;
}

/// At the per-peer cap: a short answer if the socket takes it at once, then
/// the close (no task, no waiting: the point is to hold nothing).
fn refuse_at_cap(tcp: TcpStream) {
    const BODY: &str =
        r#"{"error":{"code":"overloaded","message":"too many connections from this address"}}"#;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = tcp.try_write(answer.as_bytes());
}

struct Connection {
    tcp: TcpStream,
    peer: SocketAddr,
    guard: PeerGuard,
    open: OpenGauge,
    app: Router,
    limits: ConnLimits,
    counters: Arc<Counters>,
    drain: tokio::sync::watch::Receiver<bool>,
}

impl Connection {
    async fn run(mut self) {
        // Until the first byte, the idle timeout: a connection that sends
        // nothing holds a descriptor and a peer slot for nothing.
        if let Some(idle) = self.limits.idle {
            let mut first = [0u8; 1];
            tokio::select! {
                r = tokio::time::timeout(idle, self.tcp.peek(&mut first)) => match r {
                    Ok(Ok(n)) if n > 0 => {}
                    Ok(_) => return,
                    Err(_) => {
                        self.counters.add_host(Counter::ConnectionsIdleTimeout, 1);
                        return;
                    }
                },
                () = drained(&mut self.drain) => return,
            }
        }
        let read_since_write = Arc::new(AtomicBool::new(false));
        let io = TokioIo::new(Watched {
            tcp: self.tcp,
            read_since_write: read_since_write.clone(),
            _peer: self.guard,
            _open: self.open,
        });
        let app = self.app;
        let peer = self.peer;
        let svc = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
            req.extensions_mut().insert(Peer(peer));
            let mut app = app.clone();
            async move {
                let req = req.map(axum::body::Body::new);
                tower_service::Service::call(&mut app, req).await
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_read);
        let conn = builder.serve_connection(io, svc).with_upgrades();
        tokio::pin!(conn);
        let result = tokio::select! {
            r = conn.as_mut() => r,
            () = drained(&mut self.drain) => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = result {
            if e.is_timeout() {
                // Nothing read since the last response: a kept-alive
                // connection that sent no next request.
                let c = if read_since_write.load(Ordering::Relaxed) {
                    Counter::ConnectionsHeaderTimeout
                } else {
                    Counter::ConnectionsIdleTimeout
                };
                self.counters.add_host(c, 1);
            } else {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
    }
}

/// Resolves once the server stops accepting.
async fn drained(rx: &mut tokio::sync::watch::Receiver<bool>) {
    // The borrowed value is not `Send`: dropped here, not held.
    let _ = rx.wait_for(|d| *d).await.map(|_| ());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_per_peer_cap_counts_live_guards_only() {
        let t = Arc::new(PeerTable::default());
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let g1 = t.admit(a, 2).unwrap();
        let _g2 = t.admit(a, 2).unwrap();
        assert!(t.admit(a, 2).is_none(), "a third from one address");
        assert!(t.admit(b, 2).is_some(), "another address has its own count");
        drop(g1);
        assert!(
            t.admit(a, 2).is_some(),
            "a closed connection frees its slot"
        );
        assert!(t.admit(a, 0).is_some(), "0: no cap");
    }
}
