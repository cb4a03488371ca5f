//! What one wsload process tells another outside a typed protocol, defined once so that the
//! writer and every reader agree: a renamed variable or a reworded line fails to build, not a
//! test run in a cluster.
//!
//! No dependencies: the server, the load generator, the operator and the tests all use it.

pub mod announce;
pub mod control;
pub mod env;
pub mod server_metrics;
