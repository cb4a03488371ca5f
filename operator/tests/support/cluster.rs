//! One real control plane (etcd + kube-apiserver from `scripts/k8s/control-plane.sh`) per test
//! binary, in a scratch directory of its own, torn down by a watchdog process once the test
//! process is gone.
//!
//! Why a watchdog: the cluster lives in a `static`, and statics are never dropped, so nothing in
//! the test process can run `control-plane.sh down` at exit; a crash or a Ctrl-C would not run
//! it either. The watchdog is a detached shell that polls the test process and cleans up after
//! it, whatever way it ended.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{Config, KubeConfigOptions, Kubeconfig};
use tokio::sync::OnceCell;

/// A running control plane. Get the one of this test binary with [`shared`].
pub struct Cluster {
    /// Admin kubeconfig (client certificate of `system:masters`, certificates embedded).
    pub kubeconfig: PathBuf,
    /// The control plane's directory: PKI, etcd data, `etcd.log`, `kube-apiserver.log`.
    pub dir: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub apiserver_url: String,
    kubectl_bin: PathBuf,
    kube_cache: PathBuf,
    crds: OnceCell<()>,
}

/// The control plane of this test binary, started on first use. Tests running in parallel
/// (each in its own tokio runtime) share it; give each test its own namespace
/// ([`Cluster::namespace`]) and its own client ([`Cluster::client`]).
pub async fn shared() -> &'static Cluster {
    // A failed start is kept, so the other tests fail at once with the same message instead of
    // each waiting out the start timeout again.
    static CLUSTER: OnceCell<Result<Cluster, String>> = OnceCell::const_new();
    let started = CLUSTER
        .get_or_init(|| async {
            match tokio::task::spawn_blocking(|| Cluster::start("cluster")).await {
                Ok(cluster) => cluster,
                Err(e) => Err(format!("starting the control plane panicked: {e}")),
            }
        })
        .await;
    match started {
        Ok(cluster) => cluster,
        Err(e) => panic!("{e}"),
    }
}

/// The repository root (the Cargo workspace).
pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("operator/ has a parent directory")
}

/// This test process's scratch directory (`$TMPDIR/wsload-optest-<binary>-<pid>-<n>`): the
/// control plane, pod logs, anything a test wants to keep next to them. Removed by the watchdog
/// when the process exits, unless a test panicked (the path is then printed with the panic) or
/// `WSLOAD_TEST_KEEP=1`.
pub fn scratch_dir() -> &'static Path {
    static SCRATCH: OnceLock<PathBuf> = OnceLock::new();
    SCRATCH.get_or_init(|| {
        let exe = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .map(|stem| match stem.rsplit_once('-') {
                // Cargo names test binaries <target>-<16 hex digits>.
                Some((name, hash)) if hash.len() == 16 => name.to_string(),
                _ => stem,
            })
            .unwrap_or_else(|| "test".into());
        let pid = std::process::id();
        let base = std::env::temp_dir();
        prune_kept(&base);
        // The pid alone is unique among live processes; the suffix covers a directory left by
        // an earlier process with the same pid whose watchdog never ran (a reboot).
        let dir = (0..1000)
            .map(|n| base.join(format!("wsload-optest-{exe}-{pid}-{n}")))
            .find(|dir| std::fs::create_dir(dir).is_ok())
            .unwrap_or_else(|| panic!("cannot create a scratch directory under {base:?}"));
        start_watchdog(&dir);
        keep_on_panic(&dir);
        dir
    })
}

/// Removes scratch directories kept after failures more than a day ago, so that failing runs
/// do not fill the disk. Only those whose watchdog is done (it says "kept" last) are touched.
fn prune_kept(base: &Path) {
    let day = std::time::Duration::from_secs(24 * 3600);
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let ours = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("wsload-optest-"));
        let log = path.join("watchdog.log");
        let old = std::fs::metadata(&log)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > day));
        if ours && old && std::fs::read_to_string(&log).is_ok_and(|l| l.contains("; kept ")) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// Marks the scratch directory to be kept, as a panic does.
pub fn keep_scratch_dir() {
    let _ = std::fs::write(scratch_dir().join("keep"), "");
}

fn keep_on_panic(dir: &Path) {
    let dir = dir.to_path_buf();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // The test harness captures this with the test's output and shows it with the failure.
        let _ = std::fs::write(dir.join("keep"), "");
        eprintln!(
            "wsload test harness: logs kept in {} (pods/*.log: pod output, cluster/*.log: etcd and kube-apiserver)",
            dir.display()
        );
        previous(info);
    }));
}

