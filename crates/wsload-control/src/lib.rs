//! One test, many shards: what passes between a shard and whoever conducts the test (the
//! operator in a cluster, `wsload run` on one machine), and the decisions the conductor makes.
//!
//! - [`protocol`]: the shard control protocol's messages, used by both ends.
//! - [`auth`]: the test's bearer token, which every control request carries.
//! - [`client`]: the conductor's side of it over HTTP.
//! - [`sequence`]: which cell runs next: the planned cells in order, or connectionLimit's
//!   search, judged on the probe merged over every shard.
//! - [`barrier`]: whether every live shard has opened its share of a cell (to measure from
//!   one instant), or finished the cell, and the merged outcome.
//! - [`settle`]: when the server's received counter has taken in what the shards sent.
//! - [`assemble`]: the merged result completed with what only the conductor knows.
//! - [`clock`]: each shard's clock offset against the conductor's, from probes.
//! - [`server_topics`]: the reference server's topic counters over a fanout cell.
//! - [`server_connections`]: each replica's connection counters over a cell.
//! - [`replicas`]: every server replica's exposition, scraped in turn, for those two.
//!
//! Every cell is a barrier: the conductor releases cell k+1 at one instant for all shards
//! once all finished cell k and the server settled, so "N connections at once" did happen
//! and a cell's delivery is the sum of every replica's counter against the sum of what every
//! shard sent, over exactly that cell.

pub mod assemble;
pub mod auth;
pub mod barrier;
pub mod client;
pub mod clock;
pub mod endpoint;
pub mod protocol;
pub mod replicas;
pub mod sequence;
pub mod server_connections;
pub mod server_topics;
pub mod settle;

pub use auth::Token;
pub use protocol::{
    CellKey, CellOrder, CellSummary, ConnectSummary, MeasureOrder, Phase, StartRequest, State,
};
pub use sequence::Conductor;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A shard's endpoint did not answer as the protocol says.
    #[error("{0}")]
    Shard(String),
    #[error(transparent)]
    Http(#[from] wsload_http::http_client::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
