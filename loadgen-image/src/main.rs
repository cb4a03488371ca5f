use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use wsload::conduct::control::{self, Exit};
use wsload::conduct::run;
use wsload::model::Shard;
use wsload::model::options::Options;
use wsload::report::RunResult;
use wsload::{Error, Result};
use wsload_contract::env as var;
use wsload_control::Token;
use wsload_spec::LoadTest;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// wsload: WebSocket load generator.
///
/// Runs a LoadTest file (apiVersion wsload.dev/v1alpha1, the same file `kubectl apply` takes)
/// on this machine and prints seed-style tables and a verdict. Exit codes: 0 passed (or no
/// thresholds), 1 a threshold failed, 2 invalid input, 3 the run could not be done, 4 it
/// measured nothing of what it was for (nothing connected, no answer came back, no connection
/// survived to measure, or a threshold's figure was never measured).
#[derive(Parser)]
#[command(name = "wsload", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct Common {
    /// Write the JSON result (every count and histogram) here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Worker threads, one runtime each (default: one per core).
    #[arg(long, env = var::THREADS)]
    threads: Option<usize>,
    /// Serve Prometheus metrics of the run on this address (`shard`: 0.0.0.0:9464 by default).
    #[arg(long, env = var::METRICS_LISTEN)]
    metrics_listen: Option<SocketAddr>,
}

#[derive(Subcommand)]
enum Command {
    /// Run a whole LoadTest here: one shard in this process, or `spec.shards` shard processes
    /// conducted as the operator conducts pods.
    Run(RunArgs),
    /// Run one shard's share (what a load-generator pod runs).
    ///
    /// With --await-start, the shard gets ready and waits for the operator's start on its
    /// endpoint (--metrics-listen): GET /control, POST /control/start {"startAt": unix_ms},
    /// GET /control/result, POST /control/finish (docs/operator.md). It then exits 0 once
    /// finished (or after --linger), whatever the thresholds say: the operator judges them
    /// over all shards.
    Shard(ShardArgs),
    /// Merge shard results into one report (histograms add exactly).
    Merge(MergeArgs),
    /// Show a result again: a run's --out, a shard's, or the operator's merged result (plain
    /// or gzip-compressed JSON); --html writes it as one self-contained HTML page. Exits 1
    /// when its verdict failed, as the run did.
    Report(ReportArgs),
    /// Compare a result with a baseline, cell by cell and figure by figure (throughput, every
    /// percentile, drops and losses): Regressed, Improved or Same, each change judged by a
    /// statistical test at --confidence and counted only from --min-effect. Takes what
    /// `report` takes. Exits 0 for Same or Improved, 1 for Regressed, 2 for results that cannot
    /// be compared (other scenarios or cells), 3 for a result that cannot be read.
    Compare(CompareArgs),
    /// Check a LoadTest file and print what it would run.
    Validate(ValidateArgs),
    /// Echo for an Autobahn|Testsuite fuzzingserver, with the load generator's own client:
    /// its conformance test (scripts/autobahn.sh --client).
    #[command(hide = true)]
    AutobahnClient(AutobahnClientArgs),
    /// Set kernel parameters, KEY=VALUE (e.g. net.core.somaxconn=65535): what the operator's
    /// tuning init container runs, as root.
    Sysctl(SysctlArgs),
}

// The arguments of each subcommand. No doc comments on these structs: clap would take them
// for the subcommand's help, which the variants above give.

#[derive(clap::Args)]
struct RunArgs {
    file: String,
    #[command(flatten)]
    common: Common,
    /// The wsload-server binary for a managed server (default: beside this binary).
    #[arg(long, env = var::SERVER_BIN)]
    server_bin: Option<PathBuf>,
    /// Plot RTT percentiles and messages per second over the run, one point a second,
    /// to this PNG (the LoadTest overview dashboard's two main panels).
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
    #[command(flatten)]
    html: HtmlArg,
}

