use clap::Parser;
use std::process::ExitCode;
use wsload_server::config::{Cli, Config, LogFormat};

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Resolves on SIGTERM (what Kubernetes sends) or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "no SIGTERM handler; stopping on SIGINT only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Asks the kernel for SIGTERM when the parent ends, which the server drains on like any
/// SIGTERM. A parent that ended before the request was made goes unnoticed by the kernel;
/// then this process was adopted by a reaper, and the parent's pid no longer matches.
fn exit_with_parent(parent: u32) -> Result<(), ParentError> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
        .map_err(ParentError::Prctl)?;
    let now = std::os::unix::process::parent_id();
    if now != parent {
        return Err(ParentError::Ended { parent, now });
    }
    Ok(())
}

/// Why `--exit-with-parent` cannot be honoured.
#[derive(Debug, thiserror::Error)]
enum ParentError {
    #[error("--exit-with-parent: prctl(PR_SET_PDEATHSIG): {0}")]
    Prctl(#[source] nix::errno::Errno),
    #[error("--exit-with-parent {parent}: the parent is {now}, so {parent} has ended")]
    Ended { parent: u32, now: u32 },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    if let Some(parent) = cli.exit_with_parent
        && let Err(e) = exit_with_parent(parent)
    {
        eprintln!("wsload-server: {e}");
        return ExitCode::FAILURE;
    }
    let config = match Config::from_cli(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("wsload-server: {e}");
            return ExitCode::from(2);
        }
    };
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if let Some(n) = cli.threads {
        runtime.worker_threads(n.max(1));
    }
    let runtime = match runtime.build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("wsload-server: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(wsload_server::run(config, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wsload-server: {e}");
            ExitCode::FAILURE
        }
    }
}
