//! A relayed session after its open: every frame passed on unchanged, both
//! ways, between the client and the holder, until either ends.
//!
//! The relaying host keeps to the client what a direct session would: it
//! pings a silent client and ends it after the session timeout, and says
//! so when it shuts down. When the connection to the holder breaks (the
//! holder died), the client is told to reconnect — an `unavailable` error,
//! then close 1012 — and resumes with `since` on any host.

use crate::host::Host;
use crate::metrics::Counter;
use crate::protocol::{ErrorCode, ProtocolError};
use crate::session::{end_connection, end_for_shutdown, send_frame, sleep_or_never, Sent};
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame as UpClose;
use tokio_tungstenite::tungstenite::Message as Up;

/// "Service restart" (RFC 6455 registry): the holder went away; reconnect.
pub const CLOSE_RECONNECT: u16 = 1012;

/// "Going away": a silent client.
const CLOSE_AWAY: u16 = 1001;

/// Passes frames between `client` and `up` until one side ends.
pub async fn pipe(
    mut tx: SplitSink<WebSocket, Message>,
    mut rx: SplitStream<WebSocket>,
    up: super::Upstream,
    host: &Host,
) {
    let counters = host.counters().clone();
    let timeout = host.session_timeout();
    let (mut up_tx, mut up_rx) = up.split();
    let mut heard = crate::clock::Stopwatch::start();
    let mut pinged = false;
    let mut shutdown = host.shutdown_signal();
    loop {
        let silence_left = timeout.map(|t| heard.left_of(if pinged { t } else { t / 2 }));
        tokio::select! {
            _ = sleep_or_never(silence_left) => {
                if !pinged {
                    pinged = true;
                    if send_frame(&mut tx, Message::Ping(Default::default()), timeout).await == Sent::Ok {
                        continue;
                    }
                } else {
                    counters.add_host(Counter::SessionsTimedOut, 1);
                    let why = "nothing received within the session timeout";
                    end_connection(&mut tx, None, CLOSE_AWAY, why, timeout).await;
                }
                let _ = up_tx.close().await;
                return;
            }
            from_client = rx.next() => {
                let Some(Ok(m)) = from_client else {
                    // The client is gone: so is its session on the holder.
                    let _ = up_tx.close().await;
                    return;
                };
                heard = crate::clock::Stopwatch::start();
                pinged = false;
                let on = match m {
                    Message::Text(t) => Up::Text(t.as_str().into()),
                    Message::Binary(b) => Up::Binary(b),
                    Message::Ping(_) | Message::Pong(_) => continue,
                    Message::Close(c) => {
                        let _ = up_tx.send(Up::Close(c.map(|c| UpClose {
                            code: CloseCode::from(c.code),
                            reason: c.reason.as_str().into(),
                        }))).await;
                        let bound = timeout.unwrap_or(std::time::Duration::from_secs(5));
                        let _ = tokio::time::timeout(bound, tx.close()).await;
                        return;
                    }
                };
                if up_tx.send(on).await.is_err() {
                    holder_lost(&mut tx, host, timeout).await;
                    return;
                }
            }
            from_holder = up_rx.next() => {
                let back = match from_holder {
                    Some(Ok(Up::Text(t))) => Message::Text(Utf8Bytes::from(t.as_str())),
                    Some(Ok(Up::Binary(b))) => Message::Binary(b),
                    Some(Ok(Up::Close(c))) => {
                        // The holder ended the session (and said why in
                        // the frame before): end it the same way here.
                        let c = c.map(|c| CloseFrame {
                            code: c.code.into(),
                            reason: Utf8Bytes::from(c.reason.as_str()),
                        });
                        let _ = send_frame(&mut tx, Message::Close(c), timeout).await;
                        return;
                    }
                    Some(Ok(_)) => continue,
                    _ => {
                        holder_lost(&mut tx, host, timeout).await;
                        return;
                    }
                };
                if send_frame(&mut tx, back, timeout).await != Sent::Ok {
                    let _ = up_tx.close().await;
                    return;
                }
            }
            true = async { shutdown.wait_for(|down| *down).await.is_ok() } => {
                end_for_shutdown(&mut tx, &counters, timeout).await;
                let _ = up_tx.close().await;
                return;
            }
        }
    }
}

/// The connection to the holder broke: tell the client to reconnect.
async fn holder_lost(
    tx: &mut SplitSink<WebSocket, Message>,
    host: &Host,
    timeout: Option<std::time::Duration>,
) {
    host.counters().add_host(Counter::RelayHolderLost, 1);
    let e = ProtocolError::new(
        ErrorCode::Unavailable,
        "the connection to the space's host broke; reconnect (to any host) and resume from the \
         last seq you saw",
    );
    end_connection(
        tx,
        Some(e),
        CLOSE_RECONNECT,
        "the space's host went away",
        timeout,
    )
    .await;
}
