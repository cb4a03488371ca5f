use clap::{Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;
use wsload_operator::controller::{self, Options};
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
enum Command {
    /// Reconcile LoadTests until SIGTERM.
    Run {
        /// `/metrics`, `/healthz`, `/readyz`.
        #[arg(
            long,
            env = "WSLOAD_OPERATOR_METRICS_LISTEN",
            default_value = "0.0.0.0:8080"
        )]
        metrics_listen: SocketAddr,
        /// Watch only this namespace (the chart's namespaced mode); all when unset.
        #[arg(long, env = "WSLOAD_OPERATOR_WATCH_NAMESPACE")]
        watch_namespace: Option<String>,
        /// Hold a Lease before reconciling, so only one replica acts.
        #[arg(long, env = "WSLOAD_OPERATOR_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
        leader_elect: bool,
        /// Namespace of the Lease (the operator's own; the downward API gives it).
        #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
        lease_namespace: String,
        /// This replica's name in the Lease.
        #[arg(long, env = "POD_NAME")]
        identity: Option<String>,
        /// How often a running test is looked at when nothing changes.
        #[arg(long, env = "WSLOAD_OPERATOR_POLL", default_value = "2s", value_parser = humantime::parse_duration)]
        poll: Duration,
        #[arg(long, env = "WSLOAD_OPERATOR_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
    },
    /// Print the LoadTest CustomResourceDefinition (YAML).
    Crd,
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
        Command::Run {
            metrics_listen,
            watch_namespace,
            leader_elect,
            lease_namespace,
            identity,
            poll,
            log_format,
        } => {
            init_logs(log_format);
            let identity =
                identity.unwrap_or_else(|| format!("wsload-operator-{}", std::process::id()));
            let opts = Options {
                metrics_listen,
                namespace: watch_namespace,
                leader: leader_elect.then(|| LeaderConfig::new(lease_namespace, identity)),
                config: Config {
                    poll,
                    ..Config::default()
                },
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
