//! The WSE application protocol as wsload speaks it, shared by the reference server
//! (`wsload-server`) and the load generator (`wsload`), so both sides agree byte for byte.
//!
//! - [`jwt`]: HS256 tokens, signed by the load generator and checked by the server.
//! - [`frame`]: the `M:` (MsgPack), `C:` (zlib) and `E:` (encrypted) binary prefixes.
//! - [`envelope`]: the `{c,t,id,ts,seq,p,v}` message envelope and the server's messages.
//! - [`pubsub`]: topics (subscribe, publish, the server's ticker) in plain JSON.

pub mod envelope;
pub mod frame;
pub mod jwt;
pub mod pubsub;

/// Errors from decoding or checking protocol data.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("jwt: {0}")]
    Jwt(#[from] jwt::JwtError),
    #[error("frame: {0}")]
    Frame(#[from] frame::FrameError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
