//! Why a command of the load generator failed, and the exit code each failure gives: every
//! layer's own errors, and the command line's. Only the commands (main.rs) use it; each layer
//! below returns its own.

use crate::conduct::RunError;
use crate::conduct::error::{EXIT_FAILED, EXIT_INPUT};
use crate::connect::autobahn::AutobahnError;
use crate::fleet::FleetError;
use crate::machine::clock::ClockShiftError;
use crate::machine::sysctl::SysctlError;
use crate::observe::plot::PlotError;
use wsload_contract::env as var;

pub use crate::conduct::error::EXIT_MEASURED_NOTHING;

/// A cause of another kind than ours, kept as the error's source.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why a command failed. Each is of one exit-code class ([`Error::exit_code`]): the input's
/// fault (2), a target nothing can connect to (4), or the target's, this machine's or the
/// run's (3). Where there is a cause it is the source, shown after the context.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A run in this process.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A run over shard processes on this machine.
    #[error(transparent)]
    Fleet(#[from] FleetError),
    #[error(transparent)]
    LoadTest(#[from] wsload_spec::Error),
    /// A file read whole (a result to merge or show): unreadable, or over its size limit.
    #[error(transparent)]
    File(#[from] wsload_spec::file::ReadError),
    #[error(transparent)]
    Plot(#[from] PlotError),
    #[error(transparent)]
    Sysctl(#[from] SysctlError),
    #[error(transparent)]
    ClockShift(#[from] ClockShiftError),
    #[error(transparent)]
    Autobahn(#[from] AutobahnError),
    #[error(
        "${} is empty: name a LoadTest file or put the LoadTest's YAML in it",
        var::LOADTEST
    )]
    EmptyLoadTestEnv,
    #[error(
        "no LoadTest: name a file or set ${} to the LoadTest's YAML",
        var::LOADTEST
    )]
    NoLoadTest,
    #[error("${} is not UTF-8", var::LOADTEST)]
    LoadTestEnvNotUtf8,
    /// The process that started this shard has ended before the shard could ask to end with
    /// it.
    #[error(
        "{}={parent}: that process, which started this shard, has ended",
        var::EXIT_WITH_PARENT
    )]
    ParentGone { parent: String },
    #[error("--index {index} --count {count}: the index must be below the count")]
    ShardIndex { index: u32, count: u32 },
    #[error(
        "--await-start needs the test's control token: set {} (or --control-token-file) to the file holding it",
        var::CONTROL_TOKEN_FILE
    )]
    NoControlToken,
    #[error("merge: name at least one result file")]
    NothingToMerge,
    /// A value that does not read as what it should: a control token file, a result.
    #[error("{what}: {source}")]
    Invalid {
        what: String,
        #[source]
        source: Cause,
    },
    /// A file this machine would not write, a system call it refused.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: Cause,
    },
}

impl Error {
    pub fn invalid(what: impl Into<String>, source: impl Into<Cause>) -> Error {
        Error::Invalid {
            what: what.into(),
            source: source.into(),
        }
    }

    pub fn io(what: impl Into<String>, source: impl Into<Cause>) -> Error {
        Error::Io {
            what: what.into(),
            source: source.into(),
        }
    }

    /// The process's exit code for this error: 2 when the input is at fault, 4 when the
    /// target's name resolves to nothing (nothing could connect), else 3 (the codes are listed
    /// in docs/loadtest.md).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Run(e) => e.exit_code(),
            Error::Fleet(e) => e.exit_code(),
            Error::Sysctl(e) if !e.is_input() => EXIT_FAILED,
            Error::Autobahn(e) if !e.is_input() => EXIT_FAILED,
            Error::Plot(PlotError::NotBuilt) => EXIT_INPUT,
            Error::File(wsload_spec::file::ReadError::TooBig { .. }) => EXIT_INPUT,
            Error::Plot(_) | Error::File(_) | Error::ParentGone { .. } | Error::Io { .. } => {
                EXIT_FAILED
            }
            Error::LoadTest(_)
            | Error::Sysctl(_)
            | Error::ClockShift(_)
            | Error::Autobahn(_)
            | Error::EmptyLoadTestEnv
            | Error::NoLoadTest
            | Error::LoadTestEnvNotUtf8
            | Error::ShardIndex { .. }
            | Error::NoControlToken
            | Error::NothingToMerge
            | Error::Invalid { .. } => EXIT_INPUT,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
