//! Shared by the integration tests: the real `wsload-server` binary on loopback, started per
//! test with explicit flags and killed when its guard drops (also on panic), LoadTest specs
//! from YAML, and scrapes of the server's own counters.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use wsload::conduct::run;
use wsload::model::options::Options;
use wsload::report::{CellResult, RunResult};
use wsload_contract::announce;
use wsload_contract::env as var;
use wsload_spec::LoadTest;

/// The `wsload-server` binary of this build. Integration tests of `wsload` get no
/// `CARGO_BIN_EXE_wsload-server` (another package), so it is built once per test binary
/// with the cargo running the tests, in the same profile, and found beside `wsload`
/// (`WSLOAD_SERVER_BIN` overrides both).
pub fn server_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os(var::SERVER_BIN) {
            return PathBuf::from(p);
        }
        let wsload = Path::new(env!("CARGO_BIN_EXE_wsload"));
        let profile_dir = wsload
            .parent()
            .expect("the wsload binary is in a directory");
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "dev".to_string(),
            Some(other) => other.to_string(),
        };
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("loadgen-image is inside the workspace");
        let status = Command::new(env!("CARGO"))
            .current_dir(workspace)
            .args(["build", "--quiet", "-p", "wsload-server", "--profile"])
            .arg(&profile)
            .status()
            .expect("cargo runs");
        assert!(status.success(), "cargo build -p wsload-server failed");
        let bin = profile_dir.join("wsload-server");
        assert!(bin.exists(), "{} was not built", bin.display());
        bin
    })
}

/// A `wsload-server` process on ephemeral loopback ports; killed on drop.
pub struct Server {
    child: Child,
    /// `ws://127.0.0.1:PORT` (no path).
    pub ws: String,
    pub metrics: String,
}

impl Server {
    /// Starts the server with `args` after the listeners (`--profile sink`,
    /// `--max-connections 300`...), and waits until it prints its addresses.
    pub fn start(args: &[&str]) -> Server {
        let mut child = Command::new(server_bin())
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("wsload-server starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let announced = announce::await_server(stdout, Duration::from_secs(15), |_| {})
            .expect("wsload-server prints its listeners");
        let server = Server {
            child,
            ws: announced.ws[0].clone(),
            metrics: announced.metrics,
        };
        assert!(server.ws.starts_with("ws://127.0.0.1:"), "{}", server.ws);
        server
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal by name (`CONT`, `KILL`) to the server process (not yet reaped, so the
    /// pid is still this child's).
    pub fn signal(&self, sig: &str) {
        signal(self.pid(), sig);
    }

    /// Stops the server (SIGSTOP); returns once every thread of it is stopped.
    pub fn stop(&self) -> Instant {
        stop(self.pid())
    }

    /// Kills the server now and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The sum of the series of `name` carrying every label of `labels`.
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let counter = wsload::conduct::server_metrics::Counter {
            url: self.metrics.clone(),
            name: name.to_string(),
            labels: want,
        };
        counter.read().expect("the server's /metrics answers")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A stopped process still dies of SIGKILL; nothing of the server needs a clean exit.
        self.kill();
    }
}

/// Sends signal `sig` (by name: `STOP`, `CONT`, `KILL`) to process `pid`, a child of the test.
pub fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{sig} {pid}");
}

/// Stops process `pid` (SIGSTOP) and returns the instant by which every one of its threads
/// was seen stopped. A stop takes effect when each thread next runs, which on a loaded
/// machine is tens of milliseconds after `kill` returns: a stall timed from `kill` would be
/// longer than the one the process went through. (Without `/proc`, the instant `kill`
/// returned.)
pub fn stop(pid: u32) -> Instant {
    signal(pid, "STOP");
    let tasks = PathBuf::from(format!("/proc/{pid}/task"));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let Ok(dir) = std::fs::read_dir(&tasks) else {
            return Instant::now();
        };
        let stopped = dir.filter_map(Result::ok).all(|t| {
            state(&t.path().join("stat")).is_some_and(|state| state == 'T' || state == 't')
        });
        if stopped {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "process {pid} did not stop");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The state letter (`R`, `S`, `T`, `Z`...) in a `/proc` `stat` file of a process or task;
/// `None` once it is gone.
pub fn state(stat: &Path) -> Option<char> {
    let stat = std::fs::read_to_string(stat).ok()?;
    // `pid (comm) STATE ...`: the state follows the last parenthesis (comm may hold one).
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
}

/// A command running `program`, behind the shell commands `shell` when given (e.g. a
/// `ulimit` the program must inherit).
pub fn behind(shell: Option<&str>, program: &str) -> std::process::Command {
    match shell {
        Some(prefix) => {
            let mut c = std::process::Command::new("sh");
            c.arg("-c")
                .arg(format!("{prefix} && exec \"$0\" \"$@\""))
                .arg(program);
            c
        }
        None => std::process::Command::new(program),
    }
}

/// A LoadTest from the body of its `spec` (YAML indented by two spaces).
pub fn spec(name: &str, body: &str) -> LoadTest {
    let doc = format!(
        "apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata:\n  name: {name}\nspec:\n{body}"
    );
    match LoadTest::from_yaml(&doc, name) {
        Ok(lt) => lt,
        Err(e) => panic!("{e}\n{doc}"),
    }
}

/// A hand-made server on a loopback port of its own one-thread runtime, each connection it
/// accepts served by `connection` in a task of its own: its `ws://` URL, and the runtime
/// (dropping it stops the server).
pub fn loopback_server<F, Fut>(connection: F) -> (String, tokio::runtime::Runtime)
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    raw_server(move |s, _| connection(s))
}

/// Reads the client's frames until its close frame or the end of the stream, in a task: the
/// server side's way to know the connection ended while it writes on the other half.
pub fn until_client_closes(mut rd: tokio::net::tcp::OwnedReadHalf) -> tokio::task::JoinHandle<()> {
    use tokio::io::AsyncReadExt;
    tokio::spawn(async move {
        let (mut buf, mut b) = (Vec::new(), vec![0u8; 4096]);
        while let Ok(n) = rd.read(&mut b).await {
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&b[..n]);
            let frames = wsload_ws::test_server::client_frames(&mut buf);
            if frames.iter().any(|(op, _)| *op == 0x8) {
                break;
            }
        }
    })
}

