//! The managed server of a LoadTest run on one machine: the `wsload-server` binary of the same
//! build, on ephemeral loopback ports, stopped (SIGTERM, then kill) when the run ends. With
//! `target.server.replicas: N`, N processes share one WebSocket port (SO_REUSEPORT: the kernel
//! spreads connections over them), each with its own metrics port: one process's open-file
//! limit no longer caps the test.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use wsload_contract::announce;
use wsload_contract::env as var;
use wsload_spec::{LoadTestSpec, ManagedServer};

/// Why the managed server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(
        "target: cannot start the managed server {bin} (build it with `cargo build --release -p wsload-server`, or pass --server-bin): {source}"
    )]
    Spawn {
        bin: String,
        #[source]
        source: std::io::Error,
    },
    #[error("target: managed server has no stdout")]
    NoStdout,
    #[error(
        "target: the managed server did not start (exit: {status}; its log is above): {source}"
    )]
    NotStarted {
        status: String,
        #[source]
        source: announce::NotAnnounced,
    },
    #[error("target: the managed server printed no port: {url}")]
    NoPort { url: String },
}

pub struct LocalServer {
    child: Child,
    pub ws_url: String,
    pub metrics_url: String,
}

/// `--server-bin`, else `WSLOAD_SERVER_BIN`, else `wsload-server` beside this binary, else PATH.
pub fn find_binary(explicit: Option<PathBuf>) -> PathBuf {
    if let Some(p) = explicit.or_else(|| std::env::var_os(var::SERVER_BIN).map(PathBuf::from)) {
        return p;
    }
    if let Some(sibling) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("wsload-server")))
        && sibling.exists()
    {
        return sibling;
    }
    PathBuf::from("wsload-server")
}

/// Every replica of a managed server.
pub struct LocalServers {
    /// Stopped on drop, together. `None`: killed by a disruption, not started again yet.
    replicas: Vec<Option<LocalServer>>,
    pub ws_url: String,
    pub metrics_urls: Vec<String>,
    /// How a replica is started again after a disruption killed it.
    again: Restart,
}

/// What starting a replica again takes: the first start's binary, spec and shared address.
struct Restart {
    bin: PathBuf,
    spec: LoadTestSpec,
    server: ManagedServer,
    listen: String,
}

impl LocalServers {
    pub fn start(
        bin: PathBuf,
        spec: &LoadTestSpec,
        server: &ManagedServer,
    ) -> Result<Self, ServerError> {
        let n = server.replicas.max(1);
        let shared = n > 1;
        let first = LocalServer::start(&bin, spec, server, "127.0.0.1:0", shared, "127.0.0.1:0")?;
        let ws_url = first.ws_url.clone();
        let port = port_of(&ws_url).ok_or_else(|| ServerError::NoPort {
            url: ws_url.clone(),
        })?;
        let mut replicas = vec![first];
        let listen = format!("127.0.0.1:{port}");
        for _ in 1..n {
            replicas.push(LocalServer::start(
                &bin,
                spec,
                server,
                &listen,
                true,
                "127.0.0.1:0",
            )?);
        }
        let metrics_urls: Vec<String> = replicas.iter().map(|r| r.metrics_url.clone()).collect();
        let replicas = replicas.into_iter().map(Some).collect();
        // Said so that Prometheus (or a person with curl) can watch the servers too.
        let note = if shared {
            format!(" x{n} (SO_REUSEPORT)")
        } else {
            String::new()
        };
        crate::observe::terminal::eprintln_above!(
            "{}",
            announce::managed_servers(&note, &ws_url, &metrics_urls)
        );
        Ok(LocalServers {
            replicas,
            ws_url,
            metrics_urls,
            again: Restart {
                bin,
                spec: spec.clone(),
                server: server.clone(),
                listen,
            },
        })
    }

