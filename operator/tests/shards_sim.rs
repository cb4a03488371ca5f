//! How the operator fares with N shards: a real kube-apiserver, the operator in this process,
//! and a fake fleet of N shard pods served here too (tests/support/fake_shards.rs), running a
//! 5-tier pingLatency LoadTest to its end. One line per N on stdout:
//!
//! ```text
//! shards=N phase=P release_ms=R skew_ms=S collect_s=C results_bytes=B reconciles=K status_bytes=T sim_mib=M apiserver_mib=A etcd_mib=E
//! ```
//!
//! - `release_ms`: from the release decision (`status.startAtMillis` minus the spec's
//!   `run.startDelay`) to the last shard's first start request arriving, by the fleet's clock;
//! - `skew_ms`: the largest of `status.startSkewMillis` and every `status.cells[].startSkewMillis`;
//! - `collect_s`: from first seeing phase Collecting to seeing the test finished;
//! - `results_bytes`: every ConfigMap labelled `wsload.dev/loadtest=<test>`, data and
//!   binaryData, summed;
//! - `reconciles`: `wsload_operator_reconciles_total` from the operator's `/metrics` at the end;
//! - `status_bytes`: the finished LoadTest as the API server returns it, JSON;
//! - `sim_mib`, `apiserver_mib`, `etcd_mib`: the peak resident memory (`VmHWM`) during this N of
//!   this process (the operator and the fleet), the kube-apiserver and etcd, each peak reset
//!   before the N (`/proc/PID/clear_refs`), so that each N has its own.
//!
//! Details go to stderr. Exits non-zero unless every N ends Succeeded with every shard
//! Collected. A test without the libtest harness (`harness = false`): its arguments are the
//! shard counts, `cargo test -p wsload-operator --test shards_sim -- 10 100 1000`; none runs
//! N=10, the quick smoke `cargo test` runs. bench/operator/shards.sh runs it in release.

mod support;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use support::fake_shards::{FakeFleet, FleetOpts};
use wsload_operator::reconcile::Config;
use wsload_spec::LoadTestResource;
use wsload_spec::status::{LoadTestStatus, Phase, ShardState};