#[derive(clap::Args)]
struct ShardArgs {
    /// The LoadTest file; without one, the LoadTest YAML in WSLOAD_LOADTEST.
    file: Option<String>,
    #[arg(long, env = var::SHARD_INDEX)]
    index: u32,
    #[arg(long, env = var::SHARD_COUNT)]
    count: u32,
    #[command(flatten)]
    common: Common,
    /// Start the load at this Unix time in milliseconds (the shards' common start).
    #[arg(long, env = var::START_AT, conflicts_with = "await_start")]
    start_at: Option<u64>,
    /// Get ready, then wait for POST /control/start (the operator's shard control protocol).
    #[arg(long, env = var::AWAIT_START)]
    await_start: bool,
    /// With --await-start: the file holding the test's control token, which every control
    /// request must carry (`Authorization: Bearer <token>`). Required with --await-start.
    #[arg(long, env = var::CONTROL_TOKEN_FILE)]
    control_token_file: Option<PathBuf>,
    /// With --await-start: exit this long after the run ends if no POST /control/finish
    /// comes (e.g. 15m, 90s).
    #[arg(long, env = var::LINGER, default_value = "15m", value_parser = humantime::parse_duration)]
    linger: Duration,
    /// Target URL, overriding the spec (the managed server's Service in a cluster).
    #[arg(long, env = var::TARGET_URL)]
    target_url: Option<String>,
    /// The server's metrics URL, for reconciling received messages.
    #[arg(long, env = var::SERVER_METRICS_URL)]
    server_metrics_url: Option<String>,
    #[arg(long, env = var::SERVER_BIN)]
    server_bin: Option<PathBuf>,
}

#[derive(clap::Args)]
struct MergeArgs {
    results: Vec<PathBuf>,
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    html: HtmlArg,
}

#[derive(clap::Args)]
struct ReportArgs {
    result: PathBuf,
    #[command(flatten)]
    html: HtmlArg,
}

#[derive(clap::Args)]
struct CompareArgs {
    /// The baseline's result.
    base: PathBuf,
    /// The result to judge against it.
    new: PathBuf,
    /// The smallest change that counts, relative to the baseline: `25%` or `0.25`. Below
    /// what two runs of one build differ by on your machines, every comparison is a coin
    /// toss: bench/compare/pairs.sh measures it.
    #[arg(long, default_value = "25%", value_parser = share)]
    min_effect: f64,
    /// Two-sided confidence of each figure's test: `99%` or `0.99`.
    #[arg(long, default_value = "99%", value_parser = confidence)]
    confidence: f64,
    /// Also write the comparison as JSON (every figure, its evidence and verdict) here.
    #[arg(long, value_name = "FILE.json")]
    json: Option<PathBuf>,
}

/// `10%` or `0.1`, at least 0. A bare number over 1 is refused: `25` meant as 25% would
/// read as 2500% and let every regression through.
fn share(s: &str) -> std::result::Result<f64, String> {
    let v = match s.trim().strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|p| p / 100.0),
        None => match s.trim().parse::<f64>() {
            Ok(v) if v > 1.0 => {
                return Err(format!(
                    "{s:?} without % would be {}%: write {s}% (or {})",
                    v * 100.0,
                    v / 100.0
                ));
            }
            other => other,
        },
    }
    .map_err(|_| format!("{s:?} is not a share: write 10% or 0.1"))?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("{s:?}: a share is 0% or more"))
    }
}

/// A share strictly between 0 and 1.
fn confidence(s: &str) -> std::result::Result<f64, String> {
    let v = share(s)?;
    if v > 0.0 && v < 1.0 {
        Ok(v)
    } else {
        Err(format!(
            "{s:?}: a confidence is between 0% and 100%, e.g. 99%"
        ))
    }
}

#[derive(clap::Args)]
struct HtmlArg {
    /// Also write the report as one self-contained HTML file (spec, verdict, tables, charts,
    /// shards; nothing fetched from the network), to share or attach to CI.
    #[arg(long, value_name = "FILE.html")]
    html: Option<PathBuf>,
}

#[derive(clap::Args)]
struct ValidateArgs {
    file: String,
}

#[derive(clap::Args)]
struct AutobahnClientArgs {
    /// The fuzzingserver, e.g. ws://127.0.0.1:9001.
    #[arg(long)]
    url: String,
    /// The agent name the report files results under.
    #[arg(long, default_value = "wsload")]
    agent: String,
    /// Only these cases (numbers from 1, as /getCaseCount counts them); default all.
    #[arg(long = "case")]
    cases: Vec<u32>,
}

