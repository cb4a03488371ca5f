//! The conversation's client heartbeat (`conversation.heartbeat`: Phoenix's, STOMP's, MQTT's
//! PINGREQ) on connections that `hold`'s ping timer does not drive: a fanout's subscribers and
//! publishers from their open, and a hold's while the rest of its tier opens. A broker that
//! enforces its keep-alive drops a client that sends none (aedes at 1.5 x the MQTT
//! keep-alive: every subscriber of a fanout was reset 22.4 s in, mid-window).

use super::worker::WorkerState;
use crate::conversation::Fill;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

/// When a connection's next heartbeat is due; `None` without a heartbeat in the conversation.
#[derive(Debug, Clone, Copy)]
pub(super) struct Beat(Option<Instant>);

impl Beat {
    /// The first heartbeat one interval from now.
    pub(super) fn start(ctx: &WorkerState) -> Beat {
        Beat(
            ctx.script
                .heartbeat()
                .map(|(every, _)| Instant::now() + every),
        )
    }

    pub(super) fn due(&self) -> Option<Instant> {
        self.0
    }

    /// The instant to wake at: the heartbeat's, or `other` if that comes first.
    pub(super) fn wake(&self, other: Instant) -> Instant {
        self.0.map_or(other, |t| t.min(other))
    }

    /// The heartbeat's message if it is due (and the next one scheduled an interval on).
    pub(super) fn take(&mut self, ctx: &WorkerState, conn: u64) -> Option<Message> {
        let now = Instant::now();
        let due = self.0.filter(|t| now >= *t)?;
        let (every, out) = ctx.script.heartbeat()?;
        // From now, not from when it was due: a connection late by a long read does not send
        // a burst to catch up.
        self.0 = Some(now.max(due) + every);
        let fill = Fill {
            conn,
            seq: 0,
            size: ctx.size,
        };
        Some(out.message(&mut ctx.scratch.arena.borrow_mut(), &fill))
    }
}