    /// Kills `count` running replicas at once (SIGKILL: a crash, no drain, no close frames),
    /// the first ones started first. Their indices; the kernel's SO_REUSEPORT group sends
    /// new connections to the replicas left.
    pub fn kill(&mut self, count: u32) -> Vec<usize> {
        let chosen: Vec<usize> = self
            .replicas
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_some())
            .map(|(i, _)| i)
            .take(count as usize)
            .collect();
        // All signalled before any is waited for: killed one by one, the first one's
        // connections would come back to the next one in time to be dropped again.
        let mut dead: Vec<LocalServer> = chosen
            .iter()
            .filter_map(|&i| self.replicas[i].take())
            .collect();
        for r in &mut dead {
            let _ = r.child.kill();
        }
        for mut r in dead {
            let _ = r.child.wait();
            // Its drop would signal a pid that may be reused now.
            std::mem::forget(r);
        }
        chosen
    }

    /// Starts killed replica `i` again on the shared port.
    /// Must run on a thread that outlives it: `--exit-with-parent` ties a server to the thread
    /// that spawned it.
    pub fn restart(&mut self, i: usize) -> Result<(), ServerError> {
        if self.replicas.get(i).is_some_and(Option::is_none) {
            let Restart {
                bin,
                spec,
                server,
                listen,
            } = &self.again;
            let reuse = self.replicas.len() > 1;
            // Its metrics where they were, so that what reads the servers' counters finds it
            // (counting from zero again: a crash loses what the process counted).
            let metrics = self
                .metrics_urls
                .get(i)
                .and_then(|u| port_of(u))
                .map_or_else(|| "127.0.0.1:0".to_string(), |p| format!("127.0.0.1:{p}"));
            // That port was an ephemeral one: while the replica was down a dial may have
            // taken it as its source port. Then anywhere.
            let r = match LocalServer::start(bin, spec, server, listen, reuse, &metrics) {
                Ok(r) => r,
                Err(_) => LocalServer::start(bin, spec, server, listen, reuse, "127.0.0.1:0")?,
            };
            if let Some(url) = self.metrics_urls.get_mut(i) {
                url.clone_from(&r.metrics_url);
            }
            self.replicas[i] = Some(r);
        }
        Ok(())
    }

    /// Stops replica `i` as a deploy does (SIGTERM: the server closes its connections with
    /// 1001 and exits; killed if it has not within 5 s), to be started again.
    pub fn stop(&mut self, i: usize) {
        // Its drop is that stop.
        drop(self.replicas.get_mut(i).and_then(Option::take));
    }

    /// How many replicas the server runs, down ones included.
    pub fn count(&self) -> usize {
        self.replicas.len()
    }

    /// The replicas killed and not started again.
    pub fn down(&self) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|i| self.replicas[*i].is_none())
            .collect()
    }
}

/// The port of `ws://host:port/path`.
fn port_of(url: &str) -> Option<u16> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split('/').next()?;
    authority.rsplit_once(':')?.1.parse().ok()
}

impl LocalServer {
    fn start(
        bin: &PathBuf,
        spec: &LoadTestSpec,
        server: &ManagedServer,
        listen: &str,
        reuse_port: bool,
        metrics_listen: &str,
    ) -> Result<LocalServer, ServerError> {
        let mut cmd = Command::new(bin);
        cmd.args([
            "--listen",
            listen,
            "--metrics-listen",
            metrics_listen,
            "--profile",
            server.profile.as_str(),
        ]);
        if reuse_port {
            cmd.arg("--reuse-port");
        }
        // A run killed in any way (SIGKILL included, where no Drop runs) takes its server with
        // it. The kernel ties this to the spawning thread, which is the run's own.
        cmd.args(["--exit-with-parent", &std::process::id().to_string()]);
        if let Some(jwt) = spec.auth.as_ref().and_then(|a| a.jwt.as_ref()) {
            if let Some(secret) = jwt.secret.value.clone().or_else(|| {
                jwt.secret
                    .from_env
                    .as_ref()
                    .and_then(|v| std::env::var(v).ok())
            }) {
                cmd.env(var::SERVER_JWT_SECRET, secret);
            }
            if let Some(iss) = &jwt.issuer {
                cmd.args(["--jwt-issuer", iss]);
            }
            if let Some(aud) = &jwt.audience {
                cmd.args(["--jwt-audience", aud]);
            }
        } else if server.profile == wsload_spec::ServerProfile::Wse {
            cmd.arg("--wse-allow-anonymous");
        }
        // A fanout the server publishes: its ticker over the fanout's topics, unless the user's
        // args start one of their own.
        cmd.args(wsload_spec::ticker_args(spec));
        cmd.args(&server.args);
        for e in &server.env {
            cmd.env(&e.name, &e.value);
        }
        cmd.env(
            "RUST_LOG",
            std::env::var(var::SERVER_LOG).unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        let mut child = cmd.spawn().map_err(|source| ServerError::Spawn {
            bin: bin.display().to_string(),
            source,
        })?;
        let stdout = child.stdout.take().ok_or(ServerError::NoStdout)?;
        // The server's stdout says nothing after its addresses; the run's stderr is its log.
        let announced = match announce::await_server(stdout, Duration::from_secs(15), |_| {}) {
            Ok(a) => a,
            Err(why) => {
                let _ = child.kill();
                let status = child.wait().ok();
                return Err(ServerError::NotStarted {
                    status: format!("{status:?}"),
                    source: why,
                });
            }
        };
        let path = if server.path.starts_with('/') {
            server.path.clone()
        } else {
            format!("/{}", server.path)
        };
        Ok(LocalServer {
            child,
            ws_url: format!("{}{path}", announced.ws[0]),
            metrics_url: announced.metrics,
        })
    }
}

impl LocalServer {
    fn terminate(&self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}

impl Drop for LocalServers {
    fn drop(&mut self) {
        // SIGTERM to every replica first, so that their drains overlap.
        for r in self.replicas.iter().flatten() {
            r.terminate();
        }
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.terminate();
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
