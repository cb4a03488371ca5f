//! What a test is made of before anything runs: the cells a spec becomes
//! ([`plan`]), each as data ([`cell`], [`behavior`]), the open-loop schedules ([`schedule`]),
//! and how the run was asked for ([`options`]).

pub mod behavior;
pub mod cell;
pub mod comeback;
pub mod options;
pub mod plan;
pub mod schedule;

pub use behavior::{Behavior, FanoutPlan, PingCfg};
pub use cell::{Cell, Phases, Planned, Shard};
pub use schedule::Schedule;