#[derive(clap::Args)]
struct SysctlArgs {
    #[arg(required = true)]
    settings: Vec<String>,
}

/// Where a shard serves `/metrics` unless told otherwise (the pod's metrics port).
const DEFAULT_SHARD_METRICS: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 9464);

/// The env variable the operator passes the LoadTest in (as YAML).
const LOADTEST_ENV: &str = var::LOADTEST;

fn loadtest_from_env() -> Result<LoadTest> {
    match std::env::var(LOADTEST_ENV) {
        Ok(text) if !text.trim().is_empty() => {
            Ok(LoadTest::from_yaml(&text, &format!("${LOADTEST_ENV}"))?)
        }
        Ok(_) => Err(Error::EmptyLoadTestEnv),
        Err(std::env::VarError::NotPresent) => Err(Error::NoLoadTest),
        Err(std::env::VarError::NotUnicode(_)) => Err(Error::LoadTestEnvNotUtf8),
    }
}

fn write_out(path: &Option<PathBuf>, result: &RunResult) -> Result<()> {
    if let Some(p) = path {
        let json = serde_json::to_string_pretty(result)
            .map_err(|e| Error::io("cannot serialize the result", e))?;
        std::fs::write(p, json)
            .map_err(|e| Error::io(format!("cannot write {}", p.display()), e))?;
        eprintln!("result written to {}", p.display());
    }
    Ok(())
}

fn write_html(path: &Option<PathBuf>, result: &RunResult) -> Result<()> {
    if let Some(p) = path {
        std::fs::write(p, wsload_report::html(result))
            .map_err(|e| Error::io(format!("cannot write {}", p.display()), e))?;
        eprintln!("HTML report written to {}", p.display());
    }
    Ok(())
}

fn finish(result: &RunResult, out: &Option<PathBuf>, html: &HtmlArg) -> Result<ExitCode> {
    print!("{}", result.render());
    write_out(out, result)?;
    write_html(&html.html, result)?;
    Ok(match &result.verdict {
        // Measuring nothing wins over failed thresholds, which it usually causes.
        Some(v) if !v.unmeasured.is_empty() => ExitCode::from(wsload::EXIT_MEASURED_NOTHING),
        Some(v) if !v.passed => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    })
}

fn main_result(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Run(args) => run(args),
        Command::Shard(args) => shard(args),
        Command::Merge(args) => merge(args),
        Command::Report(args) => report(args),
        Command::Compare(args) => compare(args),
        Command::Validate(args) => validate(args),
        Command::AutobahnClient(args) => autobahn_client(args),
        Command::Sysctl(args) => sysctl(args),
    }
}

/// `wsload run`: in this process, or as shard processes when the test has several.
fn run(args: RunArgs) -> Result<ExitCode> {
    let RunArgs {
        file,
        common,
        server_bin,
        plot,
        html,
    } = args;
    if plot.is_some() {
        wsload::observe::plot::ensure_available()?;
    }
    let lt = LoadTest::from_file(&file)?;
    let opts = Options {
        threads: common.threads,
        server_bin,
        metrics_listen: common.metrics_listen,
        progress: true,
        plot,
        ..Default::default()
    };
    let result = if lt.spec.shards > 1 {
        wsload::fleet::run(&lt, std::path::Path::new(&file), &opts)?
    } else {
        run::run(&lt, &opts)?
    };
    finish(&result, &common.out, &html)
}

