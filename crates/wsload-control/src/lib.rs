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
//! - [`replica_watch`]: the replicas' admissions every 100 ms of a disrupted cell, and what
//!   each held at its end.
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
pub mod replica_watch;
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

/// Why an exchange with a shard's endpoint failed: the endpoint did not answer as the
/// protocol says, or not at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An answer of a status the protocol has no place for here.
    #[error("{method} {url}: HTTP {status}")]
    Status {
        method: &'static str,
        url: String,
        status: u16,
    },
    /// An order the shard refused, with its reason (the answer's body).
    #[error("POST {url}: HTTP {status}: {reason}")]
    Refused {
        url: String,
        status: u16,
        reason: String,
    },
    /// An answer that is not the protocol's JSON.
    #[error("{method} {url}: {source}")]
    Answer {
        method: &'static str,
        url: String,
        #[source]
        source: serde_json::Error,
    },
    /// An order that does not serialize (nothing was sent).
    #[error("cannot serialize: {0}")]
    Order(#[source] serde_json::Error),
    #[error(transparent)]
    Http(#[from] wsload_http::http_client::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
