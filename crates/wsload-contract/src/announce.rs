//! The lines a process prints for another to read: where it listens. Each is written by one
//! function here and read by its pair, so a reworded line cannot leave a reader behind.
//! Scripts read the same lines (`scripts/lib/common.sh` `managed_metrics_urls`,
//! `scripts/lib/common.py` `managed_metrics_addr`); a test of the load generator checks them
//! against a real run's line.

/// `wsload-server`'s first stdout line: `wsload-server listening on ws://ADDR (profile P)`.
const SERVER_LISTENING: &str = "wsload-server listening on ";
/// `wsload-server`'s second stdout line: `wsload-server metrics on http://ADDR/metrics`.
const SERVER_METRICS: &str = "wsload-server metrics on ";
/// `wsload run`/`wsload shard`'s stderr line once `--metrics-listen` is bound.
const LOADGEN_METRICS: &str = "wsload metrics on ";
/// `wsload run`'s stderr line once its managed servers are up.
const MANAGED: &str = "managed wsload-server";
const MANAGED_METRICS: &str = ", metrics on ";
/// `wsload shard`'s stderr line at start-up: the kernel limits it runs under.
const LOADGEN_KERNEL: &str = "wsload kernel: ";
/// The open-file limit's field of a [`KernelLine`].
const NOFILE: &str = "nofile=";

/// What the reference server says of itself on stdout, a line each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerLine {
    /// Its WebSocket URL (`ws://ADDR`, no path).
    Listening(String),
    /// Its metrics URL (`http://ADDR/metrics`).
    Metrics(String),
}

impl ServerLine {
    /// The line as the server prints it; `profile` only with [`ServerLine::Listening`].
    pub fn print(&self, profile: &str) -> String {
        match self {
            ServerLine::Listening(url) => format!("{SERVER_LISTENING}{url} (profile {profile})"),
            ServerLine::Metrics(url) => format!("{SERVER_METRICS}{url}"),
        }
    }

    /// What a line of the server's stdout says, if it is one of these.
    pub fn parse(line: &str) -> Option<ServerLine> {
        if let Some(rest) = line.strip_prefix(SERVER_LISTENING) {
            return rest
                .split_whitespace()
                .next()
                .map(|u| ServerLine::Listening(u.to_string()));
        }
        line.strip_prefix(SERVER_METRICS)
            .map(|rest| ServerLine::Metrics(rest.trim().to_string()))
    }
}

/// Where a started `wsload-server` listens, as it said on stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announced {
    /// Every WebSocket listener (`ws://ADDR`), in the order printed.
    pub ws: Vec<String>,
    /// `http://ADDR/metrics`.
    pub metrics: String,
}

/// Why a server's addresses were not read.
#[derive(Debug, thiserror::Error)]
pub enum NotAnnounced {
    #[error("it said nothing of its listeners within {0:?}")]
    Silent(std::time::Duration),
    #[error("its output ended before it said where it listens")]
    Ended,
    #[error("its metrics address came before any listener")]
    NoListener,
}

/// Reads a starting `wsload-server`'s stdout until it has said where it listens (its
/// listeners, then its metrics address), waiting at most `within`. A thread goes on reading
/// what the server prints after, so that its pipe never fills and blocks it; `forward` sees
/// every line (a test's log, the run's stderr), the announcing ones included.
pub fn await_server(
    stdout: impl std::io::Read + Send + 'static,
    within: std::time::Duration,
    forward: impl Fn(&str) + Send + 'static,
) -> Result<Announced, NotAnnounced> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            forward(&line);
            // The reader gone (addresses read): keep draining.
            let _ = tx.send(line);
        }
    });
    let deadline = std::time::Instant::now() + within;
    let mut ws = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = rx.recv_timeout(left).map_err(|e| match e {
            std::sync::mpsc::RecvTimeoutError::Timeout => NotAnnounced::Silent(within),
            std::sync::mpsc::RecvTimeoutError::Disconnected => NotAnnounced::Ended,
        })?;
        match ServerLine::parse(&line) {
            Some(ServerLine::Listening(url)) => ws.push(url),
            Some(ServerLine::Metrics(metrics)) if !ws.is_empty() => {
                return Ok(Announced { ws, metrics });
            }
            Some(ServerLine::Metrics(_)) => return Err(NotAnnounced::NoListener),
            None => {}
        }
    }
}

