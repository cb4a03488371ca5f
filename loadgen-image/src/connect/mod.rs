//! Opening connections: where the target is ([`endpoint`]), the upgrade request
//! ([`request`]), TCP, TLS ([`tls`]) and the handshake ([`dialer`]), then the conversation's
//! steps on open ([`open`]); and why an attempt failed ([`failure`]). [`autobahn`] drives the
//! same client through the Autobahn|Testsuite.

pub mod autobahn;
pub mod dialer;
pub mod early;
pub mod endpoint;
pub mod error;
pub mod failure;
pub mod open;
pub mod request;
pub mod tls;

pub use dialer::{Dialed, Dialer};
pub use error::SetupError;
pub use failure::{DialError, io_error};
pub use open::{NEGOTIATED, Role, open, reopen};
pub use wsload_ws::Ws;
