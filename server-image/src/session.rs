//! The life of one admitted connection, common to every profile.
//!
//! Reads are batched: after one message arrives, whatever else is already buffered is handled
//! too, replies are queued with `feed`, and one `flush` writes the batch. That keeps the echo
//! path near one syscall per batch instead of one per message. The stream is not `split`
//! (which locks on every poll): one task owns it and selects over reads, broadcast messages,
//! topic deliveries, the keepalive tick and shutdown.

use crate::config::Profile;
use crate::state::ServerState;
use crate::stats::Closed;
use crate::topics::Outbox;
use crate::topics::counters::Counters;
use futures_util::{FutureExt, SinkExt, StreamExt};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::broadcast;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message, error::ProtocolError};
use wsload_proto::frame::Format;

pub type Ws = WebSocketStream<TcpStream>;

/// Messages handled before the batch is flushed, so one busy client cannot delay its own
/// replies indefinitely.
const MAX_BATCH: usize = 256;

/// Broadcast messages written in one flush (~130 KB of 64-byte ticks).
const MAX_BROADCAST_FLUSH: usize = 1024;

/// How long to wait for the client's close frame after ours.
const CLOSE_LINGER: Duration = Duration::from_secs(1);

/// What a profile does with each data message.
pub trait Handler: Send {
    /// Handles one data frame (`Text` or `Binary`) of format `format`; pushes replies to `out`.
    fn on_message(&mut self, msg: Message, format: Format, out: &mut Vec<Message>);
}

/// Answers nothing (`sink` and `broadcast`).
pub struct Discard;
impl Handler for Discard {
    fn on_message(&mut self, _: Message, _: Format, _: &mut Vec<Message>) {}
}

/// Sends every data frame back unchanged.
pub struct Echo;
impl Handler for Echo {
    fn on_message(&mut self, msg: Message, _: Format, out: &mut Vec<Message>) {
        out.push(msg);
    }
}

/// The format of a data message (`None` for control frames).
pub fn format_of(msg: &Message) -> Option<Format> {
    match msg {
        Message::Text(_) => Some(Format::Text),
        Message::Binary(b) => Some(Format::of_binary(b).0),
        _ => None,
    }
}

/// Queues `msg` and counts it as sent.
pub async fn feed(
    ws: &mut Ws,
    shared: &ServerState,
    profile: Profile,
    msg: Message,
) -> Result<(), WsError> {
    if let Some(format) = format_of(&msg) {
        let len = msg.len();
        ws.feed(msg).await?;
        shared.stats.sent(profile, format, len);
        Ok(())
    } else {
        ws.feed(msg).await
    }
}

/// Sends a close frame, then waits briefly for the client's, so the client sees the code.
pub async fn close(ws: &mut Ws, code: CloseCode, reason: &'static str) {
    let frame = CloseFrame {
        code,
        reason: reason.into(),
    };
    if ws.close(Some(frame)).await.is_ok() {
        let _ = tokio::time::timeout(CLOSE_LINGER, async {
            while let Some(Ok(_)) = ws.next().await {}
        })
        .await;
    }
}

