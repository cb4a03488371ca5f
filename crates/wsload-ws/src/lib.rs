//! The load generator's WebSocket client connection (RFC 6455): the opening handshake and the
//! framing, written for a load generator's hot paths.
//!
//! tokio-tungstenite did this before; profiles of the load-generator benchmark showed where its
//! general-purpose design cost a load generator CPU: at 1 KiB echoes it zero-filled the whole
//! read buffer before every read (9% of the client's CPU), formatted each outgoing frame through
//! a `Frame` (8%), copied payloads twice, and set wakers through atomics on every poll; in a
//! connection storm its handshake future (10.8 KB, moved into every dial task) and its 8 KiB of
//! handshake buffers were most of the memory the storm touched. Here:
//!
//! - reads go through `read_buf` (never zero-filled) into a buffer the thread's connections take
//!   turns with (the thread's spare buffers); a message's payload is split off it (no copy), and
//!   it is reused once the messages read from it are gone;
//! - each outgoing frame is written straight into a write buffer, also the thread's: header,
//!   payload copied once, masked in place with a fresh random key per frame (RFC 6455 5.3, from
//!   the same thread-local CSPRNG tungstenite uses, drawn 64 keys at a time); `flush` writes
//!   the buffer in one call;
//! - so a connection with nothing buffered owns no buffer at all: an idle connection is its
//!   socket, this struct and its task;
//! - counting loops ([`Ws::poll_recv`]) count every complete data frame buffered without building
//!   a message for each, UTF-8 of text frames still checked, each payload shown in place to the
//!   caller's check of whether it is the one expected;
//! - the handshake request is rendered once per target by the caller (only the key and a
//!   per-connection token change) and the response is read into the thread's read buffer too.
//!
//! Messages and errors are tungstenite's types, and [`Ws`] is a `Stream` + `Sink` of messages as
//! tokio-tungstenite's stream was: pings are answered with pongs, a server's close is answered,
//! fragmented messages are reassembled, and protocol violations fail the connection as
//! tungstenite's did (same error variants: [`failure_code`] tells a caller which close code a
//! violation got), after sending the peer a close frame with the violation's status code
//! ([`Ws::linger`] then lets it reach the peer before the socket goes). The Autobahn
//! fuzzingserver checks all this (`scripts/autobahn.sh --client`, through the load generator's hidden
//! `wsload autobahn-client`).
//!
//! The modules, by what they hold: [`frame`] (headers read and written), [`mask`], [`handshake`]
//! (the key and the server's response head), [`deflate`] (permessage-deflate: the offer, the
//! answer's checks, the per-message codec), the connection itself ([`Ws`], over an [`Io`]),
//! its bounds ([`Limits`]: what one connection may hold for a server), and the errors (each
//! fault of a failed upgrade a type holding what the server said: [`HandshakeError`]).
//! `tests/fuzz.rs` feeds the frame and head parsers arbitrary bytes cut at arbitrary points;
//! `cargo bench -p wsload-ws --bench codec` times masking and framing (MB/s and ns per frame at
//! 64 B, 1 KiB and 64 KiB, the word-at-a-time mask beside a byte loop) and permessage-deflate
//! (µs per JSON message each way, and the state a connection holds).

mod conn;
pub mod deflate;
mod error;
mod excerpt;
pub mod frame;
pub mod handshake;
mod io;
mod limits;
pub mod mask;
mod message;
mod spare;
pub mod split;
#[cfg(any(test, feature = "test-server"))]
pub mod test_server;

pub use conn::{Recv, Tally, Ws};
pub use deflate::{DeflateOffer, DeflateParams};
pub use error::{
    DeflateParam, ExtensionFault, HandshakeError, HeadFault, InvalidUpgrade, NotHttp, ParamFault,
    RequiredHeader, failure_code,
};
pub use handshake::{Agreed, Head, Offer, new_key};
pub use io::Io;
pub use limits::{Limits, MAX_PENDING_WRITE};
pub use message::MAX_MESSAGE;
pub use split::{Length, Split};
