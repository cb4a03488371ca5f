//! What this machine gives a run, read at run time, never assumed: the wall clock shards
//! share ([`clock`]), the process's CPU time ([`cpu`]), kernel settings ([`sysctl`]) and the
//! kernel's TCP counters of this network namespace ([`netstat`]).

pub mod clock;
pub mod cpu;
pub mod netstat;
pub mod sysctl;
