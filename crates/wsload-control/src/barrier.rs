//! The per-cell barriers: a cell's measured phase begins when every shard still able to report
//! has opened its share ([`connected`]), and the cell is over when every one has finished it
//! ([`evaluate`]).

use crate::protocol::{CellSummary, Phase, State};

/// Whether every live shard has opened its share of a cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Connect {
    /// A live shard is still opening its share.
    Waiting,
    /// Every live shard is past its connect phase: `waiting` are those that wait to be told
    /// when to measure (the others do not wait: a fanout's shards, a lone shard's, or they
    /// finished the cell).
    Passed(Connected),
    /// No shard is live any more.
    Over,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Connected {
    /// The shards (by position in `states`) connected and not yet told when to measure.
    pub waiting: Vec<usize>,
    /// Connections opened and failed, summed over the shards that said.
    pub opened: u64,
    pub failed: u64,
}

/// Whether every live shard of `states` has opened its share of cell `index`: it says so
/// (`connected` on that cell), or it has finished the cell. A shard running the cell that has
/// not said so is still connecting (or does not wait, and the conductor has nothing to tell it).
pub fn connected(index: u32, states: &[&State]) -> Connect {
    let mut out = Connected::default();
    let mut live = 0;
    for (i, s) in states.iter().enumerate() {
        if !s.state.live() {
            continue;
        }
        live += 1;
        let said = s.connected.as_ref().filter(|c| c.index == index);
        if let Some(c) = said {
            out.opened += c.opened;
            out.failed += c.failed;
            if s.state == Phase::Connected && c.measure_at.is_none() {
                out.waiting.push(i);
            }
        } else if s.cells_done <= index {
            return Connect::Waiting;
        }
    }
    if live == 0 {
        Connect::Over
    } else {
        Connect::Passed(out)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Barrier {
    /// A live shard has not finished the cell yet.
    Waiting,
    /// Every live shard finished the cell: its outcome summed over them.
    Passed(Merged),
    /// No shard is live any more (each is done or failed).
    Over,
}

/// A cell's outcome over the shards that finished it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// Counts summed; `started_at_micros` the first shard's start, `finished_at_micros` the
    /// last shard's finish.
    pub outcome: CellSummary,
    /// The last shard's start minus the first's, microseconds.
    pub start_spread_micros: u64,
    pub shards: usize,
}

/// Whether cell `index` is over for `states`, the shards the conductor still counts (a shard
/// known lost is left out by the caller; one that failed is left out here).
pub fn evaluate(index: u32, states: &[&State]) -> Barrier {
    let live: Vec<&State> = states.iter().copied().filter(|s| s.state.live()).collect();
    if live.is_empty() {
        return Barrier::Over;
    }
    let finished = |s: &State| {
        s.state == Phase::Between && s.last_cell.as_ref().is_some_and(|c| c.index == index)
    };
    if !live.iter().all(|s| finished(s)) {
        return Barrier::Waiting;
    }
    let cells: Vec<&CellSummary> = live.iter().filter_map(|s| s.last_cell.as_ref()).collect();
    let mut outcome = CellSummary {
        index,
        started_at_micros: u64::MAX,
        ..Default::default()
    };
    let mut last_start = 0;
    for c in &cells {
        outcome.attempted += c.attempted;
        outcome.connected += c.connected;
        outcome.failed += c.failed;
        outcome.sent_with_warmup += c.sent_with_warmup;
        outcome.started_at_micros = outcome.started_at_micros.min(c.started_at_micros);
        outcome.finished_at_micros = outcome.finished_at_micros.max(c.finished_at_micros);
        last_start = last_start.max(c.started_at_micros);
    }
    Barrier::Passed(Merged {
        start_spread_micros: last_start.saturating_sub(outcome.started_at_micros),
        outcome,
        shards: cells.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ConnectSummary;

    fn connected_on(index: u32, opened: u64, measure_at: Option<u64>) -> State {
        State {
            state: if measure_at.is_some() {
                Phase::Running
            } else {
                Phase::Connected
            },
            cells_done: index,
            connected: Some(ConnectSummary {
                index,
                opened,
                failed: 1,
                measure_at,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn measuring_waits_for_every_live_shard_to_open_its_share() {
        let a = connected_on(1, 100, None);
        let b = connected_on(1, 50, None);
        // Still opening cell 1: said it was connected on cell 0 only.
        let opening = State {
            state: Phase::Running,
            ..connected_on(0, 10, Some(5))
        };
        let opening = State {
            cells_done: 1,
            ..opening
        };
        assert_eq!(connected(1, &[&a, &opening]), Connect::Waiting);
        let failed = State {
            state: Phase::Failed,
            ..opening.clone()
        };
        assert_eq!(
            connected(1, &[&a, &failed, &b]),
            Connect::Passed(Connected {
                waiting: vec![0, 2],
                opened: 150,
                failed: 2,
            })
        );
        // Told already (measuring), or done with the cell: past it, nothing to tell.
        let told = connected_on(1, 100, Some(7));
        let finished = between(1, 1_000, 5);
        assert_eq!(
            connected(1, &[&told, &finished, &b]),
            Connect::Passed(Connected {
                waiting: vec![2],
                opened: 150,
                failed: 2,
            })
        );
        assert_eq!(connected(1, &[&failed]), Connect::Over);
    }

    fn between(index: u32, start: u64, sent: u64) -> State {
        State {
            state: Phase::Between,
            cells_done: index + 1,
            last_cell: Some(CellSummary {
                index,
                attempted: 10,
                connected: 10,
                sent_with_warmup: sent,
                started_at_micros: start,
                finished_at_micros: start + 5,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn passes_once_every_live_shard_finished_the_cell() {
        let a = between(0, 1_000, 5);
        let b = between(0, 1_400, 7);
        let running = State {
            state: Phase::Running,
            cells_done: 0,
            ..Default::default()
        };
        assert_eq!(evaluate(0, &[&a, &running]), Barrier::Waiting);
        // A shard still between an earlier cell has not finished this one.
        assert_eq!(evaluate(1, &[&a, &b]), Barrier::Waiting);
        let failed = State {
            state: Phase::Failed,
            ..Default::default()
        };
        let Barrier::Passed(m) = evaluate(0, &[&a, &b, &failed]) else {
            panic!("passed")
        };
        assert_eq!(
            (m.outcome.attempted, m.outcome.sent_with_warmup, m.shards),
            (20, 12, 2)
        );
        assert_eq!(
            (m.outcome.started_at_micros, m.start_spread_micros),
            (1_000, 400)
        );
        assert_eq!(m.outcome.finished_at_micros, 1_405);
        assert_eq!(evaluate(0, &[&failed]), Barrier::Over);
    }
}
