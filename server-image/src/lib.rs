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

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(String),
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
