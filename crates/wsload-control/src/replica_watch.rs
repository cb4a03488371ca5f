//! The managed server's replicas read every [`BUCKET_MS`] while a disrupted cell runs: how many
//! connections they admitted in each 100 ms of the measured phase (what the reconnect attempts
//! met) and how many each held (what a replica back took of its share). `wsload run` reads
//! them on a thread, the operator on a task; both turn their readings into figures here. Their
//! counters cannot be read only between cells, as the other server counters are: a kill takes
//! what a process counted with it.

use wsload_contract::server_metrics as metric;
use wsload_http::scrape;
use wsload_report::reconnect::{BUCKET_MS, Reconnects, add_at};

/// What one replica answered: its admissions so far and the connections it holds; `None` when
/// it did not answer (down, not started yet, or slow).
pub type Reading = Option<Replica>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replica {
    pub accepted: u64,
    pub active: u64,
}

/// A replica's reading from its exposition; `None` when it has no admissions counter (a
/// server other than wsload-server).
pub fn parse(body: &str) -> Reading {
    let any = Default::default();
    let accepted = scrape::find(body, metric::CONNECTIONS_ACCEPTED, &any)?;
    let active = scrape::find(body, metric::CONNECTIONS_ACTIVE, &any).unwrap_or(0.0);
    Some(Replica {
        accepted: accepted as u64,
        active: active as u64,
    })
}

/// One cell's readings, turned into admissions per [`BUCKET_MS`] as they come.
#[derive(Debug, Default, Clone)]
pub struct Readings {
    /// Each replica's admissions at its last answer.
    last: Vec<Option<u64>>,
    /// The last reading's instant, ms into the measured phase.
    last_at: u64,
    /// Admissions per [`BUCKET_MS`] of the phase, every replica summed.
    accepts: Vec<u64>,
    /// Each reading's instant and what each replica held then.
    held: Vec<(u64, Vec<Option<u64>>)>,
}

impl Readings {
    /// Starts from what the replicas answered as the phase began: admissions before it are
    /// not the phase's.
    pub fn starting(first: &[Reading]) -> Readings {
        Readings {
            last: first.iter().map(|r| r.map(|r| r.accepted)).collect(),
            ..Readings::default()
        }
    }

    /// Files what was admitted since the last reading at the middle of the interval between
    /// them (`at`: ms into the phase).
    pub fn record(&mut self, at: u64, now: &[Reading]) {
        self.last.resize(now.len(), None);
        let mut admitted = 0;
        let mut held = Vec::with_capacity(now.len());
        for (seen, reading) in self.last.iter_mut().zip(now) {
            let Some(r) = *reading else {
                // Down, or slow to answer: what it admits next counts from its next answer
                // (a replica started again counts from zero).
                held.push(None);
                continue;
            };
            admitted += match *seen {
                Some(before) if r.accepted >= before => r.accepted - before,
                // Started again since: its counter began anew.
                Some(_) => r.accepted,
                None => 0,
            };
            *seen = Some(r.accepted);
            held.push(Some(r.active));
        }
        let middle = self.last_at + at.saturating_sub(self.last_at) / 2;
        add_at(&mut self.accepts, middle, admitted);
        self.last_at = at;
        self.held.push((at, held));
    }

    /// Puts the readings of a phase that lasted `window_ms` into its reconnect figures: the
    /// admissions up to its end, and what each replica held at the last reading before it (the
    /// connections close after it).
    pub fn into_figures(&self, window_ms: u64, r: &mut Reconnects) {
        let buckets = usize::try_from(window_ms.div_ceil(BUCKET_MS)).unwrap_or(usize::MAX);
        r.server_accepts = self.accepts.iter().take(buckets).copied().collect();
        if let Some((_, held)) = self.held.iter().rev().find(|(ms, _)| *ms < window_ms) {
            r.replicas_held.clone_from(held);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(accepted: u64, active: u64) -> Reading {
        Some(Replica { accepted, active })
    }

    #[test]
    fn reads_wsload_servers_admissions_and_what_it_holds() {
        let body = "wsload_server_connections_active 7\n\
            wsload_server_connections_accepted_total{profile=\"echo\"} 90\n\
            wsload_server_connections_accepted_total{profile=\"sink\"} 10\n";
        assert_eq!(parse(body), up(100, 7));
        assert_eq!(parse("other_total 3\n"), None);
    }

    #[test]
    fn admissions_are_filed_between_readings_and_a_restart_counts_from_zero() {
        let mut r = Readings::starting(&[up(100, 100), up(100, 100)]);
        // 100 ms in: replica 1 killed, replica 0 admitted 30.
        r.record(100, &[up(130, 130), None]);
        // 300 ms in: replica 1 back and counting anew (12 admitted), replica 0 admitted 10 more.
        r.record(300, &[up(140, 140), up(12, 12)]);
        // 500 ms in: replica 1's counter went down (started again once more): 5 counted.
        r.record(500, &[up(140, 135), up(5, 5)]);
        let mut figures = Reconnects::default();
        r.into_figures(450, &mut figures);
        // 30 at 50 ms, 22 at 200 ms; 5 at 400 ms.
        assert_eq!(figures.server_accepts, vec![30, 0, 22, 0, 5]);
        assert_eq!(figures.replicas_held, vec![Some(140), Some(12)]);
    }

    #[test]
    fn a_phase_with_no_reading_before_its_end_says_nothing_held() {
        let mut r = Readings::starting(&[up(0, 0)]);
        r.record(900, &[up(4, 4)]);
        let mut figures = Reconnects::default();
        r.into_figures(800, &mut figures);
        assert!(figures.replicas_held.is_empty(), "{figures:?}");
    }
}
