//! wsload: the load generator. `wsload run FILE` runs a LoadTest on this machine;
//! `wsload shard` runs one shard's share (what a pod runs); `wsload merge` combines results.
//!
//! Its modules stand in layers, each importing only from its own or those below
//! (`tests/layers.rs` reads the sources and fails on an upward import or a circle):
//! - foundation: [`clock`], [`message`] (templates), [`script`] (the LoadTest's conversation,
//!   compiled), [`answer`] (what answers a message sent),
//!   [`schedule`] (open-loop rates),
//!   [`terminal`] (stderr around the bar), [`cpu`], [`sysctl`], [`netstat`] (the kernel's
//!   TCP counters and gauges of this network namespace);
//! - model, what a cell is and how a spec becomes cells: [`model`], [`plan`], [`capacity`],
//!   [`options`];
//! - counters, the live per-worker slots and where the run is: [`counters`];
//! - execution: [`dial`] and [`tls`] (connecting, over the `wsload-ws` client),
//!   [`stall`] (writes to a server that does not read), [`connection`] (one connection's
//!   behavior), [`rendezvous`] (a shard's measured phase waiting for the other shards),
//!   [`cell`] (the workers of a cell),
//!   [`sampler`] (timelines from the counters), [`server_metrics`], [`autobahn_client`];
//! - presentation of the counters: [`progress`] (the bar), [`fleet_bar`] (the shards'),
//!   [`exposition`] (Prometheus), [`plot`];
//! - orchestration: [`target`] and [`local_server`], [`gate`], [`background`], [`run`],
//!   [`control`] (a shard under the operator's protocol), [`fleet`] (shards on this machine).

pub mod answer;
pub mod autobahn_client;
pub mod background;
pub mod capacity;
pub mod cell;
pub mod clock;
pub mod connection;
pub mod control;
pub mod counters;
pub mod cpu;
pub mod dial;
pub mod encoding;
pub mod exposition;
pub mod fanout;
pub mod fleet;
pub mod fleet_bar;
pub mod fleet_limit;
pub mod fleet_token;
pub mod gate;
pub mod local_server;
pub mod model;
pub mod netstat;
pub mod options;
pub mod plan;
pub mod plot;
pub mod progress;
pub mod rendezvous;
pub mod run;
pub mod sampler;
pub mod schedule;
pub mod script;
pub mod server_metrics;
pub mod stall;
pub mod sysctl;
pub mod target;
pub mod terminal;
pub mod tls;

// Results moved to wsload-report (the operator merges with the same code); these paths stay.
pub use wsload_report::{hist, measure, report};

/// A cause of another kind than ours, kept as the error's source.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why a command of the load generator failed. Each variant is of one exit-code class
/// ([`Error::exit_code`]): the input's fault (2), a target nothing can connect to (4), or the
/// target's, this machine's or the run's (3). Where there is a cause it is the source, and shown after the context.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The LoadTest or a flag asks for something impossible here; the message names the
    /// field or the flag, and the fix.
    #[error("{0}")]
    Spec(String),
    /// The same, from a cause: a value that does not parse, a file that does not read as the
    /// field says.
    #[error("{what}: {source}")]
    Invalid {
        what: String,
        #[source]
        source: Cause,
    },
    /// The target cannot be reached or started.
    #[error("target: {0}")]
    Target(String),
    #[error("target: {what}: {source}")]
    Unreachable {
        what: String,
        #[source]
        source: Cause,
    },
    /// The target's name resolves to no address: no connection could be established, so the
    /// run measured nothing (exit 4, as a run in which nothing connected).
    #[error("target: {what}: no connection can be established: {source}")]
    Unresolvable {
        what: String,
        #[source]
        source: Cause,
    },
    /// A shard on this machine exited with [`EXIT_MEASURED_NOTHING`] before any load (its
    /// target resolves to nothing): the run's own code, with the shard's reason.
    #[error("{0}")]
    ShardMeasuredNothing(String),
    /// This machine does not give what the run needs.
    #[error("{0}")]
    Machine(String),
    /// The same, from a cause: a port, a thread, a file, a system call.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: Cause,
    },
    /// One shard of a run on this machine failed (exited, never opened its endpoint).
    #[error("shard {index}: {why}")]
    Shard { index: u32, why: String },
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
    /// The shards of a run on this machine, as a whole: none got ready, none kept a result.
    #[error("{0}")]
    Shards(String),
    /// The run broke off: a panic in the load generator (a bug). The cells measured before
    /// are kept in the result.
    #[error("the run failed: {0}")]
    Panicked(String),
    #[error(transparent)]
    LoadTest(#[from] wsload_spec::Error),
    /// A file read whole (a result to merge or show): unreadable, or over its size limit.
    #[error(transparent)]
    File(#[from] wsload_spec::file::ReadError),
}

impl Error {
    pub fn invalid(what: impl Into<String>, source: impl Into<Cause>) -> Error {
        Error::Invalid {
            what: what.into(),
            source: source.into(),
        }
    }

    pub fn unreachable(what: impl Into<String>, source: impl Into<Cause>) -> Error {
        Error::Unreachable {
            what: what.into(),
            source: source.into(),
        }
    }

    pub fn io(what: impl Into<String>, source: impl Into<Cause>) -> Error {
        Error::Io {
            what: what.into(),
            source: source.into(),
        }
    }

    /// The process's exit code for this error: 2 when the input is at fault, 4 when the
    /// target's name resolves to nothing (nothing could connect), else 3 (the codes are listed
    /// in docs/loadtest.md).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Spec(_)
            | Error::Invalid { .. }
            | Error::LoadTest(_)
            | Error::File(wsload_spec::file::ReadError::TooBig { .. }) => 2,
            Error::Unresolvable { .. } | Error::ShardMeasuredNothing(_) => EXIT_MEASURED_NOTHING,
            _ => 3,
        }
    }
}

/// The exit code of a run that measured nothing of what it was for: nothing connected (the
/// target's name did not resolve, or every connection failed), or no answer came back.
pub const EXIT_MEASURED_NOTHING: u8 = 4;

pub type Result<T, E = Error> = std::result::Result<T, E>;
