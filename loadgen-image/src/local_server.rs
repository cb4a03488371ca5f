//! The managed server of a LoadTest run on one machine: the `wsload-server` binary of the same
//! build, on ephemeral loopback ports, stopped (SIGTERM, then kill) when the run ends.

use crate::{Error, Result};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use wsload_spec::{LoadTestSpec, ManagedServer};

pub struct LocalServer {
    child: Child,
    pub ws_url: String,
    pub metrics_url: String,
}

/// `--server-bin`, else `WSLOAD_SERVER_BIN`, else `wsload-server` beside this binary, else PATH.
pub fn find_binary(explicit: Option<PathBuf>) -> PathBuf {
    if let Some(p) = explicit.or_else(|| std::env::var_os("WSLOAD_SERVER_BIN").map(PathBuf::from)) {
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

impl LocalServer {
    pub fn start(bin: PathBuf, spec: &LoadTestSpec, server: &ManagedServer) -> Result<LocalServer> {
        let mut cmd = Command::new(&bin);
        cmd.args([
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--profile",
            server.profile.as_str(),
        ]);
        if let Some(jwt) = spec.auth.as_ref().and_then(|a| a.jwt.as_ref()) {
            if let Some(secret) = jwt.secret.value.clone().or_else(|| {
                jwt.secret
                    .from_env
                    .as_ref()
                    .and_then(|v| std::env::var(v).ok())
            }) {
                cmd.env("WSLOAD_SERVER_JWT_SECRET", secret);
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
        cmd.args(&server.args);
        for e in &server.env {
            cmd.env(&e.name, &e.value);
        }
        cmd.env(
            "RUST_LOG",
            std::env::var("WSLOAD_SERVER_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        let mut child = cmd.spawn().map_err(|e| {
            Error::Target(format!(
                "cannot start the managed server {}: {e}; build it (cargo build --release -p wsload-server) or pass --server-bin",
                bin.display()
            ))
        })?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::Target("managed server has no stdout".into()))?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout)
                .lines()
                .map_while(std::result::Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut ws = None;
        loop {
            let line = match rx.recv_timeout(Duration::from_secs(15)) {
                Ok(l) => l,
                Err(_) => {
                    let _ = child.kill();
                    let status = child.wait().ok();
                    return Err(Error::Target(format!(
                        "the managed server did not start (exit: {status:?}); see its log above"
                    )));
                }
            };
            if let Some(rest) = line.strip_prefix("wsload-server listening on ") {
                ws = rest.split_whitespace().next().map(str::to_string);
            } else if let Some(rest) = line.strip_prefix("wsload-server metrics on ") {
                let ws =
                    ws.ok_or_else(|| Error::Target("managed server printed no listener".into()))?;
                let path = if server.path.starts_with('/') {
                    server.path.clone()
                } else {
                    format!("/{}", server.path)
                };
                return Ok(LocalServer {
                    child,
                    ws_url: format!("{ws}{path}"),
                    metrics_url: rest.trim().to_string(),
                });
            }
        }
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
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
