use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// wsload-operator: runs LoadTests (wsload.dev/v1alpha1) in a Kubernetes cluster.
#[derive(Parser)]
#[command(name = "wsload-operator", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
    }
}
