//! Who decides a shard's next cell and when it begins. With a conductor elsewhere (the
//! operator, or `wsload run` over shard processes) the shard asks it over the control protocol
//! (`control::ControlGate`); otherwise the conductor runs here ([`LocalGate`]): the whole test
//! in one process, which also reads the servers' counters, or a lone shard released by
//! `--start-at`, which never judges delivery.

use crate::cell::rendezvous::Meeting;
use crate::conduct::server_metrics::{ConnectionCounters, Counter, TopicCounters};
use crate::machine::clock::{sleep_until_unix_ms, unix_micros};
use std::time::Instant;
use wsload_control::settle::{self, Settle};
use wsload_control::{CellKey, CellSummary, Conductor};
use wsload_report::report::{CellResult, RunResult};
use wsload_spec::LoadTestSpec;

pub trait Gate {
    /// The next cell once `done` (the cell just run, to complete with what the gate knows) is
    /// over; `None` at the end. Returns at the instant the cell is to begin.
    fn next(&mut self, done: Option<&mut CellResult>) -> Option<CellKey>;

    /// Whom cell `index`'s measured phase waits for once this shard's share is open (the
    /// other shards, through the conductor); `None`: nobody, it begins at once.
    fn meeting(&self, _index: u32) -> Option<Meeting> {
        None
    }

    /// What the gate knows of the whole run, once the last cell ran.
    fn conclude(&mut self, _result: &mut RunResult) {}
}

/// What a shard says of a cell it ran (the `index`-th).
pub fn summary(index: u32, cell: &CellResult) -> CellSummary {
    let c = &cell.measure.counts;
    CellSummary {
        index,
        attempted: c.attempted,
        connected: c.connected,
        failed: c.failed_total() + c.dropped_total(),
        sent_with_warmup: c.sent_with_warmup,
        started_at_micros: cell.started_first_micros,
        finished_at_micros: unix_micros(),
    }
}

/// The conductor in this process.
pub struct LocalGate {
    conductor: Conductor,
    /// Every server replica's received counter; empty when this process does not judge
    /// delivery (a shard of several, or no counter known).
    counters: Vec<Counter>,
    /// The summed counter when the running cell began.
    before: Option<u64>,
    /// A fanout's topic counters, on the same replicas.
    topics: TopicCounters,
    /// Each replica's connection counters.
    connections: ConnectionCounters,
    start_at_unix_ms: Option<u64>,
    notes: Vec<String>,
}

impl LocalGate {
    pub fn new(spec: &LoadTestSpec, counters: Vec<Counter>, start_at_unix_ms: Option<u64>) -> Self {
        LocalGate {
            conductor: Conductor::new(spec),
            topics: TopicCounters::of(spec, &counters),
            connections: ConnectionCounters::of(&counters),
            counters,
            before: None,
            start_at_unix_ms,
            notes: Vec::new(),
        }
    }

    /// The counters summed over every replica.
    fn read(&mut self) -> Option<u64> {
        let mut sum = 0u64;
        for c in &self.counters {
            match c.read() {
                Ok(v) => sum += v,
                Err(e) => {
                    self.notes
                        .push(format!("server counter {} unreadable: {e}", c.name));
                    return None;
                }
            }
        }
        Some(sum)
    }

    /// What the servers received during the cell that just ran, once they settled.
    fn reconcile(&mut self, sent: u64) -> Option<u64> {
        let before = self.before?;
        let mut settle = Settle::new(before, sent, Instant::now());
        loop {
            let reading = self.read()?;
            if let Some(received) = settle.observe(reading, Instant::now()) {
                self.before = Some(reading);
                return Some(received);
            }
            std::thread::sleep(settle::POLL);
        }
    }
}

impl Gate for LocalGate {
    fn next(&mut self, done: Option<&mut CellResult>) -> Option<CellKey> {
        let last = match done {
            Some(cell) => {
                cell.server_topics = self.topics.end().unwrap_or_else(|e| {
                    self.notes
                        .push(format!("server topic counters unreadable: {e}"));
                    None
                });
                if !self.counters.is_empty() {
                    cell.server_received = self.reconcile(cell.measure.counts.sent_with_warmup);
                }
                cell.server_connections = self.connections.end().unwrap_or_else(|e| {
                    self.notes
                        .push(format!("server connection counters unreadable: {e}"));
                    None
                });
                if !self.counters.is_empty() || cell.server_topics.is_some() {
                    cell.compute();
                }
                let index = self.conductor.issued().len().saturating_sub(1);
                Some(summary(u32::try_from(index).unwrap_or(u32::MAX), cell))
            }
            None => {
                if !self.counters.is_empty() {
                    self.before = self.read();
                }
                if let Err(e) = self.topics.begin() {
                    self.notes
                        .push(format!("server topic counters unreadable: {e}"));
                }
                if let Err(e) = self.connections.begin() {
                    self.notes
                        .push(format!("server connection counters unreadable: {e}"));
                }
                None
            }
        };
        let key = self.conductor.next(last.as_ref())?;
        if let Some(at) = self.start_at_unix_ms.take() {
            let now = unix_micros() / 1000;
            if at > now {
                tracing::info!(wait_ms = at - now, "waiting for the common start time");
            }
            sleep_until_unix_ms(at);
        }
        Some(key)
    }

    fn conclude(&mut self, result: &mut RunResult) {
        result.notes.append(&mut self.notes);
        if self.conductor.is_search() {
            result.probes = self.conductor.probes().to_vec();
            result.limit = self.conductor.limit();
        }
    }
}
