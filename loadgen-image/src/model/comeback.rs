//! What a cell's held connections do when dropped (`spec.reconnect`), and the windows their
//! figures fall in (one before any disruption, then one per `spec.disruptions` entry).

use wsload_report::reconnect::Reconnects;
use wsload_spec::LoadTestSpec;
use wsload_spec::reconnect::{Backoff, Jitter};

#[derive(Debug, Clone, PartialEq)]
pub struct Comeback {
    /// `None`: a dropped connection stays down (its drop is still counted in its window).
    pub backoff: Option<Backoff>,
    /// The policy as the report names it.
    pub policy: String,
    /// Each disruption's instant (ms into the measured phase) and what it does.
    pub windows: Vec<(u64, String)>,
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
        Some(Comeback {
            backoff,
            policy: spec.reconnect.describe(),
            windows,
        })
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
