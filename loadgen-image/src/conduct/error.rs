//! Why a run in this process could not be made ready, or broke off; and the exit code each
//! gives (docs/loadtest.md, "Results").

use super::capacity::ShareTooLarge;
use super::local_server::ServerError;
use crate::connect::SetupError;
use crate::model::plan::PlanError;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The connections cannot be set up (a field of the spec, a secret, a target that
    /// resolves to nothing).
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The conversation does not compile (a spec that skipped validation).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// This process may not open its share.
    #[error(transparent)]
    Share(#[from] ShareTooLarge),
    /// The managed server did not start.
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("spec.target: no url and no server")]
    NoTarget,
    /// A disruption this process cannot do (the server it would kill is not its own).
    #[error("spec.disruptions: {0}")]
    Disruption(String),
    /// A thread, a port or a runtime this machine did not give.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A panic in the load generator (a bug): what it said, all a panic carries. The cells
    /// measured before are kept in the result.
    #[error("the run failed: {message}")]
    Panicked { message: String },
}

/// The exit code of input at fault.
pub const EXIT_INPUT: u8 = 2;
/// The exit code of a target's, this machine's or the run's failure.
pub const EXIT_FAILED: u8 = 3;
/// The exit code of a run that measured nothing of what it was for: nothing connected (the
/// target's name did not resolve, or every connection failed), or no answer came back.
pub const EXIT_MEASURED_NOTHING: u8 = 4;

impl RunError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> RunError {
        RunError::Io {
            what: what.into(),
            source,
        }
    }

    /// 2 when the input is at fault, 4 when the target's name resolves to nothing (nothing
    /// could connect), else 3.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Setup(SetupError::Unresolvable { .. }) => EXIT_MEASURED_NOTHING,
            RunError::Setup(SetupError::NoAddress { .. })
            | RunError::Server(_)
            | RunError::Io { .. }
            | RunError::Panicked { .. } => EXIT_FAILED,
            RunError::Setup(_)
            | RunError::Plan(_)
            | RunError::Share(_)
            | RunError::NoTarget
            | RunError::Disruption(_) => EXIT_INPUT,
        }
    }
}
