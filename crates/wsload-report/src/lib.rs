//! wsload's results, shared by the load generator (which measures and prints them) and the
//! operator (which merges its shards' results and judges the thresholds): one merge and one
//! judge, so a cluster run and `wsload merge` of the same shard files report alike.
//!
//! - [`RunResult`]: one run or shard, serialized as JSON with every count and HDR histogram;
//!   [`RunResult::merge`] adds another shard's result exactly, [`RunResult::judge`] checks
//!   its thresholds, [`RunResult::render`] prints the tables.
//! - [`figure`]: the figure each threshold judges in a cell, or why the cell never measured it
//!   (such a check fails).
//! - [`findings()`]: known causes the figures show, one line each under the table.
//! - [`html()`]: the whole result as one self-contained HTML page (tables, charts, spec).
//! - [`compare`]: two results of one LoadTest, figure by figure: Regressed, Improved or Same.
//! - [`timeline`]: samples of a cell over time (100 ms steps), recorded from running totals.
//! - [`stored`]: a result as the operator stores it (gzip-compressed JSON) and read back.
//! - [`kernel`]: what the kernel's TCP counters and gauges did over a cell, per namespace.
//! - [`hist::Hist`]: the latency histogram (exact merge, base64 serialization).
//! - [`measure`]: counts and histograms of one cell, and the failure reasons.
//! - [`ms`], [`num`], [`human_rate`], [`in_units`]: the number formats of the tables.

mod chart;
pub mod compare;
pub mod connect_error;
mod escape;
pub mod fanout;
pub mod fanout_figures;
mod fanout_text;
pub mod figure;
pub mod findings;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod hist;
mod html;
pub mod kernel;
pub mod measure;
mod merge;
mod numbers;
mod percentiles;
mod pushes;
pub mod reconnect;
mod reconnect_text;
mod result;
pub mod server_connections;
mod spec_copy;
pub mod stored;
mod table;
mod text;
pub mod timeline;
mod verdict;

pub use findings::{Finding, Rule, findings};
pub use hist::Hist;
pub use html::html;
pub use measure::{ConnectError, Counts, Dropped, Hists, Measure};
pub use merge::MergeError;
pub use numbers::{human_rate, in_units, ms, num};
pub use percentiles::Percentiles;
pub use result::{
    CellResult, Check, Figures, Part, Probe, RunResult, ShardClock, ShardInfo, Verdict,
};
pub use spec_copy::REDACTED;
pub use timeline::{Recorder, Sample, Totals};

/// The result and its number formats under the path the load generator and the conductor
/// import them by (`wsload_report::report::RunResult`, re-exported as `wsload::report`).
pub mod report {
    pub use crate::numbers::{human_rate, in_units, ms, num};
    pub use crate::percentiles::Percentiles;
    pub use crate::result::{
        CellResult, Check, Figures, Probe, RunResult, ShardClock, ShardInfo, Verdict,
    };
}