/// `wsload shard`: at once (or at `--start-at`), or under the operator's control protocol.
fn shard(args: ShardArgs) -> Result<ExitCode> {
    let ShardArgs {
        file,
        index,
        count,
        common,
        start_at,
        await_start,
        control_token_file,
        linger,
        target_url,
        server_metrics_url,
        server_bin,
    } = args;
    // A shard `wsload run` started ends with it: a killed run leaves no load behind. A run
    // that died before the request was made goes unnoticed by the kernel, but this process
    // then has another parent.
    if let Some(parent) = std::env::var_os(var::EXIT_WITH_PARENT) {
        nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
            .map_err(|e| Error::io("prctl(PR_SET_PDEATHSIG)", e))?;
        if parent.to_str() != Some(std::os::unix::process::parent_id().to_string().as_str()) {
            return Err(Error::ParentGone {
                parent: parent.to_string_lossy().into_owned(),
            });
        }
    }
    if count == 0 || index >= count {
        return Err(Error::ShardIndex { index, count });
    }
    // Read before anything else, so that a shard nobody could conduct stops at once.
    let token = if await_start {
        Some(control_token(control_token_file.as_deref())?)
    } else {
        None
    };
    // Before anything is stamped: the whole run reads one (possibly shifted) clock.
    wsload::machine::clock::shift_from_env(index)?;
    let lt = match &file {
        Some(file) => LoadTest::from_file(file)?,
        None => loadtest_from_env()?,
    };
    // A shard pod's image has no shell to look with: this line in its log says which limits
    // and sysctls it runs under (`wsload run` keeps its own shards' lines to itself).
    let kernel = wsload::conduct::capacity::kernel(
        &lt.spec,
        wsload::conduct::capacity::raise(),
        wsload::machine::sysctl::read,
    );
    eprintln!("{}", kernel.print());
    // A shard is a pod: Prometheus scrapes it while it runs.
    let listen = common.metrics_listen.unwrap_or(DEFAULT_SHARD_METRICS);
    let opts = Options {
        threads: common.threads,
        shard: Some(Shard { index, count }),
        server_bin,
        metrics_listen: Some(listen),
        start_at_unix_ms: start_at,
        target_url,
        server_metrics_url,
        progress: false,
        plot: None,
    };
    let Some(token) = token else {
        return finish(&run::run(&lt, &opts)?, &common.out, &HtmlArg { html: None });
    };
    shard_under_control(lt, opts, listen, token, linger, common.out)
}

/// The control token a shard under control requires of every control request.
fn control_token(file: Option<&std::path::Path>) -> Result<Token> {
    let file = file.ok_or(Error::NoControlToken)?;
    Token::read(file).map_err(|e| Error::invalid(var::CONTROL_TOKEN_FILE, e))
}

/// `wsload shard --await-start`: the shard waits for the operator's start on its endpoint and
/// reports over it; its exit code says whether it finished, not what the thresholds say.
fn shard_under_control(
    lt: LoadTest,
    opts: Options,
    listen: SocketAddr,
    token: Token,
    linger: Duration,
    out: Option<PathBuf>,
) -> Result<ExitCode> {
    let listener = run::bind_metrics(listen)?;
    let report = move |r: &RunResult| {
        print!("{}", r.render());
        let _ = std::io::Write::flush(&mut std::io::stdout());
        if let Err(e) = write_out(&out, r) {
            tracing::error!(error = %e, "the result was not written");
        }
    };
    Ok(
        match control::serve(lt, opts, listener, token, linger, report)? {
            Exit::Finished | Exit::Lingered { failed: false } | Exit::Terminated { done: true } => {
                ExitCode::SUCCESS
            }
            Exit::Lingered { failed: true } => ExitCode::from(3),
            // 128 + SIGTERM, as a shell reports a process the signal ended.
            Exit::Terminated { done: false } => ExitCode::from(143),
            Exit::Fatal(e) => return Err(e.into()),
        },
    )
}

/// `wsload merge`: shard results, plain or as the operator stores them, into one report.
fn merge(args: MergeArgs) -> Result<ExitCode> {
    let mut merged: Option<RunResult> = None;
    for p in &args.results {
        let r = read_result(p)?;
        match &mut merged {
            None => merged = Some(r),
            Some(m) => m
                .merge(&r)
                .map_err(|e| Error::invalid(p.display().to_string(), e))?,
        }
    }
    let merged = merged.ok_or(Error::NothingToMerge)?;
    finish(&merged, &args.out, &args.html)
}

/// A result file: plain JSON (`--out`) or gzip-compressed, as the operator stores results.
/// What reading it may hold is bounded (`wsload_report::stored`); `merge` holds one file's
/// bytes and result at a time besides the sum.
fn read_result(p: &std::path::Path) -> Result<RunResult> {
    let bytes = wsload_report::stored::read_file(&p.to_string_lossy())?;
    wsload_report::stored::decode(&bytes).map_err(|e| Error::invalid(p.display().to_string(), e))
}

