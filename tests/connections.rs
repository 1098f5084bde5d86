//! Connection limits on a real `spacewake serve` process, over real
//! sockets on 127.0.0.1 (`spec/serving-loop.md`, *Connection limits*):
//! connections that drip a request head, send nothing, or upgrade to a
//! WebSocket and never open a session are closed at their knob's limit and
//! counted, one peer address cannot hold more than its cap, and a real
//! session is served all the while.

mod common;

use common::server::{wait_for, Server};
use common::wire::{connect, deploy, send};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use spacewake::protocol::{Identity, ServerMessage};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

/// Whether the server closed `s` (end of stream or reset) within `limit`.
fn closed_by_server(s: &mut TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let t = Instant::now();
    let mut buf = [0u8; 1024];
    while t.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

/// A WebSocket upgrade (the handshake only, no `open`) that keeps pinging
/// the server and answering its pings until the server closes it; the
/// close code it got.
async fn unopened_websocket(url: String) -> Option<u16> {
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if ws.send(Message::Ping(vec![1].into())).await.is_err() {
                    return None;
                }
            }
            m = ws.next() => match m {
                Some(Ok(Message::Close(f))) => return f.map(|f| u16::from(f.code)),
                // Reading answers the server's pings.
                Some(Ok(_)) => {}
                _ => return None,
            },
        }
    }
}

/// The attack of issue 31 (100 dripping heads, 60 silent sockets, 40
/// unopened WebSockets answering pings), all held at once from one
/// address with the per-peer cap off: each kind is closed at its own limit
/// and counted as such, and a session opened meanwhile deploys, sends and
/// keeps going past every limit (an opened session is not subject to the
/// open deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_never_finish_are_closed_while_sessions_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            "--header-read-timeout-ms",
            "500",
            "--idle-timeout-ms",
            "800",
            // Room for the real session's client to send its `open` on a
            // loaded machine.
            "--ws-open-timeout-ms",
            "1500",
            // Longer than the test: only the open deadline may end the
            // unopened WebSockets.
            "--session-timeout-ms",
            "60000",
            "--max-connections-per-peer",
            "0",
        ],
    );
    let addr = server.addr.clone();
    let counter = |name: &str| server.host_counter("connections", name);

    // Heads dripped one header line every 100 ms, for ever.
    let drippers: Vec<_> = (0..100)
        .map(|i| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).unwrap();
                let clone = s.try_clone().unwrap();
                let mut line = 0;
                let _ = s.write_all(b"GET /api/health/stats HTTP/1.1\r\n");
                while s
                    .write_all(format!("X-Drip-{i}-{line}: a\r\n").as_bytes())
                    .is_ok()
                {
                    line += 1;
                    std::thread::sleep(Duration::from_millis(100));
                    if line > 300 {
                        break;
                    }
                }
                clone
            })
        })
        .collect();
    // Connections that send nothing.
    let mut silent: Vec<TcpStream> = (0..60)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    // WebSockets that never open a session, pinging all along.
    let unopened: Vec<_> = (0..40)
        .map(|_| tokio::spawn(unopened_websocket(format!("ws://{addr}/ws"))))
        .collect();

    // Meanwhile, a real session works.
    let owner = Identity::generate();
    let (mut c, _) = connect(&server, &owner, "held").await;
    let piece = deploy(&mut c, json!({"value": 0})).await;
    let r = send(&mut c, &piece, "increment", json!({})).await;
    assert!(matches!(r, ServerMessage::Ack(_)), "{r:?}");

    for ws in unopened {
        let code = tokio::time::timeout(Duration::from_secs(10), ws)
            .await
            .expect("an unopened WebSocket is closed by its deadline")
            .unwrap();
        assert_eq!(code, Some(1008), "closed as a policy violation");
    }
    wait_for("the dripped heads to time out", || {
        counter("closedByHeaderTimeout") >= 100
    });
    wait_for("the silent connections to time out", || {
        counter("closedIdle") >= 60
    });
    assert_eq!(counter("closedNoSessionOpened"), 40);
    for s in silent.iter_mut() {
        assert!(closed_by_server(s, Duration::from_secs(2)));
    }
    for d in drippers {
        let mut s = d.join().unwrap();
        assert!(closed_by_server(&mut s, Duration::from_secs(2)));
    }
    // Past every limit, the opened session is still served.
    let r = send(&mut c, &piece, "increment", json!({})).await;
    assert!(matches!(r, ServerMessage::Ack(_)), "{r:?}");
    assert_eq!(server.host_counter("sessions", "open"), 1);
    // The held ones are gone: what is left is the session's connection
    // and the one asking.
    wait_for("the open connections to drop", || counter("open") <= 2);
    assert!(counter("accepted") >= 201);
    assert_eq!(counter("refusedPerPeerCap"), 0);
    drop(c);
}

