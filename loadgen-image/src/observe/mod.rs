//! The run as it goes, from its live counters: the terminal's bar ([`progress`], with every
//! other stderr line above it: [`terminal`]), the timelines sampled each second and each cell
//! ([`sampler`]), the Prometheus exposition ([`exposition`]) and the run's plot ([`plot`]).

pub mod exposition;
pub mod plot;
pub mod progress;
pub mod sampler;
pub mod terminal;
