//! wsload's results, shared by the load generator (which measures and prints them) and the
//! operator (which merges its shards' results and judges the thresholds): one merge and one
//! judge, so a cluster run and `wsload merge` of the same shard files report alike.
//!
//! - [`RunResult`]: one run or shard, serialized as JSON with every count and HDR histogram;
//!   [`RunResult::merge`] adds another shard's result exactly, [`RunResult::judge`] checks
//!   its thresholds, [`RunResult::render`] prints the tables.
//! - [`stored`]: a result as the operator stores it (gzip-compressed JSON) and read back.
//! - [`hist::Hist`]: the latency histogram (exact merge, base64 serialization).
//! - [`measure`]: counts and histograms of one cell, and the failure reasons.
//! - [`ms`], [`num`], [`human_rate`], [`in_units`]: the number formats of the tables.

#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod hist;
pub mod measure;
pub mod report;
pub mod stored;

pub use hist::Hist;
pub use measure::{ConnectError, Counts, Drop, Hists, Measure};
pub use report::{
    CellResult, Check, Figures, Percentiles, Probe, RunResult, ShardInfo, Verdict, human_rate,
    in_units, ms, num,
};