fn main() -> ExitCode {
    let mut counts = Vec::new();
    let mut filters = Vec::new();
    for arg in std::env::args().skip(1) {
        if arg == "--list" {
            println!("shards_sim: test");
            return ExitCode::SUCCESS;
        }
        // libtest's flags (--nocapture, --test-threads=2, ...) mean nothing here.
        if arg.starts_with('-') {
            continue;
        }
        match arg.parse::<u32>() {
            Ok(n) if n > 0 => counts.push(n),
            _ => filters.push(arg),
        }
    }
    // A name filter meant for other tests (`cargo test -- lifecycle`) skips this one.
    if counts.is_empty()
        && !filters.is_empty()
        && !filters.iter().any(|f| "shards_sim".contains(f.as_str()))
    {
        eprintln!("shards_sim: skipped (filter {filters:?})");
        return ExitCode::SUCCESS;
    }
    if counts.is_empty() {
        counts.push(10);
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut ok = true;
    for n in counts {
        let outcome = runtime.block_on(simulate(n));
        println!("{}", outcome.line);
        if let Some(problem) = outcome.problem {
            eprintln!("shards_sim: shards={n}: FAILED: {problem}");
            support::cluster::keep_scratch_dir();
            ok = false;
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "shards_sim: logs kept in {}",
            support::cluster::scratch_dir().display()
        );
        ExitCode::FAILURE
    }
}

struct Outcome {
    line: String,
    problem: Option<String>,
}

const TEST: &str = "sim";

/// Five tiers of 100 to 2000 connections per shard (what a real 5-tier pingLatency shard's
/// result of about 40 KB of JSON came from).
fn spec(n: u32) -> String {
    let tiers: Vec<String> = [100, 250, 500, 1000, 2000]
        .iter()
        .map(|per| (per * n).to_string())
        .collect();
    format!(
        "  target: {{url: \"ws://127.0.0.1:9/\"}}
  scenario: pingLatency
  connections: [{}]
  ping: {{count: 20, timeout: 5s, kind: app}}
  shards: {n}
  loadgen: {{spread: none}}
  thresholds: [\"loss < 0.1%\", \"rtt.p99 < 500ms\"]
",
        tiers.join(", ")
    )
}

fn free_port() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("addr")
}

/// The processes whose memory a run reports: this one, and the control plane's two, by the pid
/// files `scripts/k8s/control-plane.sh` keeps in its directory.
fn measured_pids(cluster: &support::Cluster) -> [(&'static str, Option<String>); 3] {
    let pid_of = |name: &str| {
        std::fs::read_to_string(cluster.dir.join(format!("{name}.pid")))
            .ok()
            .map(|p| p.trim().to_string())
    };
    [
        ("sim", Some("self".to_string())),
        ("apiserver", pid_of("kube-apiserver")),
        ("etcd", pid_of("etcd")),
    ]
}

/// Starts a new peak: `VmHWM` becomes the current resident size (proc(5), `clear_refs` 5).
fn reset_peak(pid: &str) {
    if let Err(e) = std::fs::write(format!("/proc/{pid}/clear_refs"), "5") {
        eprintln!("reset the peak memory of {pid}: {e}");
    }
}

/// `VmHWM` of `pid`, MiB.
fn peak_mib(pid: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

async fn simulate(n: u32) -> Outcome {
    let cluster = support::shared().await;
    cluster.apply_crds().await;
    let measured = measured_pids(cluster);
    for pid in measured.iter().filter_map(|(_, pid)| pid.as_deref()) {
        reset_peak(pid);
    }
    let ns = cluster.namespace(&format!("sim-{n}")).await;
    let client = cluster.client().await;
    let fleet = FakeFleet::start(client.clone(), &ns, FleetOpts::default()).await;
    let metrics = free_port();
    let config = Config {
        poll: Duration::from_secs(1),
        ..Config::default()
    };
    let operator = support::run_operator(client.clone(), &ns, None, metrics, config);

    let spec = spec(n);
    let lt = wsload_spec::LoadTest::from_spec_yaml(&spec, TEST)
        .unwrap_or_else(|e| panic!("the simulation's spec is invalid: {e}"));
    let start_delay = lt.spec.run.start_delay.get();
    let resource = support::loadtests::loadtest(TEST, &spec);
    let lts: Api<LoadTestResource> = Api::namespaced(client.clone(), &ns);
    lts.create(&PostParams::default(), &resource)
        .await
        .expect("create LoadTest");
    let created = Instant::now();
    eprintln!("shards={n}: LoadTest {ns}/{TEST} created");

    // Minutes: 1000 shard pods are created one after another, each made ready by the fleet.
    let timeout = Duration::from_secs(180 + u64::from(n) * 6 / 10);
    let mut seen: BTreeMap<&'static str, Instant> = BTreeMap::new();
    let mut last = LoadTestStatus::default();
    let mut status_bytes = None;
    let mut timed_out = false;
    loop {
        match lts.get_opt(TEST).await {
            Ok(Some(lt)) => {
                status_bytes = serde_json::to_vec(&lt).ok().map(|j| j.len());
                last = lt.status.unwrap_or_default();
            }
            Ok(None) => {}
            Err(e) => eprintln!("shards={n}: get LoadTest: {e}"),
        }
        if let Some(p) = last.phase
            && !seen.contains_key(p.as_str())
        {
            seen.insert(p.as_str(), Instant::now());
            eprintln!(
                "shards={n}: {:>7.2} s {} {}",
                created.elapsed().as_secs_f64(),
                p.as_str(),
                last.message.as_deref().unwrap_or("")
            );
        }
        if last.phase.is_some_and(Phase::is_finished) {
            break;
        }
        if created.elapsed() > timeout {
            timed_out = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let phase = last.phase.map_or("None", Phase::as_str);
    let records = fleet.test_records(TEST);
    let release_ms = last.start_at_millis.and_then(|start_at| {
        let decision = start_at as f64 - start_delay.as_secs_f64() * 1000.0;
        let latest = records
            .iter()
            .filter_map(|r| r.first_start())
            .map(|a| a.unix_micros)
            .max()?;
        Some(latest as f64 / 1000.0 - decision)
    });
    let skew_ms = last
        .cells
        .iter()
        .filter_map(|c| c.start_skew_millis)
        .chain(last.start_skew_millis)
        .reduce(f64::max);
    let collect_s = seen
        .get(Phase::Collecting.as_str())
        .zip(seen.get(phase))
        .filter(|_| last.phase.is_some_and(Phase::is_finished))
        .map(|(from, to)| (*to - *from).as_secs_f64());
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let results_bytes: usize = match config_maps
        .list(&ListParams::default().labels(&format!("wsload.dev/loadtest={TEST}")))
        .await
    {
        Ok(list) => list
            .items
            .iter()
            .map(|cm| {
                let data: usize = cm.data.iter().flatten().map(|(_, v)| v.len()).sum();
                let binary: usize = cm
                    .binary_data
                    .iter()
                    .flatten()
                    .map(|(_, v)| v.0.len())
                    .sum();
                data + binary
            })
            .sum(),
        Err(e) => {
            eprintln!("shards={n}: list ConfigMaps: {e}");
            0
        }
    };
    let reconciles = scrape_reconciles(metrics).await;
    operator.abort();
    fleet.stop();
    let peaks: Vec<String> = measured
        .iter()
        .map(|(name, pid)| {
            let mib = pid.as_deref().and_then(peak_mib);
            format!(
                "{name}_mib={}",
                mib.map_or("-".into(), |m| format!("{m:.0}"))
            )
        })
        .collect();

    // Detail for a reader of stderr.
    let ready = records.iter().filter(|r| r.ready_at.is_some()).count();
    let served: u64 = records.iter().map(|r| r.bytes_served).sum();
    let all_ready = records.iter().filter_map(|r| r.ready_at).max();
    eprintln!(
        "shards={n}: {} pods served, {ready} made ready ({} after creation), {} results served ({served} bytes of JSON), total {:.1} s",
        records.len(),
        all_ready.map_or("-".into(), |t| format!(
            "all {:.1} s",
            (t - created).as_secs_f64()
        )),
        records.iter().filter(|r| r.results_served > 0).count(),
        created.elapsed().as_secs_f64()
    );
    // Per cell: did every order arrive before its instant (the operator's part of the skew),
    // and how far apart did the shards begin (the status' view).
    for (k, cell) in last.cells.iter().enumerate() {
        let k = k as u32;
        let orders: Vec<_> = records
            .iter()
            .filter_map(|r| {
                let list = if k == 0 { &r.starts } else { &r.cells };
                list.iter().find(|a| a.cell.unwrap_or(0) == k)
            })
            .collect();
        let latest = orders
            .iter()
            .map(|a| a.unix_micros as f64 / 1000.0 - a.start_at as f64)
            .reduce(f64::max);
        let late = orders
            .iter()
            .filter(|a| a.unix_micros > a.start_at * 1000)
            .count();
        eprintln!(
            "shards={n}: cell {k} ({}): {} orders, the last {} its startAt, {late} late; startSkewMillis {}",
            cell.label,
            orders.len(),
            latest.map_or("-".into(), |l| if l > 0.0 {
                format!("{l:.1} ms after")
            } else {
                format!("{:.1} ms before", -l)
            }),
            cell.start_skew_millis
                .map_or("-".into(), |s| format!("{s:.1}"))
        );
    }
    if let Some(reason) = &last.reason {
        eprintln!(
            "shards={n}: reason {reason}: {}",
            last.message.as_deref().unwrap_or("")
        );
    }

    let fmt =
        |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let line = format!(
        "shards={n} phase={phase} release_ms={} skew_ms={} collect_s={} results_bytes={results_bytes} reconciles={} status_bytes={} {}",
        fmt(release_ms, 1),
        fmt(skew_ms, 1),
        fmt(collect_s, 1),
        reconciles.map_or("-".to_string(), |r| r.to_string()),
        status_bytes.map_or("-".to_string(), |b| b.to_string()),
        peaks.join(" "),
    );
    let not_collected: Vec<String> = last
        .shards
        .iter()
        .filter(|s| s.state != ShardState::Collected)
        .map(|s| {
            format!(
                "{}:{:?}{}",
                s.index,
                s.state,
                s.reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            )
        })
        .collect();
    let problem = if timed_out {
        Some(format!(
            "not finished within {timeout:?} (phase {phase}: {})",
            last.message.as_deref().unwrap_or("")
        ))
    } else if last.phase != Some(Phase::Succeeded) {
        Some(format!(
            "ended {phase} ({}): {}",
            last.reason.as_deref().unwrap_or(""),
            last.message.as_deref().unwrap_or("")
        ))
    } else if last.shards.len() != n as usize || !not_collected.is_empty() {
        Some(format!(
            "{} shard entries; not collected: {}",
            last.shards.len(),
            not_collected.join(", ")
        ))
    } else {
        None
    };
    Outcome { line, problem }
}

/// `wsload_operator_reconciles_total` summed over its samples (labels or none).
async fn scrape_reconciles(addr: std::net::SocketAddr) -> Option<u64> {
    let url = format!("http://{addr}/metrics");
    let answer = wsload_http::http_client::get(&url, Duration::from_secs(5))
        .await
        .map_err(|e| eprintln!("scrape {url}: {e}"))
        .ok()?;
    let mut total = 0.0;
    let mut found = false;
    for line in answer.body.lines() {
        let Some(rest) = line.strip_prefix("wsload_operator_reconciles_total") else {
            continue;
        };
        if !(rest.starts_with(' ') || rest.starts_with('{')) {
            continue;
        }
        if let Some(v) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
            total += v;
            found = true;
        }
    }
    found.then_some(total as u64)
}