/// `wsload report`: a stored result shown again, as tables and optionally as HTML.
fn report(args: ReportArgs) -> Result<ExitCode> {
    let result = read_result(&args.result)?;
    finish(&result, &None, &args.html)
}

/// `wsload compare`: a result judged against a baseline's.
fn compare(args: CompareArgs) -> Result<ExitCode> {
    use wsload_report::compare::{self, Change, Settings};
    let (base, new) = (read_result(&args.base)?, read_result(&args.new)?);
    let settings = Settings {
        min_effect: args.min_effect,
        confidence: args.confidence,
    };
    let named = |p: &std::path::Path, r: &RunResult| {
        format!(
            "{} (test {}, {} cell(s))",
            p.display(),
            r.test,
            r.cells.len()
        )
    };
    let c = compare::compare(&base, &new, &settings).map_err(|e| {
        Error::invalid(
            format!("{} against {}", args.new.display(), args.base.display()),
            e,
        )
    })?;
    println!(
        "base: {}
new:  {}
",
        named(&args.base, &base),
        named(&args.new, &new)
    );
    print!("{}", compare::text::render(&c));
    if let Some(path) = &args.json {
        let json = serde_json::to_vec_pretty(&c)
            .map_err(|e| Error::io(format!("cannot encode {}", path.display()), e))?;
        std::fs::write(path, json)
            .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
    }
    Ok(match c.verdict {
        Change::Regressed => ExitCode::from(1),
        Change::Same | Change::Improved => ExitCode::SUCCESS,
    })
}

/// `wsload validate`: the file parsed and checked, and the cells it would run.
fn validate(args: ValidateArgs) -> Result<ExitCode> {
    let file = args.file;
    let lt = LoadTest::from_file(&file)?;
    let cells = wsload_control::sequence::planned(&lt.spec);
    println!(
        "{file}: valid LoadTest {:?}, scenario {}, {} cell(s): {}",
        lt.name(),
        lt.spec.scenario.as_str(),
        cells.len(),
        cells
            .iter()
            .map(|c| c.label.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    // Valid anywhere, but `wsload run` here would refuse it: say so now (a cluster runs it).
    if lt.spec.shards > 1
        && let Err(e) =
            wsload::fleet::machine_runs(lt.spec.shards, None, wsload::conduct::capacity::raise())
    {
        eprintln!("note: for `wsload run` on this machine: {e}");
    }
    Ok(ExitCode::SUCCESS)
}

fn autobahn_client(args: AutobahnClientArgs) -> Result<ExitCode> {
    let run = wsload::connect::autobahn::run(&args.url, &args.agent, &args.cases)?;
    tracing::info!("{run} cases run");
    Ok(ExitCode::SUCCESS)
}

fn sysctl(args: SysctlArgs) -> Result<ExitCode> {
    wsload::machine::sysctl::set_all(&args.settings)?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    // mimalloc asks for transparent huge pages; a storm then spends ~40% of its CPU in the
    // kernel zeroing 2 MB pages for ~8 KB per connection of live data.
    let _ = nix::sys::prctl::set_thp_disable(true);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(wsload::observe::terminal::Stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match main_result(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("wsload: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// The variables a subcommand's flags read.
    fn read_by(command: &clap::Command) -> Vec<String> {
        command
            .get_arguments()
            .filter_map(|a| Some(a.get_env()?.to_str()?.to_string()))
            .collect()
    }

    /// Every variable the load generator reads is the contract's, and every one the operator
    /// sets on a shard pod is read by `wsload shard`.
    #[test]
    fn the_variables_read_are_the_contracts() {
        let cli = Cli::command();
        for command in cli.get_subcommands() {
            for v in read_by(command) {
                assert!(
                    var::ALL.contains(&v.as_str()),
                    "{v} is not in wsload_contract::env"
                );
            }
        }
        let shard = read_by(cli.find_subcommand("shard").expect("the shard command"));
        for v in var::SHARD_POD {
            // The LoadTest's YAML is read without a flag, where no file is named.
            let read = shard.iter().any(|r| r == v) || *v == LOADTEST_ENV;
            assert!(read, "the operator sets {v}, which a shard does not read");
        }
    }
}
