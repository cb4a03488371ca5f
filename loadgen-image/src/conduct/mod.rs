//! A LoadTest run in this process, as a whole test or one shard's share: its target (a URL,
//! or the managed server started here: [`target`], [`local_server`]), whether this process
//! can open its share ([`capacity`]), who orders its cells ([`gate`]: the conductor here, or
//! elsewhere over the shard control protocol, [`control`]), the run itself ([`run`]), its
//! background thread ([`background`]), the servers' own counters ([`server_metrics`]) and
//! what is done to the managed server meanwhile ([`disrupt`]).

pub mod background;
pub mod capacity;
pub mod control;
pub mod disrupt;
pub mod error;
pub mod gate;
pub mod local_server;
pub mod replica_watch;
pub mod run;
pub mod server_metrics;
pub mod target;

pub use error::RunError;
