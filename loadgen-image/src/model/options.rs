//! How a run was asked for beyond its LoadTest: the command line's flags, or the shard's
//! environment the operator sets.

use crate::model::Shard;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Clone, Default)]
pub struct Options {
    pub threads: Option<usize>,
    pub shard: Option<Shard>,
    pub server_bin: Option<PathBuf>,
    pub metrics_listen: Option<SocketAddr>,
    /// Start load at this Unix time (ms): the cluster's start barrier.
    pub start_at_unix_ms: Option<u64>,
    /// Overrides the target (the operator passes the managed server's Service URL).
    pub target_url: Option<String>,
    pub server_metrics_url: Option<String>,
    pub progress: bool,
    /// Plot the run's per-second RTT percentiles and msg/s to this PNG (`--plot`).
    pub plot: Option<PathBuf>,
}

/// Worker threads of a run: `--threads`, else one per core.
pub fn threads(opts: &Options) -> usize {
    opts.threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
