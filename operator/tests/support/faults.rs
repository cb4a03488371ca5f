//! Faults of a control plane of a test's own ([`super::cluster::private`]): its kube-apiserver
//! stopped and started again on the same address and certificates, etcd written and compacted
//! behind the API server's back, and the API server's own request counters.
//!
//! The API server is restarted from the very command line `control-plane.sh up` gave it (read
//! from /proc), so port, certificates and flags are the same, and `control-plane.sh down` (or
//! the watchdog) still recognizes and stops it: its pid goes to the same pid file.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::cluster::Cluster;

/// A stopped kube-apiserver: what it takes to start it again.
pub struct StoppedApiServer {
    argv: Vec<String>,
    stopped_at: Instant,
}

impl StoppedApiServer {
    /// How long it has been down.
    pub fn down_for(&self) -> Duration {
        self.stopped_at.elapsed()
    }
}

fn pid_file(cluster: &Cluster) -> PathBuf {
    cluster.dir.join("kube-apiserver.pid")
}

fn alive(pid: &str) -> bool {
    // A zombie has exited: its parent (init, once control-plane.sh is gone) reaps it.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

impl Cluster {
    /// Stops the kube-apiserver (SIGTERM, as a rolling restart does; SIGKILL 5 s later) and
    /// waits until it is gone; etcd keeps running. Blocking.
    pub fn stop_apiserver(&self) -> StoppedApiServer {
        let pid = std::fs::read_to_string(pid_file(self))
            .unwrap_or_else(|e| panic!("read {}: {e}", pid_file(self).display()))
            .trim()
            .to_string();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap_or_else(|e| panic!("kube-apiserver (pid {pid}) is not running: {e}"));
        let argv: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let pid_num = nix::unistd::Pid::from_raw(pid.parse().expect("a numeric pid"));
        let signal = |sig| {
            nix::sys::signal::kill(pid_num, sig)
                .unwrap_or_else(|e| panic!("signal kube-apiserver (pid {pid}): {e}"));
        };
        signal(nix::sys::signal::Signal::SIGTERM);
        // It stops listening at once, then some of its controllers take half a minute to
        // wind down: past a few seconds it is killed, as its orchestrator would.
        let until_gone = |limit: Duration| {
            let deadline = Instant::now() + limit;
            while alive(&pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            !alive(&pid)
        };
        if !until_gone(Duration::from_secs(5)) {
            signal(nix::sys::signal::Signal::SIGKILL);
            assert!(
                until_gone(Duration::from_secs(10)),
                "kube-apiserver (pid {pid}) still runs after SIGKILL"
            );
        }
        StoppedApiServer {
            argv,
            stopped_at: Instant::now(),
        }
    }

    /// Starts the kube-apiserver again as it ran before [`Cluster::stop_apiserver`] and waits
    /// until it is ready. Blocking.
    pub fn start_apiserver(&self, stopped: StoppedApiServer) {
        let log = self.dir.join("kube-apiserver.log");
        // Started from a shell that exits at once: the API server is then init's child, never
        // a zombie of this process, and the pid file says which process to stop.
        let status = Command::new("bash")
            .arg("-c")
            .arg(
                r#"log=$1 pid=$2; shift 2
printf '\n==== %s: restarted by the test: %s\n' "$(date -u +%FT%TZ)" "$*" >>"$log"
"$@" </dev/null >>"$log" 2>&1 &
echo $! >"$pid""#,
            )
            .arg("restart-kube-apiserver")
            .arg(&log)
            .arg(pid_file(self))
            .args(&stopped.argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .expect("run bash");
        assert!(status.success(), "restarting kube-apiserver: {status}");
        let pki = self.dir.join("pki");
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let ready = Command::new("curl")
                .args(["-fsS", "--max-time", "5", "--cacert"])
                .arg(pki.join("ca.crt"))
                .arg("--cert")
                .arg(pki.join("admin.crt"))
                .arg("--key")
                .arg(pki.join("admin.key"))
                .arg(format!("{}/readyz", self.apiserver_url))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready 120 s after its restart (see {})",
                log.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// etcd's client URL (plain HTTP on loopback), from `cluster.env`.
    pub fn etcd_url(&self) -> String {
        let env = std::fs::read_to_string(self.dir.join("cluster.env"))
            .unwrap_or_else(|e| panic!("read {}/cluster.env: {e}", self.dir.display()));
        env.lines()
            .find_map(|l| l.strip_prefix("ETCD_URL="))
            .unwrap_or_else(|| panic!("no ETCD_URL in {}/cluster.env", self.dir.display()))
            .to_string()
    }

    /// One call of etcd's v3 JSON gateway (etcdctl is not installed with etcd-server): POST
    /// `body` to `path`, the answer as JSON. Blocking.
    fn etcd(&self, path: &str, body: &Value) -> Value {
        let out = Command::new("curl")
            .args(["-fsS", "--max-time", "10", "-X", "POST", "-d"])
            .arg(body.to_string())
            .arg(format!("{}{path}", self.etcd_url()))
            .stdin(Stdio::null())
            .output()
            .expect("run curl");
        assert!(
            out.status.success(),
            "etcd {path} {body}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("etcd {path}: not JSON ({e}): {:?}", out.stdout))
    }

    /// etcd's current revision: the newest resourceVersion any object can have.
    pub fn etcd_revision(&self) -> u64 {
        let answer = self.etcd("/v3/kv/range", &json!({"key": "AA==", "limit": 1}));
        answer["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("no header.revision in {answer}"))
    }

    /// Writes a key of no meaning to Kubernetes (outside `/registry`) `times` times, so that
    /// etcd's revision moves past every resourceVersion a client has seen; then compacts the
    /// history before the new revision, as the API server's own compaction would after its
    /// interval. A watch from any version seen before then can only be answered 410 Gone.
    /// Returns the revision compacted at. Blocking.
    pub fn advance_and_compact_etcd(&self, times: u32) -> u64 {
        for _ in 0..times {
            // base64 of "/wsload-test/advance" and of "1".
            self.etcd(
                "/v3/kv/put",
                &json!({"key": "L3dzbG9hZC10ZXN0L2FkdmFuY2U=", "value": "MQ=="}),
            );
        }
        let revision = self.etcd_revision();
        self.etcd(
            "/v3/kv/compaction",
            &json!({"revision": revision.to_string(), "physical": true}),
        );
        revision
    }

    /// The kube-apiserver's `apiserver_request_total` summed over the samples whose labels
    /// include every one of `labels` (`("verb", "LIST")`, ...). Counts since its last start.
    pub async fn apiserver_requests(
        &self,
        client: &kube::Client,
        labels: &[(&str, &str)],
    ) -> kube::Result<u64> {
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .expect("a request");
        let text = client.request_text(request).await?;
        let mut total = 0.0;
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
                continue;
            };
            let Some((sample_labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            if labels
                .iter()
                .all(|(k, v)| sample_labels.contains(&format!("{k}=\"{v}\"")))
            {
                total += value.trim().parse::<f64>().unwrap_or(0.0);
            }
        }
        Ok(total as u64)
    }

    /// Stops this control plane (a private one, at the end of its test). Blocking.
    pub fn down(&self) {
        let out =
            Command::new(super::cluster::workspace_root().join("scripts/k8s/control-plane.sh"))
                .arg("down")
                .arg(&self.dir)
                .stdin(Stdio::null())
                .output()
                .expect("run control-plane.sh down");
        assert!(
            out.status.success(),
            "control-plane.sh down {}: {}",
            self.dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