/// The load generator's line for its bound metrics endpoint (`http://ADDR/metrics`).
pub fn loadgen_metrics(url: &str) -> String {
    format!("{LOADGEN_METRICS}{url}")
}

/// The URL of a [`loadgen_metrics`] line.
pub fn parse_loadgen_metrics(line: &str) -> Option<&str> {
    line.strip_prefix(LOADGEN_METRICS).map(str::trim)
}

/// `wsload run`'s line for its managed servers: `note` says how many (empty for one), then
/// their WebSocket URL and every replica's metrics URL.
pub fn managed_servers(note: &str, ws_url: &str, metrics_urls: &[String]) -> String {
    format!(
        "{MANAGED}{note} on {ws_url}{MANAGED_METRICS}{}",
        metrics_urls.join(" ")
    )
}

/// The metrics URLs of a [`managed_servers`] line.
pub fn parse_managed_servers(line: &str) -> Option<Vec<String>> {
    let rest = line.strip_prefix(MANAGED)?;
    let (_, urls) = rest.split_once(MANAGED_METRICS)?;
    Some(urls.split_whitespace().map(str::to_string).collect())
}

/// What a shard runs under, as it read it at start-up: the open-file limit (each connection is
/// a descriptor) and the sysctls that bound it, as in force in its pod. One line on stderr,
/// `wsload kernel: nofile=SOFT/HARD KEY="VALUE" KEY=?`, in `kubectl logs` of every shard pod:
/// the one way to see `spec.loadgen.sysctls` took effect in an image without a shell, and
/// what the e2e placement test reads back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelLine {
    /// The soft and hard open-file limits (after raising the soft one to the hard one).
    pub open_files: (u64, u64),
    /// Each sysctl (`net.core.somaxconn`) with its value in force, its words separated by
    /// one space (`/proc/sys` separates some with tabs); `None` when it could not be read.
    pub sysctls: Vec<(String, Option<String>)>,
}

impl KernelLine {
    /// The line as the shard prints it. A value is quoted, `"` and `\` in it escaped; an
    /// unreadable one is `?`.
    pub fn print(&self) -> String {
        let (soft, hard) = self.open_files;
        let mut line = format!("{LOADGEN_KERNEL}{NOFILE}{soft}/{hard}");
        for (key, value) in &self.sysctls {
            match value {
                Some(v) => {
                    let escaped = v.replace('\\', "\\\\").replace('"', "\\\"");
                    line.push_str(&format!(" {key}=\"{escaped}\""));
                }
                None => line.push_str(&format!(" {key}=?")),
            }
        }
        line
    }