/// No test here runs longer than this; a hung run fails instead of hanging the suite.
pub const WATCHDOG: Duration = Duration::from_secs(90);

/// Runs `lt` in this process on two worker threads and prints the report (shown on failure).
pub fn run(lt: &LoadTest) -> RunResult {
    let opts = Options {
        threads: Some(2),
        server_bin: Some(server_bin().to_path_buf()),
        ..Default::default()
    };
    let (tx, rx) = mpsc::channel();
    let lt = lt.clone();
    std::thread::spawn(move || {
        let _ = tx.send(run::run(&lt, &opts));
    });
    let result = rx
        .recv_timeout(WATCHDOG)
        .expect("the run finishes within the watchdog")
        .expect("the run completes");
    eprintln!("{}", result.render());
    for c in &result.cells {
        eprintln!("{}: {:?}", c.label, c.measure.counts);
    }
    result
}

/// Polls `read` until it returns `want` (the server's counters move a moment after the
/// client sees the end of a connection), at most 5 s; returns the last value.
pub fn settle(want: u64, read: impl Fn() -> u64) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let v = read();
        if v == want || std::time::Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The only cell of a one-tier result.
pub fn only(r: &RunResult) -> &CellResult {
    assert_eq!(r.cells.len(), 1, "one cell expected");
    &r.cells[0]
}

/// A hand-made server on a loopback port of its own runtime: `serve(stream, n)` runs for each
/// connection accepted (`n` counting from 0). Its `ws://` URL and the runtime: dropping it
/// stops the server.
pub fn raw_server<F, Fut>(serve: F) -> (String, tokio::runtime::Runtime)
where
    F: Fn(tokio::net::TcpStream, u64) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let l = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let url = format!("ws://{}/", l.local_addr().expect("addr"));
    rt.spawn(async move {
        let mut n = 0;
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(serve(s, n));
            n += 1;
        }
    });
    (url, rt)
}

/// Reads once from a hand-made server's connection into `buf` and takes the client's complete
/// frames off it (opcode, unmasked payload); `None` once the client has gone. Cancel-safe: a
/// `select!` arm loses nothing.
pub async fn read_frames(
    s: &mut (impl tokio::io::AsyncRead + Unpin),
    buf: &mut Vec<u8>,
) -> Option<Vec<(u8, Vec<u8>)>> {
    use tokio::io::AsyncReadExt;
    let mut b = [0u8; 16 * 1024];
    match s.read(&mut b).await {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            buf.extend_from_slice(&b[..n]);
            Some(wsload_ws::test_server::client_frames(buf))
        }
    }
}

/// A hand-made server's text frame.
pub fn text_frame(s: &str) -> Vec<u8> {
    wsload_ws::test_server::server_frame(0x1, s.as_bytes())
}

/// A hand-made server's close frame with `code` and `reason`.
pub fn close_frame(code: u16, reason: &str) -> Vec<u8> {
    let mut p = code.to_be_bytes().to_vec();
    p.extend_from_slice(reason.as_bytes());
    wsload_ws::test_server::server_frame(0x8, &p)
}
