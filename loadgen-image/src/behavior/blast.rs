//! blast (the echo perftest's send-only mode): bursts written until the deadline, nothing read.

use super::sender::Sender;
use super::worker::{WorkerState, data_len};
use super::write::{feed, flush};
use crate::connect::Ws;
use tokio::time::Instant;
use wsload_report::measure::Dropped;

pub(super) async fn blast(
    ws: &mut Ws,
    ctx: &WorkerState,
    per_message: bool,
    mut sender: Sender,
) -> Result<(), Dropped> {
    const BURST: u64 = 64;
    loop {
        let now = Instant::now();
        if now >= ctx.deadline {
            return Ok(());
        }
        // A blast never reads, so against a server that answers (an echo server) the replies
        // fill both sockets, the server stops reading and our writes block for good: the
        // deadline bounds them. What was handed to the socket's writer counts as sent even
        // when the burst is cut short: the closing handshake writes it out before the close.
        let (mut fed, mut bytes) = (0u64, 0u64);
        let burst = async {
            for _ in 0..BURST {
                let msg = sender.message(ctx);
                let len = data_len(&msg).unwrap_or(0);
                feed(ws, ctx, msg).await?;
                fed += 1;
                bytes += len;
                if per_message {
                    flush(ws, ctx).await?;
                }
            }
            if !per_message {
                flush(ws, ctx).await?;
            }
            Ok(())
        };
        let r = tokio::time::timeout_at(ctx.deadline, burst).await;
        ctx.sent(now, fed, bytes);
        match r {
            Err(_) => return Ok(()),
            Ok(r) => r?,
        }
    }
}
