//! Topics, shared by the `pubsub` and `wse` profiles: subscriptions, the fan-out of each
//! publish, each subscriber's bounded queue, the server's ticker, and their exact counters.
//!
//! A publish takes the registry's read lock, and for each subscriber puts a clone of the
//! publisher's message (the same bytes, by reference) into that connection's bounded queue
//! without waiting; a full queue drops the delivery and counts it. Each connection's session
//! writes its queue to its socket and counts what it wrote. See [`counters`] for how the
//! counts reconcile.

pub mod counters;
mod outbox;
mod registry;
pub mod ticker;

pub use counters::Source;
pub use outbox::{Delivery, Outbox};
pub use registry::{Registry, Subscriber};
