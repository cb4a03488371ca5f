//! What a cell's held connections do when dropped (`spec.reconnect`), and the windows their
//! figures fall in (one before any disruption, then one per `spec.disruptions` entry).

use std::time::Duration;
use wsload_report::reconnect::Reconnects;
use wsload_spec::LoadTestSpec;
use wsload_spec::reconnect::{Backoff, CloseSpec, Jitter};

#[derive(Debug, Clone, PartialEq)]
pub struct Comeback {
    /// `None`: a dropped connection stays down (its drop is still counted in its window).
    pub backoff: Option<Backoff>,
    /// The policy as the report names it.
    pub policy: String,
    /// Each disruption's instant (ms into the measured phase) and what it does.
    pub windows: Vec<(u64, String)>,
    /// The `close` disruptions: when (into the measured phase), their index, their share.
    pub closes: Vec<(Duration, usize, CloseSpec)>,
}

impl Comeback {
    /// `None` when the spec neither reconnects nor disrupts: nothing to count.
    pub fn of(spec: &LoadTestSpec) -> Option<Comeback> {
        let backoff = spec.reconnect.backoff();
        if backoff.is_none() && spec.disruptions.is_empty() {
            return None;
        }
        let windows = spec
            .disruptions
            .iter()
            .map(|d| {
                let ms = u64::try_from(d.at.get().as_millis()).unwrap_or(u64::MAX);
                (ms, d.describe())
            })
            .collect();
        let closes = spec
            .disruptions
            .iter()
            .enumerate()
            .filter_map(|(i, d)| Some((d.at.get(), i, d.close.clone()?)))
            .collect();
        Some(Comeback {
            backoff,
            policy: spec.reconnect.describe(),
            windows,
            closes,
        })
    }

    /// When connection `conn` is next closed by a `close` disruption at or after `from`
    /// (both into the measured phase), if ever.
    pub fn next_close(&self, conn: u64, from: Duration) -> Option<Duration> {
        self.closes
            .iter()
            .find(|(at, i, c)| *at >= from && c.picks(conn, *i))
            .map(|(at, _, _)| *at)
    }

    /// Empty figures with this cell's windows.
    pub fn figures(&self) -> Reconnects {
        let jittered = matches!(
            &self.backoff,
            Some(Backoff::Growing { jitter, .. }) if *jitter != Jitter::None
        );
        Reconnects::new(self.policy.clone(), jittered, &self.windows)
    }
}
