//! What this machine gives a run, read at run time, never assumed: the wall clock shards
//! share ([`clock`]), the process's CPU time ([`cpu`]), kernel settings ([`sysctl`]) and the
//! kernel's TCP counters of this network namespace ([`netstat`]) and whether other processes
//! share it ([`netns`]).

pub mod clock;
pub mod cpu;
pub mod netns;
pub mod netstat;
pub mod sysctl;
