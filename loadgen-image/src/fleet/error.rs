//! Why a run over shard processes on this machine failed, and the exit code each gives.

use super::limit::TooManyShards;
use super::token::TokenError;
use crate::conduct::RunError;
use crate::conduct::error::{EXIT_FAILED, EXIT_INPUT, EXIT_MEASURED_NOTHING};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// What a run in one process fails with, here for the conductor's own part (the managed
    /// server, the shares, the runtime).
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    TooManyShards(#[from] TooManyShards),
    #[error(
        "--plot draws one process's timeline; spec.shards: {shards} runs {shards} processes: run with shards: 1 to plot, or watch the shards' metrics (docs/loadtest.md)"
    )]
    Plot { shards: u32 },
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error("the LoadTest has no cell to run")]
    NoCell,
    #[error("cannot start shard {index}: {source}")]
    Spawn {
        index: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start shard {index}'s log reader: {source}")]
    LogReader {
        index: u32,
        #[source]
        source: std::io::Error,
    },
    /// A runtime or a path this machine did not give.
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A shard process that failed before the load, in its own words (its last stderr line)
    /// when it said why.
    #[error("shard {index}: {failure}")]
    Shard { index: u32, failure: ShardFailure },
    /// A shard that refused the input (its exit code 2), in its own words (its last stderr
    /// line): the input's fault.
    #[error("{said}")]
    ShardRefusedInput { said: String },
    /// A shard that exited measuring nothing (exit 4: its target resolves to nothing), in
    /// its own words.
    #[error("{said}")]
    ShardMeasuredNothing { said: String },
    /// A shard did not answer the control protocol as it says.
    #[error("shard {index}: {source}")]
    ShardControl {
        index: u32,
        #[source]
        source: wsload_control::Error,
    },
    /// A shard's result does not read as one.
    #[error("shard {index}: not a result: {source}")]
    ShardResult {
        index: u32,
        #[source]
        source: serde_json::Error,
    },
    /// A shard's result does not merge with the others'.
    #[error("shard {index}: {source}")]
    Merge {
        index: u32,
        #[source]
        source: wsload_report::MergeError,
    },
    #[error("{waiting} shard(s) not ready within {within:?}")]
    NotReady { waiting: usize, within: Duration },
    #[error("no shard returned a result: {}", notes.join("; "))]
    NoResult { notes: Vec<String> },
}

/// How a shard process failed before the load.
#[derive(Debug, thiserror::Error)]
pub enum ShardFailure {
    #[error("started without a stderr to read")]
    NoStderr,
    #[error("did not open its endpoint: {tail}")]
    NoEndpoint { tail: String },
    /// It announced an endpoint that is no `host:port`.
    #[error("endpoint {addr:?}")]
    Endpoint { addr: String },
    /// It exited: its status and its last stderr line.
    #[error("exited ({status}): {why}")]
    Exited { status: String, why: String },
}

impl FleetError {
    /// 2 when the input is at fault, 4 when nothing could connect, else 3.
    pub fn exit_code(&self) -> u8 {
        match self {
            FleetError::Run(e) => e.exit_code(),
            FleetError::TooManyShards(_)
            | FleetError::Plot { .. }
            | FleetError::NoCell
            | FleetError::ShardRefusedInput { .. } => EXIT_INPUT,
            FleetError::ShardMeasuredNothing { .. } => EXIT_MEASURED_NOTHING,
            _ => EXIT_FAILED,
        }
    }
}
