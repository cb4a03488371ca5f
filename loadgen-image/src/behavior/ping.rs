//! pingLatency: `count` pings one after another, `interval` apart; a lost ping is counted and
//! the next one goes out.

use super::pinger::{Pinger, ping_once};
use super::worker::WorkerState;
use crate::connect::Ws;
use std::time::Duration;
use wsload_report::measure::Dropped;

pub(super) async fn pings(
    ws: &mut Ws,
    ctx: &WorkerState,
    count: u32,
    interval: Duration,
    mut pinger: Pinger,
) -> Result<(), Dropped> {
    for i in 0..count {
        if i > 0 && !interval.is_zero() {
            tokio::time::sleep(interval).await;
        }
        match ping_once(ws, ctx, &mut pinger, tokio::time::Instant::now()).await {
            // A lost ping is counted and the next one goes out: the connection is still open.
            Err(Dropped::PingTimeout) => {}
            other => {
                other?;
            }
        }
    }
    Ok(())
}