    /// What a [`KernelLine::print`] line says; `None` for any other line.
    pub fn parse(line: &str) -> Option<KernelLine> {
        let rest = line.strip_prefix(LOADGEN_KERNEL)?.strip_prefix(NOFILE)?;
        let (limits, mut rest) = rest.split_once(' ').unwrap_or((rest, ""));
        let (soft, hard) = limits.split_once('/')?;
        let open_files = (soft.parse().ok()?, hard.parse().ok()?);
        let mut sysctls = Vec::new();
        while !rest.is_empty() {
            let (key, after) = rest.split_once('=')?;
            if let Some(after) = after.strip_prefix('?') {
                sysctls.push((key.to_string(), None));
                rest = after.strip_prefix(' ').unwrap_or(after);
                continue;
            }
            let mut chars = after.strip_prefix('"')?.char_indices();
            let mut value = String::new();
            let end = loop {
                match chars.next()? {
                    (_, '\\') => value.push(chars.next()?.1),
                    (i, '"') => break i,
                    (_, c) => value.push(c),
                }
            };
            sysctls.push((key.to_string(), Some(value)));
            // Past the closing quote (index `end` of what follows the opening one).
            let after = &after[end + 2..];
            rest = after.strip_prefix(' ').unwrap_or(after);
        }
        Some(KernelLine {
            open_files,
            sysctls,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_reads_back_as_written() {
        for line in [
            ServerLine::Listening("ws://127.0.0.1:9000".into()),
            ServerLine::Metrics("http://127.0.0.1:9090/metrics".into()),
        ] {
            assert_eq!(ServerLine::parse(&line.print("echo")), Some(line));
        }
        assert_eq!(ServerLine::parse("something else"), None);
        let url = "http://127.0.0.1:9464/metrics";
        assert_eq!(parse_loadgen_metrics(&loadgen_metrics(url)), Some(url));
        let urls = vec![
            "http://127.0.0.1:1/metrics".to_string(),
            "http://127.0.0.1:2/metrics".to_string(),
        ];
        for note in ["", " x2 (SO_REUSEPORT)"] {
            let line = managed_servers(note, "ws://127.0.0.1:3/", &urls);
            assert_eq!(parse_managed_servers(&line), Some(urls.clone()));
        }
        assert_eq!(parse_managed_servers("wsload metrics on x"), None);
    }

    #[test]
    fn the_kernel_line_reads_back_as_written() {
        let line = KernelLine {
            open_files: (1_048_576, 1_048_576),
            sysctls: vec![
                (
                    "net.ipv4.ip_local_port_range".into(),
                    Some("20000 40000".into()),
                ),
                ("net.core.somaxconn".into(), None),
                ("kernel.odd".into(), Some(r#"a "quoted" \ value"#.into())),
                ("net.ipv4.tcp_fin_timeout".into(), Some(String::new())),
            ],
        };
        let printed = line.print();
        assert!(
            printed.starts_with(
                "wsload kernel: nofile=1048576/1048576 net.ipv4.ip_local_port_range=\"20000 40000\" net.core.somaxconn=? "
            ),
            "{printed}"
        );
        assert_eq!(KernelLine::parse(&printed), Some(line));
        let bare = KernelLine {
            open_files: (1024, 4096),
            sysctls: vec![],
        };
        assert_eq!(bare.print(), "wsload kernel: nofile=1024/4096");
        assert_eq!(KernelLine::parse(&bare.print()), Some(bare));
        for other in [
            "wsload metrics on http://x/metrics",
            "wsload kernel: nofile=x/1",
            "wsload kernel: nofile=1/1 key=\"unterminated",
        ] {
            assert_eq!(KernelLine::parse(other), None, "{other}");
        }
    }

    #[test]
    fn a_servers_addresses_are_read_from_what_it_prints() {
        let out = format!(
            "starting\n{}\n{}\n{}\nlater\n",
            ServerLine::Listening("ws://127.0.0.1:1".into()).print("echo"),
            ServerLine::Listening("ws://[::1]:1".into()).print("echo"),
            ServerLine::Metrics("http://127.0.0.1:2/metrics".into()).print("")
        );
        let seen = std::sync::Arc::new(std::sync::Mutex::new(0));
        let count = seen.clone();
        let got = await_server(
            std::io::Cursor::new(out),
            std::time::Duration::from_secs(5),
            move |_| *count.lock().expect("count") += 1,
        )
        .expect("announced");
        assert_eq!(got.ws, ["ws://127.0.0.1:1", "ws://[::1]:1"]);
        assert_eq!(got.metrics, "http://127.0.0.1:2/metrics");
        assert!(matches!(
            await_server(
                std::io::Cursor::new("nothing\n"),
                std::time::Duration::from_secs(5),
                |_| {}
            ),
            Err(NotAnnounced::Ended)
        ));
        let metrics_first = ServerLine::Metrics("http://x/metrics".into()).print("");
        assert!(matches!(
            await_server(
                std::io::Cursor::new(metrics_first),
                std::time::Duration::from_secs(5),
                |_| {}
            ),
            Err(NotAnnounced::NoListener)
        ));
    }
}
