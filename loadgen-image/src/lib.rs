//! wsload: the load generator. `wsload run FILE` runs a LoadTest on this machine;
//! `wsload shard` runs one shard's share (what a pod runs); `wsload merge` combines results.
//!
//! Its folders stand in layers, each importing only from its own or those below
//! (`tests/layers.rs` reads the sources and fails on an upward import or a circle), lowest
//! first:
//! - [`machine`]: what this machine gives, read at run time (clocks, CPU time, sysctls, the
//!   kernel's TCP counters);
//! - [`conversation`]: the LoadTest's conversation compiled: what to send, and what a frame
//!   read is;
//! - [`model`]: what a cell is and how a spec becomes cells (the plan compiles the
//!   conversation once);
//! - [`counters`]: the live per-worker slots and where the run is;
//! - [`connect`]: opening one connection (TCP, TLS, the upgrade, the steps on open);
//! - [`behavior`]: what one connection does once open, one file per behavior;
//! - [`cell`]: a cell run on the worker threads;
//! - [`observe`]: the counters shown (the bar, timelines, Prometheus, the plot);
//! - [`conduct`]: a run of a LoadTest in this process (target, gate, shard control);
//! - [`fleet`]: a run's shards as processes on this machine.
//!
//! Where a new scenario, conversation feature or finding goes: `loadgen-image/README.md`.

pub mod behavior;
pub mod cell;
pub mod conduct;
pub mod connect;
pub mod conversation;
pub mod counters;
pub mod error;
pub mod fleet;
pub mod machine;
pub mod model;
pub mod observe;

// Results moved to wsload-report (the operator merges with the same code); these paths stay.
pub use wsload_report::{hist, measure, report};

pub use error::{Cause, EXIT_MEASURED_NOTHING, Error, Result};
