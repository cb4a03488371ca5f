//! pingpong (the echo perftest's closed loop): one message in flight until the deadline.

use super::pinger::{Pinger, ping_once};
use super::worker::WorkerState;
use crate::connect::Ws;
use tokio::time::Instant;
use wsload_report::measure::Dropped;

pub(super) async fn pingpong(
    ws: &mut Ws,
    ctx: &WorkerState,
    mut pinger: Pinger,
) -> Result<(), Dropped> {
    loop {
        let now = Instant::now();
        if now >= ctx.deadline {
            return Ok(());
        }
        match ping_once(ws, ctx, &mut pinger, now).await {
            Err(Dropped::PingTimeout) => {}
            other => {
                other?;
            }
        }
    }
}
