//! A cell's measured phase begins at one instant on every shard, however long each took to
//! open its share: a shard of several says it is `connected` on the cell and waits; once every
//! live shard is (`wsload_control::barrier::connected`), the operator picks the instant,
//! records it in the cell's status (`measureAtMillis`) before any shard hears of it, and the
//! next reconcile tells each waiting shard that instant on its own clock
//! (`POST /control/measure`). Any later reconcile, a restarted operator's included, tells a
//! shard still waiting the recorded instant again (the order is idempotent): one instant per
//! cell, whoever sends it. Without this, each shard measured (and its hold's clock ran) from
//! the end of its own connect phase, and the first shards closed before the last had opened.

use super::cells::{SOON, unix_millis};
use super::view::View;
use crate::text::grouped;
use std::collections::BTreeMap;
use std::time::Duration;
use wsload_control::barrier::{self, Connect, Connected};
use wsload_control::protocol::State;
use wsload_spec::status::CellStatus;

/// Where a cell's shards are with opening their shares, while none has finished the cell.
pub(super) struct Rendezvous {
    /// For `status.message`.
    pub(super) message: String,
    /// How soon to look again, when sooner than the poll interval.
    pub(super) soon: Option<Duration>,
}

impl View<'_> {
    /// Moves cell `cell`'s measure barrier on, given the state of every live shard (all of
    /// them answered). `None` while no shard says it is connected on the cell: its shards do
    /// not wait (a fanout's, a lone shard's), or none has opened its share yet.
    pub(super) async fn rendezvous(
        &mut self,
        cell: &CellStatus,
        states: &BTreeMap<u32, State>,
    ) -> Option<Rendezvous> {
        let said = states
            .values()
            .filter(|s| s.connected.as_ref().is_some_and(|c| c.index == cell.index))
            .count();
        if said == 0 {
            return None;
        }
        let head = format!("cell {} ({})", cell.index, cell.label);
        let live: Vec<&State> = states.values().collect();
        let connected = match barrier::connected(cell.index, &live) {
            Connect::Over => return None,
            // The others are opening theirs: look again soon rather than a poll later.
            Connect::Waiting => {
                return Some(Rendezvous {
                    message: format!("{head}: {said}/{} shards connected", states.len()),
                    soon: Some(SOON),
                });
            }
            Connect::Passed(c) => c,
        };
        let all = format!(
            "{head}: all {} shards connected ({} opened, {} failed)",
            states.len(),
            grouped(connected.opened),
            grouped(connected.failed)
        );
        let Some(at) = cell.measure_at_millis else {
            if connected.waiting.is_empty() {
                // Nobody waits to be told: nothing to decide.
                return None;
            }
            let at = self.record_measure(cell, &connected);
            return Some(Rendezvous {
                message: format!("{all}; measuring from {at} (Unix ms)"),
                // Recorded: the next reconcile tells the shards, once status holds it.
                soon: Some(Duration::from_millis(10)),
            });
        };
        // Positions in `live`, which is `states` in order.
        let indexes: Vec<u32> = states.keys().copied().collect();
        let waiting: Vec<u32> = connected
            .waiting
            .iter()
            .filter_map(|p| indexes.get(*p).copied())
            .collect();
        self.tell_measure(cell.index, at, &waiting).await;
        Some(Rendezvous {
            message: format!("{all}; measuring from {at} (Unix ms)"),
            soon: None,
        })
    }

    /// Picks the instant every shard measures cell `cell` from and records it in the cell's
    /// status; no shard hears of it before status holds it.
    fn record_measure(&mut self, cell: &CellStatus, connected: &Connected) -> u64 {
        // The same lead as a cell's release: time for every shard to hear of it first.
        let lead = u64::try_from(self.ctx.config.cell_delay.as_millis()).unwrap_or(0);
        let at = unix_millis(self) + lead;
        tracing::info!(
            cell = cell.index, label = %cell.label,
            waiting = connected.waiting.len(), opened = connected.opened,
            failed = connected.failed, measure_at = at,
            "every live shard opened its share of the cell: measuring from one instant"
        );
        if let Some(c) = self.st.cells.iter_mut().find(|c| c.index == cell.index) {
            c.measure_at_millis = Some(at);
        }
        at
    }

    /// Tells every shard of `waiting` to measure cell `cell` from `at` (Unix ms, the
    /// operator's clock), each on its own clock. A shard told already answers alike.
    async fn tell_measure(&mut self, cell: u32, at: u64, waiting: &[u32]) {
        let targets = self.addresses(waiting.iter());
        if targets.is_empty() {
            return;
        }
        tracing::info!(
            cell,
            measure_at = at,
            shards = targets.len(),
            "telling the waiting shards when to measure"
        );
        let releases = self.releases(&targets, at);
        let answers = self
            .order_shards(&targets, |i, c| {
                let release = releases.of(i);
                async move { c.measure(release, cell).await }
            })
            .await;
        for (i, answer) in answers {
            if let Err(e) = answer {
                tracing::warn!(shard = i, cell, error = %e, "measure order not delivered; retrying");
            }
        }
    }
}