/// A kept-alive connection that answers one request and then sends
/// nothing is closed (as idle) at the header-read timeout; one that starts
/// its next request and never finishes the head, as a header timeout.
#[test]
fn a_kept_alive_connection_waits_for_its_next_request_within_the_header_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            "--header-read-timeout-ms",
            "400",
            "--idle-timeout-ms",
            "5000",
        ],
    );
    let mut s = TcpStream::connect(&server.addr).unwrap();
    let req = format!(
        "GET /api/health/stats HTTP/1.1\r\nHost: {}\r\n\r\n",
        server.addr
    );
    s.write_all(req.as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let t = Instant::now();
    assert!(closed_by_server(&mut s, Duration::from_secs(5)));
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    wait_for("the idle close to be counted", || {
        server.host_counter("connections", "closedIdle") == 1
    });
    assert_eq!(
        server.host_counter("connections", "closedByHeaderTimeout"),
        0
    );
}

/// One peer address holds at most its cap of connections: the next is
/// closed at accept (with a 503 if it takes it) and counted, another
/// address is still served, and a closed connection frees its slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peer_address_holds_at_most_its_cap_of_connections() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            "--max-connections-per-peer",
            "8",
            "--idle-timeout-ms",
            "60000",
        ],
    );
    let addr = server.addr.clone();
    let held: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    wait_for("the eight to be accepted", || {
        // Asked from another address, since 127.0.0.1 is at its cap.
        let stats = get_from("127.0.0.2", &addr, "/api/health/stats");
        stats.contains("\"accepted\":") && {
            let v: serde_json::Value =
                serde_json::from_str(stats.split_once("\r\n\r\n").unwrap().1).unwrap();
            v["servingLoop"]["connections"]["open"].as_i64() >= Some(9)
        }
    });
    let mut ninth = TcpStream::connect(&addr).unwrap();
    ninth
        .write_all(b"GET /api/health/stats HTTP/1.1\r\nHost: x\r\n\r\n")
        .ok();
    let mut answer = String::new();
    ninth
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = ninth.read_to_string(&mut answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 503"),
        "{answer}"
    );
    let stats = get_from("127.0.0.2", &addr, "/api/health/stats");
    assert!(
        stats.starts_with("HTTP/1.1 200"),
        "another address is served"
    );
    let body: serde_json::Value =
        serde_json::from_str(stats.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert!(body["servingLoop"]["connections"]["refusedPerPeerCap"].as_i64() >= Some(1));

    drop(held);
    wait_for("the slots to be given back", || {
        common::server::try_http(&addr, "GET", "/api/health/stats", &[], b"")
            .is_ok_and(|(status, _)| status == 200)
    });
}

/// A plain request from a source address of our choosing on the loopback
/// network (all of 127/8 is this machine), to the server on 127.0.0.1.
fn get_from(source: &str, addr: &str, path: &str) -> String {
    use std::os::fd::FromRawFd;
    let target: std::net::SocketAddrV4 = addr.parse().unwrap();
    let source: std::net::Ipv4Addr = source.parse().unwrap();
    // SAFETY: a fresh socket bound and connected through libc, then owned
    // by the TcpStream.
    let mut s = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let sa = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(ip).to_be(),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let local = sa(source, 0);
        assert_eq!(
            libc::bind(fd, &local as *const _ as *const libc::sockaddr, len),
            0
        );
        let remote = sa(*target.ip(), target.port());
        assert_eq!(
            libc::connect(fd, &remote as *const _ as *const libc::sockaddr, len),
            0
        );
        TcpStream::from_raw_fd(fd)
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// A client's `close(1000)` is answered with a close frame carrying 1000
/// (the close handshake completes: the client does not see 1006).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_close_is_answered_with_its_code() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", server.addr))
        .await
        .unwrap();
    // The server's challenge first.
    let first = ws.next().await.unwrap().unwrap();
    assert!(matches!(first, Message::Text(_)), "{first:?}");
    ws.send(Message::Close(Some(
        tokio_tungstenite::tungstenite::protocol::CloseFrame {
            code: tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode::Normal,
            reason: "done".into(),
        },
    )))
    .await
    .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(f))) => return f.map(|f| u16::from(f.code)),
                Some(Ok(_)) => continue,
                _ => return None,
            }
        }
    })
    .await
    .expect("an answer within 10 s");
    assert_eq!(answer, Some(1000));
}
