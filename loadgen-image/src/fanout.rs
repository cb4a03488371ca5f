//! The fanout scenario's connections: subscribers that count and time what their topics
//! deliver, and wsload's publishers.

use crate::connection::WorkerState;
use crate::dial::Ws;
use crate::measure::Dropped;
use crate::model::FanoutPlan;
use crate::script::Out;
use std::sync::Arc;

/// Connection `n`'s measured phase in a fanout: a subscriber's or a publisher's.
pub async fn run(
    _ws: &mut Ws,
    _ctx: &WorkerState,
    _n: u64,
    _plan: &FanoutPlan,
    _message: Arc<Out>,
) -> Result<(), Dropped> {
    Ok(())
}
