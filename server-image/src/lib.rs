//! wsload-server: the reference WebSocket server of wsload. See `docs/server.md`.

pub mod config;
mod files;
mod handshake;
mod pubsub;
mod server;
mod session;
mod state;
pub mod stats;
mod topics;
mod wse;

pub use server::run;
use wsload_contract::env as var;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot bind the {what} on {addr}: {source}{hint}")]
    Bind {
        what: &'static str,
        addr: std::net::SocketAddr,
        source: std::io::Error,
        /// What to do about it, `; ...`, or empty.
        hint: &'static str,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why the flags make no configuration; each names the flag and what to write instead.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown profile {name:?}: use one of echo, wse, sink, broadcast, pubsub")]
    UnknownProfile { name: String },
    #[error("--listen {listen:?}: {source}; write ADDR:PORT or ADDR:PORT=PROFILE")]
    Listen {
        listen: String,
        #[source]
        source: std::net::AddrParseError,
    },
    #[error("--listen: at least one listener is needed")]
    NoListener,
    #[error("--route {route:?}: write PATH=PROFILE, e.g. /wse=wse")]
    RouteForm { route: String },
    #[error("--route {route:?}: the path must start with '/'")]
    RoutePath { route: String },
    #[error("{flag}: must be at least {min} bytes")]
    TooSmall { flag: &'static str, min: usize },
    #[error("{flag}: must be above zero")]
    Zero { flag: &'static str },
    #[error("--ticker-rate {0}: must be a number of messages per second above zero")]
    TickerRate(f64),
    #[error(
        "the wse profile needs --jwt-secret ({}), or --wse-allow-anonymous",
        var::SERVER_JWT_SECRET
    )]
    WseWithoutSecret,
    #[error("--ticker-topics: nobody could subscribe; serve the pubsub or wse profile too")]
    TickerUnheard,
}
