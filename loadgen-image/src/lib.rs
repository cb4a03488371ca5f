//! wsload: the load generator. `wsload run FILE` runs a LoadTest on this machine;
//! `wsload shard` runs one shard's share (what a pod runs); `wsload merge` combines results.

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
pub mod exposition;
pub mod fleet;
pub mod fleet_bar;
pub mod gate;
pub mod local_server;
pub mod message;
pub mod model;
pub mod options;
pub mod plan;
pub mod plot;
pub mod progress;
pub mod run;
pub mod sampler;
pub mod schedule;
pub mod server_metrics;
pub mod sysctl;
pub mod target;
pub mod terminal;
pub mod tls;

// Results moved to wsload-report (the operator merges with the same code); these paths stay.
pub use wsload_report::{hist, measure, report};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The LoadTest asks for something impossible here (names the field).
    #[error("{0}")]
    Spec(String),
    /// The target cannot be reached or started.
    #[error("target: {0}")]
    Target(String),
    #[error("{0}")]
    Io(String),
    /// The run began and could not go on (a bug: a panic); exit code 3.
    #[error("{0}")]
    Runtime(String),
    #[error(transparent)]
    LoadTest(#[from] wsload_spec::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