/// Polls the test process; once it is gone (or is a zombie), stops the control plane and
/// removes the scratch directory. The start time from /proc/PID/stat (field 22) guards against
/// the pid being reused by an unrelated process while we sleep.
const WATCHDOG: &str = r#"
pid=$1 dir=$2 control_plane=$3
starttime() { local s; s=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1; s=${s##*) }; set -- $s; [[ $1 != Z ]] && echo "${20}"; }
start=$(starttime) || start=gone
while [[ $start != gone && "$(starttime)" == "$start" ]]; do sleep 0.5; done
# The shared control plane (cluster) and any private one a test started (cluster-NAME).
for cluster in "$dir"/cluster*/; do "$control_plane" down "$cluster"; done
if [[ -e $dir/keep || ${WSLOAD_TEST_KEEP:-0} == 1 ]]; then
    # The logs are what a failure needs; etcd's preallocated WAL is 60 MB of nothing.
    rm -rf "$dir"/cluster*/etcd
    echo "test process $pid gone; control plane stopped; kept $dir"
else
    rm -rf "$dir"
fi
"#;

// Never waited for: it must outlive this process, and it only exits once we are gone.
#[allow(clippy::zombie_processes)]
fn start_watchdog(dir: &Path) {
    use std::os::unix::process::CommandExt;
    let log = std::fs::File::create(dir.join("watchdog.log")).expect("create watchdog.log");
    Command::new("bash")
        .arg("-c")
        .arg(WATCHDOG)
        .arg("wsload-test-watchdog")
        .arg(std::process::id().to_string())
        .arg(dir)
        .arg(workspace_root().join("scripts/k8s/control-plane.sh"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("dup watchdog.log"))
        .stderr(log)
        // Its own process group: a Ctrl-C to the test's group must leave it alive to clean up.
        .process_group(0)
        .spawn()
        .expect("spawn the test watchdog (bash)");
}

/// `${WSLOAD_CACHE:-~/.cache/wsload}/k8s/<K8S_VERSION>/bin`, as scripts/k8s/versions.sh says.
pub fn k8s_bin_dir() -> PathBuf {
    let versions = workspace_root().join("scripts/k8s/versions.sh");
    let text = std::fs::read_to_string(&versions).expect("read scripts/k8s/versions.sh");
    let version = text
        .lines()
        .find_map(|l| l.strip_prefix("K8S_VERSION="))
        .unwrap_or_else(|| panic!("no K8S_VERSION= line in {}", versions.display()))
        .trim()
        .to_string();
    let cache = std::env::var_os("WSLOAD_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/wsload")
        });
    cache.join("k8s").join(version).join("bin")
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).any(|d| d.join(name).is_file()))
        .unwrap_or(false)
}

/// A control plane of the calling test's own, in `<scratch>/cluster-<name>`, for a test that
/// stops or restarts part of it (tests sharing [`shared`] must never see that). Lives until
/// [`Cluster::down`] or the test process ends (the watchdog stops it then, as the shared one).
pub async fn private(name: &str) -> &'static Cluster {
    let dir = format!("cluster-{name}");
    let started = tokio::task::spawn_blocking(move || Cluster::start(&dir))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    // Leaked: [`Cluster::apply_crds`] and the tests' helpers take `&'static Cluster`, and a
    // test binary starts only a few.
    Box::leak(Box::new(started.unwrap_or_else(|e| panic!("{e}"))))
}

