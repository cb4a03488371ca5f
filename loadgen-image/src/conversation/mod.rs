//! The LoadTest's conversation, compiled once per run from the spec (`wsload_spec`'s
//! templates, matchers and extractors): the LoadTest's own, or its protocol's built-in one
//! (`wsload_spec::builtin`), alike. Nothing here touches a socket: the behaviors
//! (crate::behavior) ask it what to send and what a frame read is.
//!
//! - [`script`]: the compiled conversation ([`Script`]): the steps on open, the automatic
//!   replies, the client heartbeat, the measured message (and the ping), the pushes;
//! - [`out`]: a template ready to send ([`Out`]): its literal bytes in one buffer and the
//!   places its placeholders go, written per message into the worker's arena;
//! - [`prebuilt`]: a counting loop's message made from the last one, only changed digits
//!   written over;
//! - [`encoding`]: a cell's wire format (text, binary, `M:` MsgPack, `C:` zlib);
//! - [`recognise`] and [`answer`]: what a frame read is to the conversation (a reply rule's,
//!   a push) and to what was sent (the answer to which message, or unsolicited);
//!   [`seq_echo`]: the echo of a message whose only number is its `${seq}`, read the short way;
//! - [`delivery`]: what a fanout subscriber reads from a delivery;
//! - `unreadable`: what a report shows of a number an answer or a delivery carried that could
//!   not be read.
//!
//! Captured variables are spliced in once per connection ([`Out::resolve`]); per message only
//! the sequence number, the send time and the random parts are written: no allocation per
//! message.

pub mod answer;
pub mod delivery;
pub mod encoding;
pub mod error;
pub mod out;
pub mod prebuilt;
pub mod recognise;
pub mod script;
pub mod seq_echo;
mod unreadable;

pub use delivery::{Delivered, Delivery, DeliveryRule, Published};
pub use encoding::Encoding;
pub use error::ScriptError;
pub use out::{Fill, Out, SendTime};
pub use prebuilt::Prebuilt;
pub use recognise::{Incoming, Recognised};
pub use script::{Action, DEFAULT_EXPECT_TIMEOUT, Script, Step, TOPIC_VAR};

#[cfg(test)]
mod tests;
