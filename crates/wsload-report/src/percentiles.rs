//! A latency histogram told in the figures the tables, findings and thresholds read: its
//! percentiles, maximum and mean in seconds, and how many samples it holds.

use crate::hist::Hist;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
    pub count: u64,
}

impl Percentiles {
    pub(crate) fn of(h: &Hist) -> Self {
        Percentiles {
            p50: h.percentile(50.0),
            p90: h.percentile(90.0),
            p95: h.percentile(95.0),
            p99: h.percentile(99.0),
            p999: h.percentile(99.9),
            max: h.max(),
            mean: h.mean(),
            count: h.len(),
        }
    }
}