impl Cluster {
    fn start(dir_name: &str) -> Result<Cluster, String> {
        let bin = k8s_bin_dir();
        let missing: Vec<String> = ["kube-apiserver", "kubectl"]
            .iter()
            .filter(|b| !bin.join(b).is_file())
            .map(|b| bin.join(b).display().to_string())
            .chain(
                ["etcd", "openssl", "curl"]
                    .iter()
                    .filter(|b| !on_path(b))
                    .map(|b| format!("{b} (on PATH)")),
            )
            .collect();
        // control-plane.sh would build them itself, but a 7-minute Go build inside a test
        // looks like a hang; say what to run instead (scripts/test does it before cargo test).
        if !missing.is_empty() {
            let cache = std::env::var("WSLOAD_CACHE")
                .ok()
                .filter(|c| !c.is_empty())
                .map(|c| format!("WSLOAD_CACHE={c} "))
                .unwrap_or_default();
            return Err(format!(
                "Kubernetes test binaries missing: {}\nbuild them with (in {}):\n    scripts/k8s/install-deps.sh && {cache}scripts/k8s/build.sh kube-apiserver kubectl",
                missing.join(", "),
                workspace_root().display()
            ));
        }
        let scratch = scratch_dir();
        let dir = scratch.join(dir_name);
        let started = std::time::Instant::now();
        let out = Command::new(workspace_root().join("scripts/k8s/control-plane.sh"))
            .arg("up")
            .arg(&dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run scripts/k8s/control-plane.sh: {e}"))?;
        if !out.status.success() {
            keep_scratch_dir();
            return Err(format!(
                "control-plane.sh up {} failed ({}); logs kept in {}:\n{}",
                dir.display(),
                out.status,
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let env = std::fs::read_to_string(dir.join("cluster.env"))
            .map_err(|e| format!("read {}/cluster.env: {e}", dir.display()))?;
        let apiserver_url = env
            .lines()
            .find_map(|l| l.strip_prefix("APISERVER_URL="))
            .ok_or("no APISERVER_URL in cluster.env")?
            .to_string();
        eprintln!(
            "wsload test harness: control plane {apiserver_url} up in {:.1?}, in {}",
            started.elapsed(),
            dir.display()
        );
        Ok(Cluster {
            kubeconfig: dir.join("kubeconfig"),
            dir,
            apiserver_url,
            kubectl_bin: bin.join("kubectl"),
            kube_cache: scratch.join("kube-cache"),
            crds: OnceCell::new(),
        })
    }

    /// A new admin client. One per test: a client's connections belong to the tokio runtime
    /// that made them, and each `#[tokio::test]` has its own runtime, so a client shared
    /// between tests breaks once its first test ends.
    pub async fn client(&self) -> kube::Client {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|e| panic!("read {}: {e}", self.kubeconfig.display()));
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap_or_else(|e| panic!("load {}: {e}", self.kubeconfig.display()));
        kube::Client::try_from(config).expect("build a kube client")
    }

    /// A client acting as `user` (impersonated by the admin): what RBAC grants that user,
    /// and no more.
    pub async fn client_as(&self, user: &str) -> kube::Client {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|e| panic!("read {}: {e}", self.kubeconfig.display()));
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap_or_else(|e| panic!("load {}: {e}", self.kubeconfig.display()));
        config.auth_info.impersonate = Some(user.to_string());
        kube::Client::try_from(config).expect("build a kube client")
    }

    /// Creates a namespace named `<prefix>-<n>`, unique in this cluster, with its `default`
    /// ServiceAccount, and returns its name.
    /// Nothing deletes it: without a controller manager a namespace's deletion never completes,
    /// and the cluster goes away with the test process.
    pub async fn namespace(&self, prefix: &str) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let mut prefix: String = prefix
            .chars()
            .map(|c| match c.to_ascii_lowercase() {
                c @ ('a'..='z' | '0'..='9') => c,
                _ => '-',
            })
            .take(50)
            .collect();
        prefix = prefix.trim_matches('-').to_string();
        if prefix.is_empty() || !prefix.starts_with(|c: char| c.is_ascii_lowercase()) {
            prefix.insert_str(0, "ns-");
        }
        let name = format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        let client = self.client().await;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
        // The controller manager's service account controller would make it; without it the
        // ServiceAccount admission plugin refuses every pod of the namespace.
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<ServiceAccount>::namespaced(client, &name)
            .create(&PostParams::default(), &sa)
            .await
            .unwrap_or_else(|e| panic!("create service account {name}/default: {e}"));
        name
    }

    /// Runs kubectl against this cluster (its discovery cache in the scratch directory, not
    /// ~/.kube). Blocking: in async code wrap it in `spawn_blocking` if it may take long.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(&self.kubectl_bin)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", &self.kube_cache)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", self.kubectl_bin.display()))
    }

    /// [`Cluster::kubectl`] that panics with kubectl's stderr unless it succeeds; returns stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {} failed ({}):\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Applies the LoadTest CRD (`crds/loadtest.yaml`) once per cluster and waits until it is
    /// Established. Call it in every test that uses LoadTests; it is cheap after the first call.
    ///
    /// While `crds/loadtest.yaml` does not exist yet, the CRD printed by `wsload-operator crd`
    /// is applied instead, and failing that nothing is (both said loudly on stderr).
    pub async fn apply_crds(&'static self) {
        self.crds
            .get_or_init(|| async {
                let file = workspace_root().join("crds/loadtest.yaml");
                tokio::task::spawn_blocking(move || self.apply_crd_file(file))
                    .await
                    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
            })
            .await;
    }

    fn apply_crd_file(&self, file: PathBuf) {
        let file = if file.is_file() {
            file
        } else {
            let generated = scratch_dir().join("loadtest-crd.yaml");
            eprintln!(
                "\n!!!! wsload test harness: {} does not exist; applying the output of `wsload-operator crd` instead\n",
                file.display()
            );
            let out = Command::new(env!("CARGO_BIN_EXE_wsload-operator"))
                .arg("crd")
                .output()
                .expect("run wsload-operator crd");
            if !out.status.success() || out.stdout.is_empty() {
                eprintln!(
                    "\n!!!! wsload test harness: `wsload-operator crd` failed too ({}): NO CRD APPLIED\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                );
                return;
            }
            std::fs::write(&generated, &out.stdout).expect("write the generated CRD");
            generated
        };
        let path = file.to_str().expect("UTF-8 path");
        self.kubectl_ok(&["apply", "--server-side", "-f", path]);
        // Polled, not `kubectl wait`: a CRD read before its first condition makes wait fail at
        // once (`.status.conditions accessor error: <nil>`), which it did under CPU load.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            // Read as JSON: a jsonpath filter over conditions fails outright while the CRD has
            // none yet, which is "not yet", not an error.
            let crd: serde_json::Value =
                serde_json::from_str(&self.kubectl_ok(&["get", "-f", path, "-o", "json"]))
                    .expect("kubectl prints the CRD as JSON");
            let established = crd["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Established"))
                .map(|c| c["status"].clone());
            if established.as_ref().is_some_and(|s| s == "True") {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{path} not Established within 60 s (status: {established:?})"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}
