use clap::{Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use wsload_contract::env as var;
use wsload_operator::control_key::{ControlKey, KeyError};
use wsload_operator::controller::{self, Options};
use wsload_operator::defaults::{Defaults, parse_placement};
use wsload_operator::leader::LeaderConfig;
use wsload_operator::reconcile::Config;

/// wsload-operator: runs LoadTests (wsload.dev/v1alpha1) in a Kubernetes cluster.
///
/// `run` reconciles LoadTests: a managed server pod, N load-generator shards released together,
/// their results merged into the LoadTest's status. `crd` prints the CustomResourceDefinition.
#[derive(Parser)]
#[command(name = "wsload-operator", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
// Parsed once at start-up: the size of the variants does not matter.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Reconcile LoadTests until SIGTERM.
    Run {
        /// `/metrics`, `/healthz`, `/readyz`.
        #[arg(
            long,
            env = var::OPERATOR_METRICS_LISTEN,
            default_value = "0.0.0.0:8080"
        )]
        metrics_listen: SocketAddr,
        /// Watch only this namespace (the chart's namespaced mode); all when unset.
        #[arg(long, env = var::OPERATOR_WATCH_NAMESPACE)]
        watch_namespace: Option<String>,
        /// Hold a Lease before reconciling, so only one replica acts.
        #[arg(long, env = var::OPERATOR_LEADER_ELECT, default_value_t = true, action = clap::ArgAction::Set)]
        leader_elect: bool,
        /// Namespace of the Lease (the operator's own; the downward API gives it).
        #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
        lease_namespace: String,
        /// This replica's name in the Lease.
        #[arg(long, env = "POD_NAME")]
        identity: Option<String>,
        /// How often a running test is looked at when nothing changes.
        #[arg(long, env = var::OPERATOR_POLL, default_value = "2s", value_parser = humantime::parse_duration)]
        poll: Duration,
        /// From deciding a test's next cell to its start instant, and from seeing every shard
        /// connected to the instant they measure from (every shard hears of it first, so all
        /// begin together).
        #[arg(long, env = var::OPERATOR_CELL_DELAY, default_value = "1s", value_parser = humantime::parse_duration)]
        cell_delay: Duration,
        /// Limit on one control request to a shard (state, release, cell, end, finish): a
        /// shard silent that long is unreachable and does not hold up the others.
        #[arg(long, env = var::OPERATOR_CONTROL_TIMEOUT, default_value = "2s", value_parser = humantime::parse_duration)]
        control_timeout: Duration,
        /// Limit on fetching one shard's result.
        #[arg(long, env = var::OPERATOR_RESULT_TIMEOUT, default_value = "30s", value_parser = humantime::parse_duration)]
        result_timeout: Duration,
        #[arg(long, env = var::OPERATOR_LOG_FORMAT, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
        /// Load-generator image for LoadTests that keep the built-in one (a private registry).
        #[arg(long, env = var::OPERATOR_LOADGEN_IMAGE)]
        loadgen_image: Option<String>,
        /// Server image for LoadTests that keep the built-in one.
        #[arg(long, env = var::OPERATOR_SERVER_IMAGE)]
        server_image: Option<String>,
        /// The file holding the key each test's shard control token is derived from (the
        /// chart mounts it from its Secret). Required: shards refuse control requests without
        /// their test's token.
        #[arg(long, env = var::OPERATOR_CONTROL_KEY_FILE)]
        control_key_file: Option<PathBuf>,
        /// Placement (JSON: nodeSelector, tolerations, affinity) of shards whose LoadTest sets none.
        #[arg(long, env = var::OPERATOR_LOADGEN_PLACEMENT)]
        loadgen_placement: Option<String>,
        /// Placement (JSON) of managed servers whose LoadTest sets none.
        #[arg(long, env = var::OPERATOR_SERVER_PLACEMENT)]
        server_placement: Option<String>,
    },
    /// Print the LoadTest CustomResourceDefinition (YAML).
    Crd,
    /// Print DOC (docs/loadtest.md) with its table of refused inputs rendered from CASES
    /// (crds/tests/refused.yaml): scripts/generate.sh keeps the table in step with the list
    /// the CRD's tests run.
    #[command(hide = true)]
    RefusedInputs {
        cases: std::path::PathBuf,
        doc: std::path::PathBuf,
    },
}

/// Why the refused-inputs table could not be rendered.
#[derive(Debug, thiserror::Error)]
enum DocError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Refused(#[from] wsload_spec::refused::RefusedError),
}