/// Maps a read/write error to the close code to send (if any) and the close reason.
fn classify(err: &WsError) -> (Option<(CloseCode, &'static str)>, Closed) {
    match err {
        WsError::ConnectionClosed | WsError::AlreadyClosed => (None, Closed::Client),
        WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => (None, Closed::Reset),
        WsError::Capacity(_) => (
            Some((CloseCode::Size, "message too big")),
            Closed::MessageTooBig,
        ),
        WsError::Utf8(_) => (
            Some((CloseCode::Invalid, "invalid UTF-8")),
            Closed::ProtocolError,
        ),
        WsError::Protocol(_) => (
            Some((CloseCode::Protocol, "protocol error")),
            Closed::ProtocolError,
        ),
        WsError::Io(e) if e.kind() == std::io::ErrorKind::ConnectionReset => (None, Closed::Reset),
        _ => (None, Closed::IoError),
    }
}

pub async fn fail(ws: &mut Ws, err: WsError) -> Closed {
    let (code, why) = classify(&err);
    tracing::debug!(error = %err, reason = why.label(), "connection failed");
    if let Some((code, text)) = code {
        close(ws, code, text).await;
    }
    why
}

/// The keepalive clock: one timer per connection, ticking at a quarter of the idle timeout (or
/// at the ping interval when shorter), so idleness is detected within a quarter of the timeout
/// without re-arming a timer on every message.
struct Keepalive {
    ticker: Option<Interval>,
    idle_timeout: Option<Duration>,
    ping_interval: Option<Duration>,
    last_rx: Instant,
    last_ping: Instant,
    rx_since_tick: bool,
}

impl Keepalive {
    fn new(shared: &ServerState) -> Self {
        let idle_timeout = shared.config.idle_timeout;
        let ping_interval = shared.config.ping_interval;
        let period = match (idle_timeout.map(|d| d / 4), ping_interval) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let now = Instant::now();
        let ticker = period.map(|p| {
            let p = p.max(Duration::from_millis(10));
            let mut t = tokio::time::interval_at(now + p, p);
            t.set_missed_tick_behavior(MissedTickBehavior::Delay);
            t
        });
        Keepalive {
            ticker,
            idle_timeout,
            ping_interval,
            last_rx: now,
            last_ping: now,
            rx_since_tick: false,
        }
    }

    async fn tick(&mut self) -> Instant {
        match &mut self.ticker {
            Some(t) => t.tick().await,
            None => std::future::pending().await,
        }
    }

    /// What to do at a tick: `Err` closes the connection as idle, `Ok(true)` sends a ping.
    fn on_tick(&mut self, now: Instant) -> Result<bool, Closed> {
        if std::mem::take(&mut self.rx_since_tick) {
            self.last_rx = now;
        }
        if let Some(idle) = self.idle_timeout
            && now.duration_since(self.last_rx) >= idle
        {
            return Err(Closed::IdleTimeout);
        }
        match self.ping_interval {
            Some(p) if now.duration_since(self.last_ping) >= p => {
                self.last_ping = now;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

async fn recv_broadcast(
    rx: &mut Option<broadcast::Receiver<Message>>,
) -> Result<Message, broadcast::error::RecvError> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn recv_delivery(outbox: &mut Option<Outbox>) -> Option<crate::topics::Delivery> {
    match outbox {
        Some(o) => o.recv().await,
        None => std::future::pending().await,
    }
}

/// Serves `ws` until it ends; returns why it ended. Counting of the close is the caller's.
/// `outbox`: the connection's topic deliveries, written as they come; whatever is left in it
/// when the connection ends is counted as lost to the close.
pub async fn run<H: Handler>(
    ws: &mut Ws,
    shared: &ServerState,
    profile: Profile,
    handler: &mut H,
    broadcast: Option<broadcast::Receiver<Message>>,
    mut outbox: Option<Outbox>,
) -> Closed {
    let why = serve(ws, shared, profile, handler, broadcast, &mut outbox).await;
    if let Some(o) = outbox.as_mut() {
        o.close(&shared.topics.counters);
    }
    why
}

/// Writes a batch of deliveries: counted as delivered once flushed, as lost if the write fails.
async fn deliver(
    ws: &mut Ws,
    shared: &ServerState,
    profile: Profile,
    outbox: &mut Outbox,
    first: crate::topics::Delivery,
    out: &mut Vec<Message>,
) -> Result<(), WsError> {
    let counters: &Counters = &shared.topics.counters;
    let n = outbox.take(first, MAX_BATCH, out, counters);
    match flush_out(ws, shared, profile, out).await {
        Ok(()) => {
            counters.delivered(n);
            Ok(())
        }
        Err(e) => {
            counters.lost_to_close(n);
            Err(e)
        }
    }
}

async fn serve<H: Handler>(
    ws: &mut Ws,
    shared: &ServerState,
    profile: Profile,
    handler: &mut H,
    mut broadcast: Option<broadcast::Receiver<Message>>,
    outbox: &mut Option<Outbox>,
) -> Closed {
    let mut keepalive = Keepalive::new(shared);
    let mut out: Vec<Message> = Vec::new();
    loop {
        tokio::select! {
            biased;
            _ = shared.shutdown.cancelled() => {
                close(ws, CloseCode::Away, "server shutting down").await;
                return Closed::Shutdown;
            }
            first = ws.next() => {
                let mut item = first;
                let mut handled = 0;
                loop {
                    match item {
                        None => return Closed::Client,
                        Some(Err(e)) => {
                            // Replies already queued for earlier messages still go out.
                            let _ = flush_out(ws, shared, profile, &mut out).await;
                            return fail(ws, e).await;
                        }
                        Some(Ok(msg)) => {
                            keepalive.rx_since_tick = true;
                            if let Some(format) = format_of(&msg) {
                                shared.stats.received(profile, format, msg.len());
                                handler.on_message(msg, format, &mut out);
                                // Queued now, not at the end of the batch: once tungstenite
                                // reads the client's close frame it refuses to send data, so
                                // replies to the messages just before a close would be lost.
                                if let Err(e) = feed_out(ws, shared, profile, &mut out).await {
                                    return fail(ws, e).await;
                                }
                            }
                            // Ping, pong and close are answered by tungstenite itself.
                        }
                    }
                    handled += 1;
                    if handled >= MAX_BATCH {
                        break;
                    }
                    match ws.next().now_or_never() {
                        Some(next) => item = next,
                        None => break,
                    }
                }
                if let Err(e) = flush_out(ws, shared, profile, &mut out).await {
                    return fail(ws, e).await;
                }
            }
            msg = recv_broadcast(&mut broadcast) => match msg {
                Ok(msg) => {
                    out.push(msg);
                    // Deliver what is already waiting in one flush, up to a bound that keeps
                    // one write (and the time away from this connection's reads) short.
                    if let Some(rx) = broadcast.as_mut() {
                        while out.len() < MAX_BROADCAST_FLUSH {
                            match rx.try_recv() {
                                Ok(more) => out.push(more),
                                // Skipped here as in `recv`: counted, or a connection that
                                // falls behind while draining would skip uncounted.
                                Err(broadcast::error::TryRecvError::Lagged(n)) => {
                                    shared.stats.broadcast_lagged(n);
                                }
                                Err(_) => break,
                            }
                        }
                    }
                    if let Err(e) = flush_out(ws, shared, profile, &mut out).await {
                        return fail(ws, e).await;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => shared.stats.broadcast_lagged(n),
                Err(broadcast::error::RecvError::Closed) => broadcast = None,
            },
            delivery = recv_delivery(outbox) => match (delivery, outbox.as_mut()) {
                (Some(first), Some(o)) => {
                    if let Err(e) = deliver(ws, shared, profile, o, first, &mut out).await {
                        return fail(ws, e).await;
                    }
                }
                // Every sender is gone: nothing more can come, and nothing is waiting.
                (_, o) => {
                    if let Some(o) = o {
                        o.close(&shared.topics.counters);
                    }
                    *outbox = None;
                }
            },
            now = keepalive.tick() => match keepalive.on_tick(now) {
                Err(why) => {
                    close(ws, CloseCode::Normal, "idle timeout").await;
                    return why;
                }
                Ok(true) => {
                    if let Err(e) = ws.send(Message::Ping(Default::default())).await {
                        return fail(ws, e).await;
                    }
                }
                Ok(false) => {}
            },
        }
    }
}

async fn feed_out(
    ws: &mut Ws,
    shared: &ServerState,
    profile: Profile,
    out: &mut Vec<Message>,
) -> Result<(), WsError> {
    for msg in out.drain(..) {
        feed(ws, shared, profile, msg).await?;
    }
    Ok(())
}

async fn flush_out(
    ws: &mut Ws,
    shared: &ServerState,
    profile: Profile,
    out: &mut Vec<Message>,
) -> Result<(), WsError> {
    feed_out(ws, shared, profile, out).await?;
    // Also sends the pongs and close replies tungstenite queued while reading.
    ws.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_close_codes() {
        let cap = WsError::Capacity(
            tokio_tungstenite::tungstenite::error::CapacityError::MessageTooLong {
                size: 10,
                max_size: 5,
            },
        );
        assert_eq!(
            classify(&cap),
            (
                Some((CloseCode::Size, "message too big")),
                Closed::MessageTooBig
            )
        );
        let reset = WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake);
        assert_eq!(classify(&reset), (None, Closed::Reset));
        let bad = WsError::Protocol(ProtocolError::NonZeroReservedBits);
        assert_eq!(classify(&bad).1, Closed::ProtocolError);
        assert_eq!(classify(&WsError::ConnectionClosed), (None, Closed::Client));
    }
}