/// DOC with the refused-inputs table rendered from CASES (scripts/generate.sh runs it).
fn refused_inputs_doc(cases: &std::path::Path, doc: &std::path::Path) -> Result<String, DocError> {
    use wsload_spec::refused::{RefusedInputs, splice_table};
    let read = |p: &std::path::Path| {
        std::fs::read_to_string(p).map_err(|source| DocError::Read {
            path: p.to_path_buf(),
            source,
        })
    };
    let list = RefusedInputs::parse(&read(cases)?)?;
    Ok(splice_table(&read(doc)?, &list.markdown())?)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => match wsload_operator::crd::yaml() {
            Ok(y) => {
                print!("{y}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("wsload-operator: {e}");
                ExitCode::FAILURE
            }
        },
        Command::RefusedInputs { cases, doc } => match refused_inputs_doc(&cases, &doc) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("wsload-operator: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Run {
            metrics_listen,
            watch_namespace,
            leader_elect,
            lease_namespace,
            identity,
            poll,
            cell_delay,
            control_timeout,
            result_timeout,
            log_format,
            loadgen_image,
            server_image,
            control_key_file,
            loadgen_placement,
            server_placement,
        } => {
            init_logs(log_format);
            let control_key = match control_key(control_key_file) {
                Ok(k) => k,
                Err(e) => {
                    eprintln!("wsload-operator: {e}");
                    return ExitCode::from(2);
                }
            };
            let placement = |var: &str, json: Option<String>| {
                json.filter(|j| !j.trim().is_empty())
                    .map(|j| parse_placement(var, &j))
                    .transpose()
            };
            let defaults = match (
                placement(var::OPERATOR_LOADGEN_PLACEMENT, loadgen_placement),
                placement(var::OPERATOR_SERVER_PLACEMENT, server_placement),
            ) {
                (Ok(loadgen_placement), Ok(server_placement)) => Defaults {
                    loadgen_image,
                    server_image,
                    loadgen_placement,
                    server_placement,
                },
                (Err(e), _) | (_, Err(e)) => {
                    eprintln!("wsload-operator: {e}");
                    return ExitCode::from(2);
                }
            };
            let identity =
                identity.unwrap_or_else(|| format!("wsload-operator-{}", std::process::id()));
            let read_cluster_objects = watch_namespace.is_none();
            let opts = Options {
                metrics_listen,
                namespace: watch_namespace,
                leader: leader_elect.then(|| LeaderConfig::new(lease_namespace, identity)),
                config: Config {
                    poll,
                    cell_delay,
                    control_timeout,
                    result_timeout,
                    defaults,
                    read_cluster_objects,
                },
                control_key,
            };
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("wsload-operator: cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            runtime.block_on(async {
                let client = match kube::Client::try_default().await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::error!(error = %e, "no Kubernetes client configuration (in-cluster or KUBECONFIG)");
                        return ExitCode::FAILURE;
                    }
                };
                match controller::run(client, opts).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        tracing::error!(error = %e, "operator stopped");
                        ExitCode::FAILURE
                    }
                }
            })
        }
    }
}

/// Why the operator has no control key: it does not start without one.
#[derive(Debug, thiserror::Error)]
enum ControlKeyError {
    #[error(
        "--control-key-file (or {var}) is required: the file holding the key each test's shard control token is derived from (the Helm chart mounts it from its Secret)",
        var = var::OPERATOR_CONTROL_KEY_FILE
    )]
    NoFile,
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// The operator's control key, from the file the flag (or its variable) names.
fn control_key(file: Option<PathBuf>) -> Result<ControlKey, ControlKeyError> {
    let file = file.ok_or(ControlKeyError::NoFile)?;
    Ok(ControlKey::read(&file)?)
}

fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::collections::BTreeSet;

    /// The operator's own variables, as the chart sets them, are the contract's.
    #[test]
    fn every_variable_the_operator_reads_is_the_contracts() {
        let cli = Cli::command();
        let run = cli.find_subcommand("run").expect("the run command");
        let read: BTreeSet<&str> = run
            .get_arguments()
            .filter_map(|a| a.get_env()?.to_str())
            .filter(|v| v.starts_with("WSLOAD_"))
            .collect();
        let listed: BTreeSet<&str> = var::ALL
            .iter()
            .copied()
            .filter(|v| v.starts_with("WSLOAD_OPERATOR_"))
            .collect();
        assert_eq!(read, listed);
    }

    #[test]
    fn a_missing_control_key_names_the_flag_and_its_variable() {
        let e = control_key(None).err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some(
                "--control-key-file (or WSLOAD_OPERATOR_CONTROL_KEY_FILE) is required: the file holding the key each test's shard control token is derived from (the Helm chart mounts it from its Secret)"
            )
        );
        let e = control_key(Some(PathBuf::from("/nonexistent/wsload-key")))
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some(
                "cannot read the control key file /nonexistent/wsload-key: No such file or directory (os error 2)"
            )
        );
    }
}
