//! A test kubelet (and scheduler): makes the pods of one namespace real local processes on
//! loopback addresses, and reports them through the API the way a kubelet does, so the
//! operator under test sees scheduling, readiness, exits, OOM kills and restarts it cannot tell
//! from a cluster's.
//!
//! What it does, per pod of its namespace:
//! - schedules it (nodeSelector, required node affinity, required pod anti-affinity on any
//!   topology key; first fitting node wins) through the `pods/binding` subresource, or marks it
//!   `PodScheduled=False Unschedulable` and retries whenever anything changes;
//! - gives it an address in 127.0.0.0/8 unique across test processes (derived from the pid);
//! - runs its first container: `wsload/loadgen:*` is `target/<profile>/wsload`,
//!   `wsload/server:*` is `target/<profile>/wsload-server` (built once per test process), a
//!   `command` names a host program otherwise; env is resolved as a kubelet does (`$(VAR)`,
//!   fieldRef, secretKeyRef, configMapKeyRef, envFrom); init containers are reported completed
//!   without running (privileged sysctl tuning cannot run here);
//! - mounts Secret volumes as a directory of its own per pod (each key a file, with the
//!   volume's `defaultMode`), and, as a process cannot see the container's paths, rewrites an
//!   env value under a mount's path to the same file under that directory;
//! - writes status through the status subresource: phase, IPs, conditions, container statuses;
//!   Ready follows the readiness probe (httpGet or tcpSocket, every 200 ms);
//! - on exit applies `restartPolicy`; on deletion sends SIGTERM, SIGKILL after the grace
//!   period, then removes the pod (grace 0), as a kubelet finalizes a deletion;
//! - plays kube-proxy for the namespace's Services: a pod reaches `<clusterIP>:<port>` through
//!   a loopback proxy spreading connections over the ready endpoints ([`super::proxy`]).
//!
//! Not modelled: liveness and startup probes, exec probes (taken as succeeding), taints,
//! required pod affinity, resource requests, volumes other than Secrets, more than one
//! container running.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Node, NodeSelectorRequirement, Pod, PodAffinityTerm, Probe, Secret,
    Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, OnceCell, mpsc, oneshot};
use tokio::task::JoinHandle;

use super::cluster::{scratch_dir, workspace_root};
use super::proxy::{self, ServiceProxy};

/// How a [`Kubelet`] sets up its nodes and runs images.
#[derive(Clone, Debug)]
pub struct KubeletOpts {
    /// How many nodes to create (default 4).
    pub nodes: usize,
    /// Node names are `<prefix>-<i>`; default `<namespace>-node`, so that kubelets of tests
    /// running side by side (Nodes are cluster-wide) never share a node.
    pub node_prefix: Option<String>,
    /// Labels on every node, besides `kubernetes.io/hostname` and `kubernetes.io/os`.
    pub node_labels: BTreeMap<String, String>,
    /// More labels on node i (index into this list; shorter lists leave later nodes alone).
    pub per_node_labels: Vec<BTreeMap<String, String>>,
    /// Image (without tag and registry, e.g. `wsload/loadgen`) to binary, checked before the
    /// built-in mapping.
    pub images: Vec<(String, PathBuf)>,
}

impl Default for KubeletOpts {
    fn default() -> Self {
        KubeletOpts {
            nodes: 4,
            node_prefix: None,
            node_labels: BTreeMap::new(),
            per_node_labels: Vec::new(),
            images: Vec::new(),
        }
    }
}

/// What runs (or ran) for a pod, from [`Kubelet::pods`].
#[derive(Clone, Debug)]
pub struct PodProcess {
    pub name: String,
    pub uid: String,
    pub node: String,
    pub ip: String,
    /// The current process; `None` once it exited (or before it started).
    pub pid: Option<u32>,
    pub ready: bool,
    pub restart_count: i32,
    /// Exit code of the last process that ended (128 + signal when killed).
    pub last_exit_code: Option<i32>,
    /// stdout and stderr of every run of the pod's container.
    pub log: PathBuf,
}

/// The test kubelet of one namespace. Dropping it kills its processes (as does the end of the
/// test's runtime); [`Kubelet::stop`] does it explicitly.
pub struct Kubelet {
    shared: Arc<KubeletState>,
    main: JoinHandle<()>,
}

/// What the kubelet's watch and its pods' runners share: the nodes, each pod's runner, the
/// Services' proxies and the log.
struct KubeletState {
    client: kube::Client,
    namespace: String,
    opts: KubeletOpts,
    nodes: Mutex<Vec<NodeInfo>>,
    runners: Mutex<HashMap<String, Runner>>,
    wake: Notify,
    log: Mutex<std::fs::File>,
    log_path: PathBuf,
    started: Instant,
    /// The namespace's Services' proxies, by Service uid.
    proxies: Mutex<HashMap<String, ServiceProxy>>,
}

#[derive(Clone, Debug)]
struct NodeInfo {
    name: String,
    ip: String,
    labels: BTreeMap<String, String>,
}

/// The kubelet's handle on one pod's runner task (keyed by pod uid).
struct Runner {
    name: String,
    ctl: mpsc::UnboundedSender<Ctl>,
    info: Arc<Mutex<PodProcess>>,
    task: JoinHandle<()>,
    /// The grace period last passed on; a shorter one (a second delete) is passed on again.
    delete_sent: Option<i64>,
}

type Ack = oneshot::Sender<Result<(), String>>;

enum Ctl {
    Signal(Signal, Ack),
    OomKill(Ack),
    Restart(Ack),
    PauseReadiness(bool, Ack),
    /// deletionTimestamp set: terminate within the grace period, then remove the pod.
    Delete(Duration),
    /// The pod is gone from the API: kill, nothing to report.
    Gone,
    /// The kubelet stops: kill, report nothing.
    Stop(Ack),
}

impl Kubelet {
    /// Creates the nodes, starts watching the namespace's pods, and returns once the first
    /// list is in (pods that exist already are handled like new ones).
    pub async fn start(client: kube::Client, namespace: &str, opts: KubeletOpts) -> Kubelet {
        // Build the pod binaries before any pod exists, so a slow (cold) build is never counted
        // against a test's wait for a pod to become ready.
        if let Err(e) = built_binaries().await {
            panic!("cannot build the pod binaries: {e}");
        }
        let pods_dir = scratch_dir().join("pods");
        std::fs::create_dir_all(&pods_dir).expect("create the pod log directory");
        let log_path = pods_dir.join(format!("kubelet-{namespace}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("open the kubelet log");
        let shared = Arc::new(KubeletState {
            client,
            namespace: namespace.to_string(),
            opts,
            nodes: Mutex::new(Vec::new()),
            runners: Mutex::new(HashMap::new()),
            wake: Notify::new(),
            log: Mutex::new(log),
            log_path,
            started: Instant::now(),
            proxies: Mutex::new(HashMap::new()),
        });
        let prefix = shared
            .opts
            .node_prefix
            .clone()
            .unwrap_or_else(|| format!("{namespace}-node"));
        for i in 0..shared.opts.nodes {
            let mut labels = shared.opts.node_labels.clone();
            if let Some(extra) = shared.opts.per_node_labels.get(i) {
                labels.extend(extra.clone());
            }
            shared.create_node(format!("{prefix}-{i}"), labels).await;
        }
        let (synced_tx, synced_rx) = oneshot::channel();
        let main = tokio::spawn(main_loop(shared.clone(), synced_tx));
        synced_rx
            .await
            .expect("the test kubelet's pod watch ended before its first list");
        Kubelet { shared, main }
    }

    pub fn namespace(&self) -> &str {
        &self.shared.namespace
    }

    /// Names of the nodes, in scheduling order.
    pub fn node_names(&self) -> Vec<String> {
        lock(&self.shared.nodes)
            .iter()
            .map(|n| n.name.clone())
            .collect()
    }

    /// Adds a node (pods left unscheduled are tried on it at once); returns its name.
    pub async fn add_node(&self, labels: BTreeMap<String, String>) -> String {
        let prefix = self
            .shared
            .opts
            .node_prefix
            .clone()
            .unwrap_or_else(|| format!("{}-node", self.shared.namespace));
        let name = format!("{prefix}-{}", lock(&self.shared.nodes).len());
        self.shared.create_node(name.clone(), labels).await;
        self.shared.wake.notify_one();
        name
    }

    /// Every pod this kubelet started and that still exists in the API, by name.
    pub fn pods(&self) -> Vec<PodProcess> {
        let mut pods: Vec<PodProcess> = lock(&self.shared.runners)
            .values()
            .map(|r| lock(&r.info).clone())
            .collect();
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        pods
    }

    /// The process of pod `name`, if the kubelet runs (or ran) it.
    pub fn pod(&self, name: &str) -> Option<PodProcess> {
        self.pods().into_iter().find(|p| p.name == name)
    }

    /// Where pod `name`'s output goes (whether or not it ran yet).
    pub fn log_path(&self, name: &str) -> PathBuf {
        pod_log_path(&self.shared.namespace, name)
    }

    /// Sends `signal` to the pod's process group, as a crash or an outside kill would. The exit
    /// is then handled like any other (status, restartPolicy). Returns once the signal is sent.
    pub async fn kill(&self, pod: &str, signal: Signal) {
        self.call(pod, |ack| Ctl::Signal(signal, ack)).await;
    }

    /// SIGKILL, reported as an OOM kill: terminated, reason OOMKilled, exit code 137. Returns
    /// once the pod's status says so.
    pub async fn oom_kill(&self, pod: &str) {
        self.call(pod, Ctl::OomKill).await;
    }

    /// Kills the container and starts it again with restartCount + 1, whatever the
    /// restartPolicy (a kubelet does this when a liveness probe fails). Returns once the new
    /// process runs and the status says so.
    pub async fn restart(&self, pod: &str) {
        self.call(pod, Ctl::Restart).await;
    }

    /// Reports the pod not ready whatever its probe says, until [`Kubelet::resume_readiness`].
    pub async fn pause_readiness(&self, pod: &str) {
        self.call(pod, |ack| Ctl::PauseReadiness(true, ack)).await;
    }

    /// Readiness follows the probe again.
    pub async fn resume_readiness(&self, pod: &str) {
        self.call(pod, |ack| Ctl::PauseReadiness(false, ack)).await;
    }

    /// Kills every process and stops watching; pods stay in the API as they were.
    pub async fn stop(&self) {
        self.main.abort();
        lock(&self.shared.proxies).clear();
        let runners: Vec<mpsc::UnboundedSender<Ctl>> = lock(&self.shared.runners)
            .values()
            .map(|r| r.ctl.clone())
            .collect();
        for ctl in runners {
            let (ack, done) = oneshot::channel();
            if ctl.send(Ctl::Stop(ack)).is_ok() {
                let _ = done.await;
            }
        }
    }

    async fn call(&self, pod: &str, msg: impl FnOnce(Ack) -> Ctl) {
        let ctl = {
            let runners = lock(&self.shared.runners);
            let mut matching: Vec<&Runner> = runners.values().filter(|r| r.name == pod).collect();
            // A pod recreated under the same name: the old one is on its way out.
            matching.sort_by_key(|r| r.task.is_finished());
            match matching.first() {
                Some(r) => r.ctl.clone(),
                None => panic!(
                    "test kubelet: pod {}/{pod} is not running here (running: {:?})",
                    self.shared.namespace,
                    runners.values().map(|r| &r.name).collect::<Vec<_>>()
                ),
            }
        };
        let (ack, done) = oneshot::channel();
        ctl.send(msg(ack))
            .unwrap_or_else(|_| panic!("test kubelet: pod {pod}'s runner has ended"));
        match done.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("test kubelet: pod {pod}: {e}"),
            Err(_) => panic!("test kubelet: pod {pod}'s runner ended before answering"),
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.main.abort();
        lock(&self.shared.proxies).clear();
        let runners = lock(&self.shared.runners);
        for r in runners.values() {
            // Dropping the runner's task drops its Child, which kill_on_drop kills.
            r.task.abort();
        }
        if std::thread::panicking() {
            // Shown with the failed test's output.
            let mut out = format!(
                "test kubelet of {}: log {}",
                self.shared.namespace,
                self.shared.log_path.display()
            );
            let mut names: Vec<&str> = runners.values().map(|r| r.name.as_str()).collect();
            names.sort();
            names.dedup();
            for name in names {
                let path = pod_log_path(&self.shared.namespace, name);
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let _ = write!(
                    out,
                    "\n--- pod {name}: {} (last lines)\n{}",
                    path.display(),
                    lines[lines.len().saturating_sub(15)..].join("\n")
                );
            }
            eprintln!("{out}");
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panicking test thread must not turn every later use into a second panic.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn pod_log_path(namespace: &str, pod: &str) -> PathBuf {
    scratch_dir()
        .join("pods")
        .join(format!("{namespace}_{pod}.log"))
}

fn now() -> Time {
    Time(Timestamp::now())
}

impl KubeletState {
    /// Points every `<clusterIP>:<port>` in `env` at the Service's proxy, starting proxies for
    /// Services not seen before (what kube-proxy's rules do to a pod's packets).
    async fn route_services(&self, env: &mut [(String, String)]) -> Result<(), NotYet> {
        let api: Api<Service> = Api::namespaced(self.client.clone(), &self.namespace);
        let services = api
            .list(&Default::default())
            .await
            .map_err(|e| ("CreateContainerConfigError", format!("list services: {e}")))?;
        let mut proxies = lock(&self.proxies);
        for svc in &services.items {
            let uid = svc.metadata.uid.clone().unwrap_or_default();
            if let std::collections::hash_map::Entry::Vacant(slot) = proxies.entry(uid) {
                let ip = next_ip();
                if let Some(p) = proxy::start(self.client.clone(), &self.namespace, svc, ip) {
                    self.log(format!(
                        "service {} ({}) proxied at {}",
                        svc.metadata.name.as_deref().unwrap_or(""),
                        p.cluster_ip,
                        p.ip
                    ));
                    slot.insert(p);
                }
            }
        }
        for (_, value) in env.iter_mut() {
            for p in proxies.values() {
                *value = p.rewrite(value);
            }
        }
        Ok(())
    }

    fn log(&self, msg: impl AsRef<str>) {
        let t = self.started.elapsed().as_secs_f64();
        let _ = writeln!(lock(&self.log), "[{t:8.3}s] {}", msg.as_ref());
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    async fn create_node(&self, name: String, mut labels: BTreeMap<String, String>) {
        labels.insert("kubernetes.io/hostname".into(), name.clone());
        labels.insert("kubernetes.io/os".into(), "linux".into());
        labels.insert("kubernetes.io/arch".into(), "amd64".into());
        let ip = next_ip();
        let api: Api<Node> = Api::all(self.client.clone());
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(labels.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": labels}})),
                )
                .await
                .unwrap_or_else(|e| panic!("relabel node {name}: {e}"));
            }
            Err(e) => panic!("create node {name}: {e}"),
        }
        let t = now();
        let status = json!({"status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "wsload test kubelet", "lastHeartbeatTime": t, "lastTransitionTime": t}],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
        }});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
            .await
            .unwrap_or_else(|e| panic!("set node {name}'s status: {e}"));
        self.log(format!("node {name} ({ip}) labels {labels:?}"));
        lock(&self.nodes).push(NodeInfo { name, ip, labels });
    }
}

/// Pod and node addresses: 127.X.Y.Z, Z counted within a block X.Y that this process holds a
/// lock on (`$TMPDIR/wsload-optest-ip-blocks/127.X.Y`), so test processes running side by
/// side never hand out the same address; the kernel drops the lock when the process ends,
/// however it ends. 127.0.0.0/8 all reaches loopback on Linux; X starts at 1 to keep clear of
/// 127.0.0.1.
pub(crate) fn next_ip() -> String {
    static NEXT: Mutex<Option<(u32, u32)>> = Mutex::new(None);
    let mut next = lock(&NEXT);
    let (block, z) = match *next {
        Some((block, z)) if z <= 254 => (block, z),
        _ => (claim_ip_block(), 2),
    };
    *next = Some((block, z + 1));
    format!("127.{}.{}.{z}", 1 + block / 256, block % 256)
}

fn claim_ip_block() -> u32 {
    use nix::fcntl::{Flock, FlockArg};
    const BLOCKS: u32 = 254 * 256;
    static HELD: Mutex<Vec<Flock<std::fs::File>>> = Mutex::new(Vec::new());
    let dir = std::env::temp_dir().join("wsload-optest-ip-blocks");
    std::fs::create_dir_all(&dir).expect("create the IP block lock directory");
    // Start where the pid points, so that processes rarely contend for the same block.
    let first = std::process::id() % BLOCKS;
    for i in 0..BLOCKS {
        let block = (first + i) % BLOCKS;
        let path = dir.join(format!("127.{}.{}", 1 + block / 256, block % 256));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        if let Ok(held) = Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            lock(&HELD).push(held);
            return block;
        }
    }
    panic!("test kubelet: every loopback address block is held by another process");
}

// --- the watch and the scheduler ---------------------------------------------------------------

async fn main_loop(shared: Arc<KubeletState>, synced: oneshot::Sender<()>) {
    let (store, writer) = reflector::store();
    let stream =
        reflector(writer, watcher(shared.pods(), watcher::Config::default())).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut synced = Some(synced);
    // Bindings made but not yet seen through the watch, as a scheduler's assume cache.
    let mut assumed: HashMap<String, String> = HashMap::new();
    loop {
        tokio::select! {
            event = stream.next() => match event {
                Some(Ok(watcher::Event::InitDone)) => {
                    if let Some(s) = synced.take() {
                        let _ = s.send(());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => shared.log(format!("watch error (retrying): {e}")),
                None => return,
            },
            _ = shared.wake.notified() => {}
        }
        if synced.is_none() {
            reconcile(&shared, &store.state(), &mut assumed).await;
        }
    }
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// Brings processes in line with the pods in the store. Idempotent: the kubelet's own status
/// patches come back through the watch and call it again.
async fn reconcile(
    shared: &Arc<KubeletState>,
    pods: &[Arc<Pod>],
    assumed: &mut HashMap<String, String>,
) {
    let uids: HashSet<String> = pods.iter().map(|p| uid(p)).collect();
    lock(&shared.runners).retain(|uid, r| {
        if uids.contains(uid) {
            return true;
        }
        let _ = r.ctl.send(Ctl::Gone);
        false
    });
    assumed.retain(|uid, _| uids.contains(uid));

    let mut pods: Vec<&Arc<Pod>> = pods.iter().collect();
    pods.sort_by(|a, b| {
        let key = |p: &Pod| (p.metadata.creation_timestamp.as_ref().map(|t| t.0), name(p));
        key(a).cmp(&key(b))
    });
    let node_of = |pod: &Pod, assumed: &HashMap<String, String>| {
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .or_else(|| assumed.get(&uid(pod)).cloned())
    };
    let nodes = lock(&shared.nodes).clone();
    let ours = |n: &str| nodes.iter().find(|node| node.name == n).cloned();

    let mut unscheduled = Vec::new();
    for pod in &pods {
        let uid = uid(pod);
        let node = node_of(pod, assumed);
        if pod.metadata.deletion_timestamp.is_some() {
            let grace = pod
                .metadata
                .deletion_grace_period_seconds
                .or_else(|| pod.spec.as_ref()?.termination_grace_period_seconds)
                .unwrap_or(30);
            let mut runners = lock(&shared.runners);
            match runners.get_mut(&uid) {
                Some(r) if r.delete_sent.is_none_or(|sent| grace < sent) => {
                    r.delete_sent = Some(grace);
                    let _ = r
                        .ctl
                        .send(Ctl::Delete(Duration::from_secs(grace.max(0) as u64)));
                }
                Some(_) => {}
                // Scheduled here, never started (or already ended): only the final delete
                // is left, and nobody else would make it.
                None if node.as_deref().and_then(&ours).is_some() => {
                    drop(runners);
                    let api = shared.pods();
                    let (name, uid2) = (name(pod), uid.clone());
                    tokio::spawn(async move { final_delete(&api, &name, &uid2).await });
                }
                None => {}
            }
            continue;
        }
        match node {
            None => unscheduled.push(*pod),
            Some(n) => {
                if is_terminal(pod) || lock(&shared.runners).contains_key(&uid) {
                    continue;
                }
                if let Some(node) = ours(&n) {
                    start_runner(shared, pod, node);
                }
            }
        }
    }

    for pod in unscheduled {
        let placed: Vec<(&Pod, NodeInfo)> = pods
            .iter()
            .filter(|p| !is_terminal(p) && uid(p) != uid(pod))
            .filter_map(|p| Some((p.as_ref(), ours(&node_of(p, assumed)?)?)))
            .collect();
        match schedule(pod, &nodes, &placed) {
            Ok(node) => {
                let binding = json!({
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": name(pod), "uid": uid(pod)},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node.name},
                });
                let bound: Result<Value, _> = shared
                    .pods()
                    .create_subresource("binding", &name(pod), &PostParams::default(), &binding)
                    .await;
                match bound {
                    Ok(_) => {
                        shared.log(format!("bound pod {} to {}", name(pod), node.name));
                        assumed.insert(uid(pod), node.name.clone());
                        start_runner(shared, pod, node);
                    }
                    Err(e) => shared.log(format!("binding pod {} failed: {e}", name(pod))),
                }
            }
            Err(message) => {
                let current = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
                if current.is_some_and(|c| c.message.as_deref() == Some(message.as_str())) {
                    continue;
                }
                shared.log(format!("pod {} unschedulable: {message}", name(pod)));
                let patch = json!({
                    "metadata": {"uid": uid(pod)},
                    "status": {"phase": "Pending", "conditions": [{
                        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "message": message, "lastTransitionTime": now(),
                    }]},
                });
                if let Err(e) = shared
                    .pods()
                    .patch_status(&name(pod), &PatchParams::default(), &Patch::Merge(patch))
                    .await
                {
                    shared.log(format!("marking {} unschedulable failed: {e}", name(pod)));
                }
            }
        }
    }
}

/// The first node that fits, or the scheduler's kind of message saying why none does.
fn schedule(
    pod: &Pod,
    nodes: &[NodeInfo],
    placed: &[(&Pod, NodeInfo)],
) -> Result<NodeInfo, String> {
    let mut selector_misses = 0;
    let mut anti_affinity_misses = 0;
    for node in nodes {
        if !node_matches(pod, node) {
            selector_misses += 1;
        } else if anti_affinity_conflict(pod, node, placed) {
            anti_affinity_misses += 1;
        } else {
            return Ok(node.clone());
        }
    }
    let mut reasons = Vec::new();
    if selector_misses > 0 {
        reasons.push(format!(
            "{selector_misses} node(s) didn't match Pod's node affinity/selector"
        ));
    }
    if anti_affinity_misses > 0 {
        reasons.push(format!(
            "{anti_affinity_misses} node(s) didn't match pod anti-affinity rules"
        ));
    }
    Err(format!(
        "0/{} nodes are available: {}.",
        nodes.len(),
        reasons.join(", ")
    ))
}

fn node_matches(pod: &Pod, node: &NodeInfo) -> bool {
    let Some(spec) = &pod.spec else { return true };
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| node.labels.get(k) == Some(v));
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    // Terms are ORed, the expressions of a term ANDed.
    let affinity_ok = required.is_none_or(|r| {
        r.node_selector_terms.iter().any(|t| {
            let exprs = t.match_expressions.iter().flatten();
            let fields = t.match_fields.iter().flatten();
            let name_labels = BTreeMap::from([("metadata.name".to_string(), node.name.clone())]);
            // A term with neither expressions nor fields selects no node.
            (exprs.clone().next().is_some() || fields.clone().next().is_some())
                && exprs.clone().all(|e| node_requirement(e, &node.labels))
                && fields.clone().all(|e| node_requirement(e, &name_labels))
        })
    });
    selector_ok && affinity_ok
}

fn node_requirement(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&r.key);
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => {
            matches!((value.and_then(|v| number(v)), values.first().and_then(|v| number(v))), (Some(a), Some(b)) if a > b)
        }
        "Lt" => {
            matches!((value.and_then(|v| number(v)), values.first().and_then(|v| number(v))), (Some(a), Some(b)) if a < b)
        }
        _ => false,
    }
}

fn selector_matches(s: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = s
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let exprs_ok = s.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_ok && exprs_ok
}

fn required_anti_affinity(pod: &Pod) -> &[PodAffinityTerm] {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .unwrap_or_default()
}

/// A term of `owner` against `other`: both in the same topology domain (the same value of the
/// term's topology key on their nodes) and `other` selected by the term's label selector. Only
/// the pod's own namespace is considered, which is all a test kubelet sees.
fn term_hits(term: &PodAffinityTerm, a: &NodeInfo, b: &NodeInfo, other: &Pod) -> bool {
    let same_domain = match (
        a.labels.get(&term.topology_key),
        b.labels.get(&term.topology_key),
    ) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    };
    let empty = BTreeMap::new();
    let labels = other.metadata.labels.as_ref().unwrap_or(&empty);
    same_domain
        && term
            .label_selector
            .as_ref()
            .is_some_and(|s| selector_matches(s, labels))
}

/// Whether placing `pod` on `node` breaks a required anti-affinity term, its own or (as the
/// scheduler checks too) one of a pod already placed.
fn anti_affinity_conflict(pod: &Pod, node: &NodeInfo, placed: &[(&Pod, NodeInfo)]) -> bool {
    placed.iter().any(|(other, other_node)| {
        required_anti_affinity(pod)
            .iter()
            .any(|t| term_hits(t, node, other_node, other))
            || required_anti_affinity(other)
                .iter()
                .any(|t| term_hits(t, other_node, node, pod))
    })
}

async fn final_delete(api: &Api<Pod>, name: &str, uid: &str) {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    };
    // 404 and 409 (a newer pod of the same name) both mean there is nothing left to do.
    let _ = api.delete(name, &params).await;
}

// --- running a pod -----------------------------------------------------------------------------

fn start_runner(shared: &Arc<KubeletState>, pod: &Pod, node: NodeInfo) {
    let (uid, name) = (uid(pod), name(pod));
    let ip = next_ip();
    shared.log(format!("starting pod {name} on {} with IP {ip}", node.name));
    let info = Arc::new(Mutex::new(PodProcess {
        name: name.clone(),
        uid: uid.clone(),
        node: node.name.clone(),
        ip: ip.clone(),
        pid: None,
        ready: false,
        restart_count: 0,
        last_exit_code: None,
        log: pod_log_path(&shared.namespace, &name),
    }));
    let (ctl, rx) = mpsc::unbounded_channel();
    let run = Run {
        shared: shared.clone(),
        pod: pod.clone(),
        name: name.clone(),
        uid: uid.clone(),
        node,
        ip,
        info: info.clone(),
        start_time: now(),
        restart_count: 0,
        state: json!({"waiting": {"reason": "ContainerCreating"}}),
        last_state: json!({}),
        running: false,
        ready: false,
        probe_ready: false,
        paused: false,
        phase: "Pending",
        transitions: HashMap::new(),
    };
    let task = tokio::spawn(run.run(rx));
    lock(&shared.runners).insert(
        uid,
        Runner {
            name,
            ctl,
            info,
            task,
            delete_sent: None,
        },
    );
}

/// What to exec for the pod's container.
struct Launch {
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    probe: Option<ProbeSpec>,
}

#[derive(Clone)]
enum ProbeKind {
    Http {
        host: String,
        port: u16,
        path: String,
    },
    Tcp {
        host: String,
        port: u16,
    },
    /// exec probes cannot run here; taken as succeeding.
    Pass,
}

#[derive(Clone)]
struct ProbeSpec {
    kind: ProbeKind,
    timeout: Duration,
    failure_threshold: u32,
}

/// One pod's runner: owns its process and writes its status.
struct Run {
    shared: Arc<KubeletState>,
    pod: Pod,
    name: String,
    uid: String,
    node: NodeInfo,
    ip: String,
    info: Arc<Mutex<PodProcess>>,
    start_time: Time,
    restart_count: i32,
    /// The main container's state and lastState, as JSON ContainerState.
    state: Value,
    last_state: Value,
    running: bool,
    ready: bool,
    probe_ready: bool,
    paused: bool,
    phase: &'static str,
    /// Condition type -> (status, lastTransitionTime).
    transitions: HashMap<&'static str, (bool, Time)>,
}

/// Why a container cannot start yet: (waiting reason, message), retried every second.
type NotYet = (&'static str, String);

enum Next {
    /// Run the container again (restartPolicy, or a restart hook).
    Restart,
    /// Nothing left to run or report.
    Done,
}

impl Ctl {
    /// Answers a hook that needs a running container.
    fn refuse(self, why: &str) {
        match self {
            Ctl::Signal(_, ack)
            | Ctl::OomKill(ack)
            | Ctl::Restart(ack)
            | Ctl::PauseReadiness(_, ack) => {
                let _ = ack.send(Err(why.to_string()));
            }
            Ctl::Stop(ack) => {
                let _ = ack.send(Ok(()));
            }
            Ctl::Delete(_) | Ctl::Gone => {}
        }
    }
}

fn container_id(pid: Option<u32>) -> String {
    format!("wsload-test://{}", pid.unwrap_or(0))
}

impl Run {
    fn container(&self) -> Option<&Container> {
        self.pod.spec.as_ref()?.containers.first()
    }

    fn restart_policy(&self) -> &str {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref())
            .unwrap_or("Always")
    }

    fn condition(&mut self, type_: &'static str, status: bool) -> Value {
        let entry = self.transitions.entry(type_).or_insert((status, now()));
        if entry.0 != status {
            *entry = (status, now());
        }
        let mut c = json!({
            "type": type_,
            "status": if status { "True" } else { "False" },
            "lastTransitionTime": entry.1,
        });
        if !status && matches!(type_, "Ready" | "ContainersReady") {
            let reason = if matches!(self.phase, "Succeeded" | "Failed") {
                "PodCompleted"
            } else {
                "ContainersNotReady"
            };
            c["reason"] = json!(reason);
        }
        c
    }

    fn status(&mut self) -> Value {
        let pid = lock(&self.info).pid;
        let image = |c: &Container| c.image.clone().unwrap_or_default();
        let spec = self.pod.spec.clone().unwrap_or_default();
        let mut containers = Vec::new();
        for (i, c) in spec.containers.iter().enumerate() {
            containers.push(if i == 0 {
                json!({
                    "name": c.name, "image": image(c), "imageID": "", "containerID": container_id(pid),
                    "ready": self.ready, "started": self.running, "restartCount": self.restart_count,
                    "state": self.state, "lastState": self.last_state,
                })
            } else {
                json!({
                    "name": c.name, "image": image(c), "imageID": "", "ready": false,
                    "started": false, "restartCount": 0,
                    "state": {"waiting": {"reason": "NotSupported",
                        "message": "the test kubelet runs only a pod's first container"}},
                })
            });
        }
        let init: Vec<Value> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| {
                json!({
                    "name": c.name, "image": image(c), "imageID": "", "ready": true,
                    "started": false, "restartCount": 0, "containerID": container_id(None),
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                        "startedAt": self.start_time, "finishedAt": self.start_time}},
                })
            })
            .collect();
        let ready = self.ready;
        let conditions = vec![
            self.condition("PodScheduled", true),
            self.condition("Initialized", true),
            self.condition("ContainersReady", ready),
            self.condition("Ready", ready),
        ];
        json!({
            // A precondition: a newer pod of the same name must not get this one's status.
            "metadata": {"uid": self.uid},
            "status": {
                "phase": self.phase,
                "conditions": conditions,
                "hostIP": self.node.ip, "hostIPs": [{"ip": self.node.ip}],
                "podIP": self.ip, "podIPs": [{"ip": self.ip}],
                "startTime": self.start_time,
                "containerStatuses": containers,
                "initContainerStatuses": init,
            },
        })
    }

    async fn patch(&mut self) {
        let body = self.status();
        if let Err(e) = self
            .shared
            .pods()
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(body))
            .await
        {
            self.shared
                .log(format!("pod {}: status patch failed: {e}", self.name));
        }
    }

    /// Ready is the probe's verdict unless paused; patched only when it changes.
    async fn update_ready(&mut self) {
        let ready = self.running && self.probe_ready && !self.paused;
        if ready != self.ready {
            self.ready = ready;
            lock(&self.info).ready = ready;
            self.shared.log(format!("pod {} ready: {ready}", self.name));
            self.patch().await;
        }
    }

    async fn run(mut self, mut ctl: mpsc::UnboundedReceiver<Ctl>) {
        let launch = loop {
            match self.prepare().await {
                Ok(launch) => break launch,
                Err((reason, message)) => {
                    self.shared
                        .log(format!("pod {}: {reason}: {message}", self.name));
                    self.state = json!({"waiting": {"reason": reason, "message": message}});
                    self.patch().await;
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        msg = ctl.recv() => match msg {
                            None | Some(Ctl::Gone) => return,
                            Some(Ctl::Delete(_)) => {
                                final_delete(&self.shared.pods(), &self.name, &self.uid).await;
                                return;
                            }
                            Some(Ctl::Stop(ack)) => {
                                let _ = ack.send(Ok(()));
                                return;
                            }
                            Some(other) => other.refuse(&format!("container not started: {reason}: {message}")),
                        }
                    }
                }
            }
        };
        let mut deleting = None;
        let mut pending = Vec::new();
        while let Next::Restart = self
            .run_once(&launch, &mut ctl, &mut deleting, &mut pending)
            .await
        {}
        for ack in pending {
            let _ = ack.send(Ok(()));
        }
        if deleting.is_some() {
            return;
        }
        // Terminal: wait for the pod to go, refusing hooks.
        while let Some(msg) = ctl.recv().await {
            match msg {
                Ctl::Gone => return,
                Ctl::Delete(_) => {
                    final_delete(&self.shared.pods(), &self.name, &self.uid).await;
                    return;
                }
                other => other.refuse("the container has terminated"),
            }
        }
    }

    /// Runs the container once, until it exits; says what comes next.
    async fn run_once(
        &mut self,
        launch: &Launch,
        ctl: &mut mpsc::UnboundedReceiver<Ctl>,
        deleting: &mut Option<tokio::time::Instant>,
        pending: &mut Vec<Ack>,
    ) -> Next {
        let started_at = now();
        let mut child = match self.spawn(launch) {
            Ok(child) => child,
            Err(e) => {
                self.shared
                    .log(format!("pod {}: start failed: {e}", self.name));
                let terminated = json!({"terminated": {"exitCode": 128, "reason": "StartError",
                    "message": e, "startedAt": started_at, "finishedAt": now()}});
                return self.exited(terminated, 128, false, pending).await;
            }
        };
        let pid = child.id();
        {
            let mut info = lock(&self.info);
            info.pid = pid;
            info.restart_count = self.restart_count;
        }
        self.running = true;
        self.phase = "Running";
        self.state = json!({"running": {"startedAt": started_at}});
        self.probe_ready = launch.probe.is_none();
        self.ready = self.probe_ready && !self.paused;
        lock(&self.info).ready = self.ready;
        self.patch().await;
        // Restarts answer once the new process runs and the status says so.
        for ack in pending.drain(..) {
            let _ = ack.send(Ok(()));
        }

        let (probe_tx, mut probe_rx) = mpsc::channel(4);
        let probe = launch
            .probe
            .clone()
            .map(|p| tokio::spawn(probe_loop(p, probe_tx)));
        let mut failures = 0;
        let threshold = launch
            .probe
            .as_ref()
            .map_or(1, |p| p.failure_threshold.max(1));
        let (mut oom, mut forced_restart, mut quiet) = (false, false, false);
        let mut ctl_open = true;
        let signal = |sig: Signal| {
            if let Some(pid) = pid {
                let _ = killpg(Pid::from_raw(pid as i32), sig);
            }
        };
        let status = loop {
            tokio::select! {
                status = child.wait() => break status,
                Some(ok) = probe_rx.recv() => {
                    if ok {
                        failures = 0;
                        self.probe_ready = true;
                    } else {
                        failures += 1;
                        if failures >= threshold {
                            self.probe_ready = false;
                        }
                    }
                    self.update_ready().await;
                }
                _ = tokio::time::sleep_until(deleting.unwrap_or_else(tokio::time::Instant::now)), if deleting.is_some() => {
                    self.shared.log(format!("pod {}: grace period over, SIGKILL", self.name));
                    signal(Signal::SIGKILL);
                    *deleting = Some(tokio::time::Instant::now() + Duration::from_secs(3600));
                }
                msg = ctl.recv(), if ctl_open => match msg {
                    Some(Ctl::Signal(sig, ack)) => {
                        self.shared.log(format!("pod {}: hook: {sig}", self.name));
                        signal(sig);
                        let _ = ack.send(Ok(()));
                    }
                    Some(Ctl::OomKill(ack)) => {
                        self.shared.log(format!("pod {}: hook: OOM kill", self.name));
                        oom = true;
                        signal(Signal::SIGKILL);
                        pending.push(ack);
                    }
                    Some(Ctl::Restart(ack)) => {
                        self.shared.log(format!("pod {}: hook: restart", self.name));
                        forced_restart = true;
                        signal(Signal::SIGKILL);
                        pending.push(ack);
                    }
                    Some(Ctl::PauseReadiness(paused, ack)) => {
                        self.paused = paused;
                        self.update_ready().await;
                        let _ = ack.send(Ok(()));
                    }
                    Some(Ctl::Delete(grace)) => {
                        let at = tokio::time::Instant::now() + grace;
                        if deleting.is_none() {
                            self.shared.log(format!("pod {}: deleted, SIGTERM (grace {grace:?})", self.name));
                            signal(Signal::SIGTERM);
                        }
                        *deleting = Some(deleting.map_or(at, |d| d.min(at)));
                    }
                    Some(Ctl::Stop(ack)) => {
                        quiet = true;
                        signal(Signal::SIGKILL);
                        pending.push(ack);
                    }
                    Some(Ctl::Gone) | None => {
                        ctl_open = false;
                        quiet = true;
                        signal(Signal::SIGKILL);
                    }
                },
            }
        };
        if let Some(probe) = probe {
            probe.abort();
        }
        let (code, how) = match &status {
            Ok(s) => match (s.code(), s.signal()) {
                (Some(code), _) => (code, format!("exit code {code}")),
                (None, Some(sig)) => (128 + sig, format!("signal {sig}")),
                (None, None) => (128, format!("{s}")),
            },
            Err(e) => (128, format!("wait failed: {e}")),
        };
        let code = if oom { 137 } else { code };
        self.running = false;
        {
            let mut info = lock(&self.info);
            info.pid = None;
            info.last_exit_code = Some(code);
            info.ready = false;
        }
        self.shared
            .log(format!("pod {}: process {pid:?} ended: {how}", self.name));
        if quiet {
            return Next::Done;
        }
        let reason = match (oom, code) {
            (true, _) => "OOMKilled",
            (false, 0) => "Completed",
            _ => "Error",
        };
        let terminated = json!({"terminated": {"exitCode": code, "reason": reason,
            "startedAt": started_at, "finishedAt": now(), "containerID": container_id(pid)}});
        if deleting.is_some() {
            self.state = terminated;
            self.ready = false;
            self.patch().await;
            final_delete(&self.shared.pods(), &self.name, &self.uid).await;
            return Next::Done;
        }
        if forced_restart {
            self.restart_count += 1;
            self.last_state = terminated;
            return Next::Restart;
        }
        self.exited(terminated, code, oom, pending).await
    }

    /// The container ended on its own (or failed to start): restartPolicy decides.
    async fn exited(
        &mut self,
        terminated: Value,
        code: i32,
        oom: bool,
        pending: &mut Vec<Ack>,
    ) -> Next {
        let restart = match self.restart_policy() {
            "Never" => false,
            "OnFailure" => code != 0,
            _ => true,
        };
        if restart {
            // A kubelet backs off from 10 s up to 5 min; tests want the restart, not the wait,
            // but a container that keeps failing must not spin.
            let delay = Duration::from_millis((100u64 << self.restart_count.clamp(0, 4)).min(1000));
            self.last_state = terminated;
            self.state = json!({"waiting": {"reason": "CrashLoopBackOff",
                "message": format!("back-off {delay:?} restarting failed container")}});
            self.ready = false;
            self.patch().await;
            tokio::time::sleep(delay).await;
            self.restart_count += 1;
            return Next::Restart;
        }
        self.state = terminated;
        self.ready = false;
        self.phase = if code == 0 && !oom {
            "Succeeded"
        } else {
            "Failed"
        };
        self.patch().await;
        for ack in pending.drain(..) {
            let _ = ack.send(Ok(()));
        }
        Next::Done
    }

    fn spawn(&self, launch: &Launch) -> Result<tokio::process::Child, String> {
        let path = pod_log_path(&self.shared.namespace, &self.name);
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| format!("open {}: {e}", path.display()))?;
        let shown_env: Vec<String> = launch
            .env
            .iter()
            .map(|(k, v)| {
                let v: String = v.chars().take(80).collect();
                format!("{k}={v:?}")
            })
            .collect();
        let _ = writeln!(
            log,
            "==== {} run {} on {} ({}): {} {:?}\n==== env: {}",
            Timestamp::now(),
            self.restart_count,
            self.node.name,
            self.ip,
            launch.program.display(),
            launch.args,
            shown_env.join(" ")
        );
        let mut cmd = if has_setpriv() {
            // The pod dies with the test process however it ends, even by SIGKILL.
            let mut cmd = tokio::process::Command::new("setpriv");
            cmd.args(["--pdeathsig", "KILL", "--"]).arg(&launch.program);
            cmd
        } else {
            tokio::process::Command::new(&launch.program)
        };
        cmd.args(&launch.args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOSTNAME", &self.name)
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .current_dir(scratch_dir())
            // A group of its own: signals reach whatever it spawned, and a Ctrl-C aimed at
            // the test does not look like a crash of the pod.
            .process_group(0)
            .kill_on_drop(true);
        cmd.spawn()
            .map_err(|e| format!("spawn {}: {e}", launch.program.display()))
    }

    async fn prepare(&self) -> Result<Launch, NotYet> {
        let c = self
            .container()
            .ok_or(("CreateContainerConfigError", "pod has no containers".into()))?
            .clone();
        let mut env = self.resolve_env(&c).await?;
        self.shared.route_services(&mut env).await?;
        let mounts = self.mount_secrets(&c).await?;
        for (_, value) in env.iter_mut() {
            for (in_container, on_host) in &mounts {
                if let Some(rest) = value.strip_prefix(in_container.as_str())
                    && (rest.is_empty() || rest.starts_with('/'))
                {
                    *value = format!("{}{rest}", on_host.display());
                }
            }
        }
        let lookup: HashMap<&str, &str> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let expand_all = |v: &Option<Vec<String>>| -> Vec<String> {
            v.iter()
                .flatten()
                .map(|s| expand(s, &|name| lookup.get(name).map(|v| v.to_string())))
                .collect()
        };
        let command = expand_all(&c.command);
        let args = expand_all(&c.args);
        let image = c.image.clone().unwrap_or_default();
        let (program, args) = match command.split_first() {
            Some((program, rest)) => {
                let program = self.command_program(program).await?;
                (program, rest.iter().cloned().chain(args).collect())
            }
            None => (self.image_entrypoint(&image).await?, args),
        };
        let probe = c
            .readiness_probe
            .as_ref()
            .map(|p| self.probe_spec(p, &c))
            .transpose()?;
        Ok(Launch {
            program,
            args,
            env,
            probe,
        })
    }

    /// Writes the keys of each Secret volume the container mounts into a directory of this
    /// pod's; each mount's path in the container and that directory.
    async fn mount_secrets(&self, c: &Container) -> Result<Vec<(String, PathBuf)>, NotYet> {
        use std::os::unix::fs::PermissionsExt as _;
        let volumes = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        let mut mounts = Vec::new();
        for m in c.volume_mounts.iter().flatten() {
            let Some(source) = volumes
                .iter()
                .find(|v| v.name == m.name)
                .and_then(|v| v.secret.as_ref())
            else {
                continue;
            };
            let name = source.secret_name.clone().unwrap_or_default();
            let data = match self.secret(&name).await? {
                Some(data) => data,
                None if source.optional == Some(true) => BTreeMap::new(),
                None => return Err(not_found("secret", &name)),
            };
            let dir = scratch_dir()
                .join("volumes")
                .join(&self.shared.namespace)
                .join(&self.name)
                .join(&m.name);
            let failed =
                |e: std::io::Error| ("CreateContainerConfigError", format!("mount {name}: {e}"));
            std::fs::create_dir_all(&dir).map_err(failed)?;
            let mode = source.default_mode.map_or(0o644, |m| m as u32);
            for (key, value) in data {
                let file = dir.join(&key);
                // Written afresh at each start: a mode from an earlier run must not stop it.
                let _ = std::fs::remove_file(&file);
                std::fs::write(&file, value).map_err(failed)?;
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode))
                    .map_err(failed)?;
            }
            mounts.push((m.mount_path.clone(), dir));
        }
        Ok(mounts)
    }

    async fn image_entrypoint(&self, image: &str) -> Result<PathBuf, NotYet> {
        let repo = image_repository(image);
        let matches = |key: &str| repo == key || repo.ends_with(&format!("/{key}"));
        if let Some((_, path)) = self.shared.opts.images.iter().find(|(k, _)| matches(k)) {
            return Ok(path.clone());
        }
        let binary = if matches("wsload/loadgen") {
            "wsload"
        } else if matches("wsload/server") {
            "wsload-server"
        } else {
            return Err((
                "ErrImagePull",
                format!(
                    "test kubelet: no binary for image {image:?} (KubeletOpts::images maps more)"
                ),
            ));
        };
        Ok(built_binaries()
            .await
            .map_err(|e| ("ErrImagePull", e))?
            .join(binary))
    }

    /// A container `command`: our binaries by name (as the images' PATH has them), anything
    /// else from the host.
    async fn command_program(&self, program: &str) -> Result<PathBuf, NotYet> {
        let base = Path::new(program)
            .file_name()
            .map(|b| b.to_string_lossy().into_owned())
            .unwrap_or_default();
        if base == "wsload" || base == "wsload-server" {
            return Ok(built_binaries()
                .await
                .map_err(|e| ("ErrImagePull", e))?
                .join(base));
        }
        if program.contains('/') {
            if Path::new(program).is_file() {
                return Ok(program.into());
            }
        } else if let Some(found) = std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(program))
                .find(|p| p.is_file())
        }) {
            return Ok(found);
        }
        Err((
            "RunContainerError",
            format!("exec: {program:?}: executable file not found in $PATH"),
        ))
    }

    fn probe_spec(&self, p: &Probe, c: &Container) -> Result<ProbeSpec, NotYet> {
        let port = |port: &IntOrString| -> Result<u16, NotYet> {
            let n = match port {
                IntOrString::Int(n) => Some(*n),
                IntOrString::String(name) => c
                    .ports
                    .iter()
                    .flatten()
                    .find(|p| p.name.as_deref() == Some(name.as_str()))
                    .map(|p| p.container_port)
                    .or_else(|| name.parse().ok()),
            };
            n.and_then(|n| u16::try_from(n).ok()).ok_or((
                "CreateContainerConfigError",
                format!("readiness probe port {port:?} not found"),
            ))
        };
        let kind = if let Some(h) = &p.http_get {
            ProbeKind::Http {
                host: h.host.clone().unwrap_or_else(|| self.ip.clone()),
                port: port(&h.port)?,
                path: h.path.clone().unwrap_or_else(|| "/".into()),
            }
        } else if let Some(t) = &p.tcp_socket {
            ProbeKind::Tcp {
                host: t.host.clone().unwrap_or_else(|| self.ip.clone()),
                port: port(&t.port)?,
            }
        } else {
            ProbeKind::Pass
        };
        Ok(ProbeSpec {
            kind,
            timeout: Duration::from_secs(p.timeout_seconds.unwrap_or(1).max(1) as u64),
            failure_threshold: p.failure_threshold.unwrap_or(3).max(1) as u32,
        })
    }

    /// The container's environment, in order, as a kubelet builds it: envFrom, then env, each
    /// value expanded against what came before.
    async fn resolve_env(&self, c: &Container) -> Result<Vec<(String, String)>, NotYet> {
        let mut vars: Vec<(String, String)> = Vec::new();
        let set = |vars: &mut Vec<(String, String)>, k: String, v: String| {
            vars.retain(|(name, _)| *name != k);
            vars.push((k, v));
        };
        for from in c.env_from.iter().flatten() {
            let prefix = from.prefix.clone().unwrap_or_default();
            if let Some(r) = &from.config_map_ref {
                match self.config_map(&r.name).await? {
                    Some(data) => data
                        .into_iter()
                        .for_each(|(k, v)| set(&mut vars, format!("{prefix}{k}"), v)),
                    None if r.optional == Some(true) => {}
                    None => return Err(not_found("configmap", &r.name)),
                }
            }
            if let Some(r) = &from.secret_ref {
                match self.secret(&r.name).await? {
                    Some(data) => data
                        .into_iter()
                        .for_each(|(k, v)| set(&mut vars, format!("{prefix}{k}"), v)),
                    None if r.optional == Some(true) => {}
                    None => return Err(not_found("secret", &r.name)),
                }
            }
        }
        for e in c.env.iter().flatten() {
            let value = if let Some(from) = &e.value_from {
                if let Some(f) = &from.field_ref {
                    Some(self.field(&f.field_path)?)
                } else if let Some(r) = &from.secret_key_ref {
                    let data = self.secret(&r.name).await?;
                    let value = data.as_ref().and_then(|d| d.get(&r.key).cloned());
                    match (data, value) {
                        (_, Some(v)) => Some(v),
                        _ if r.optional == Some(true) => None,
                        (None, _) => return Err(not_found("secret", &r.name)),
                        (Some(_), None) => {
                            return Err((
                                "CreateContainerConfigError",
                                format!(
                                    "couldn't find key {} in Secret {}/{}",
                                    r.key, self.shared.namespace, r.name
                                ),
                            ));
                        }
                    }
                } else if let Some(r) = &from.config_map_key_ref {
                    let data = self.config_map(&r.name).await?;
                    let value = data.as_ref().and_then(|d| d.get(&r.key).cloned());
                    match (data, value) {
                        (_, Some(v)) => Some(v),
                        _ if r.optional == Some(true) => None,
                        (None, _) => return Err(not_found("configmap", &r.name)),
                        (Some(_), None) => {
                            return Err((
                                "CreateContainerConfigError",
                                format!(
                                    "couldn't find key {} in ConfigMap {}/{}",
                                    r.key, self.shared.namespace, r.name
                                ),
                            ));
                        }
                    }
                } else {
                    // resourceFieldRef: no resources are modelled.
                    Some(String::new())
                }
            } else {
                let lookup: HashMap<&str, &str> =
                    vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                Some(expand(e.value.as_deref().unwrap_or_default(), &|name| {
                    lookup.get(name).map(|v| v.to_string())
                }))
            };
            if let Some(v) = value {
                set(&mut vars, e.name.clone(), v);
            }
        }
        Ok(vars)
    }

    fn field(&self, path: &str) -> Result<String, NotYet> {
        let meta = &self.pod.metadata;
        let keyed = |prefix: &str, map: &Option<BTreeMap<String, String>>| {
            let key = path
                .strip_prefix(prefix)?
                .strip_prefix("['")?
                .strip_suffix("']")?;
            Some(
                map.as_ref()
                    .and_then(|m| m.get(key).cloned())
                    .unwrap_or_default(),
            )
        };
        let v = match path {
            "metadata.name" => self.name.clone(),
            "metadata.namespace" => self.shared.namespace.clone(),
            "metadata.uid" => self.uid.clone(),
            "spec.nodeName" => self.node.name.clone(),
            "spec.serviceAccountName" => self
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
                .unwrap_or_else(|| "default".into()),
            "status.podIP" | "status.podIPs" => self.ip.clone(),
            "status.hostIP" | "status.hostIPs" => self.node.ip.clone(),
            _ => keyed("metadata.labels", &meta.labels)
                .or_else(|| keyed("metadata.annotations", &meta.annotations))
                .ok_or((
                    "CreateContainerConfigError",
                    format!("unsupported fieldRef {path:?}"),
                ))?,
        };
        Ok(v)
    }

    async fn secret(&self, name: &str) -> Result<Option<BTreeMap<String, String>>, NotYet> {
        let api: Api<Secret> = Api::namespaced(self.shared.client.clone(), &self.shared.namespace);
        let secret = api.get_opt(name).await.map_err(|e| {
            (
                "CreateContainerConfigError",
                format!("get secret {name}: {e}"),
            )
        })?;
        Ok(secret.map(|s| {
            let mut data: BTreeMap<String, String> = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                .collect();
            // stringData is write-only in a real cluster; a test may still find it handy.
            data.extend(s.string_data.unwrap_or_default());
            data
        }))
    }

    async fn config_map(&self, name: &str) -> Result<Option<BTreeMap<String, String>>, NotYet> {
        let api: Api<ConfigMap> =
            Api::namespaced(self.shared.client.clone(), &self.shared.namespace);
        let cm = api.get_opt(name).await.map_err(|e| {
            (
                "CreateContainerConfigError",
                format!("get configmap {name}: {e}"),
            )
        })?;
        Ok(cm.map(|c| {
            let mut data = c.data.unwrap_or_default();
            data.extend(
                c.binary_data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned())),
            );
            data
        }))
    }
}

fn not_found(kind: &str, name: &str) -> NotYet {
    (
        "CreateContainerConfigError",
        format!("{kind} \"{name}\" not found"),
    )
}

/// Kubernetes' `$(VAR)` expansion: a defined variable is replaced, an undefined reference is
/// kept as written, `$$` is a literal `$`.
fn expand(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match lookup(name) {
                Some(v) => out.push_str(&v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// `registry/wsload/loadgen:tag@sha256:...` -> `registry/wsload/loadgen`.
fn image_repository(image: &str) -> &str {
    let image = image.split('@').next().unwrap_or(image);
    match image.rfind(':') {
        Some(colon) if !image[colon..].contains('/') => &image[..colon],
        _ => image,
    }
}

fn has_setpriv() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join("setpriv").is_file()))
    })
}

async fn probe_loop(p: ProbeSpec, results: mpsc::Sender<bool>) {
    loop {
        let ok = tokio::time::timeout(p.timeout, probe_once(&p.kind))
            .await
            .unwrap_or(false);
        if results.send(ok).await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn probe_once(kind: &ProbeKind) -> bool {
    match kind {
        ProbeKind::Pass => true,
        ProbeKind::Tcp { host, port } => tokio::net::TcpStream::connect((host.as_str(), *port))
            .await
            .is_ok(),
        ProbeKind::Http { host, port, path } => http_get_status(host, *port, path)
            .await
            .is_some_and(|code| (200..400).contains(&code)),
    }
}

/// Status code of `GET path`, as the kubelet's prober asks it.
pub async fn http_get_status(host: &str, port: u16, path: &str) -> Option<u16> {
    let mut s = tokio::net::TcpStream::connect((host, port)).await.ok()?;
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.33\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    while !buf.windows(2).any(|w| w == b"\r\n") {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&buf);
    line.split_whitespace().nth(1)?.parse().ok()
}

// --- binaries ----------------------------------------------------------------------------------

/// The directory holding `wsload` and `wsload-server`: `WSLOAD_TEST_BIN_DIR` if set, else this
/// test binary's own profile directory (target/debug for `cargo test`), brought up to date with
/// `cargo build -p wsload -p wsload-server` once per test process (a second or so when fresh)
/// so that pods never run a stale build.
pub async fn built_binaries() -> Result<PathBuf, String> {
    static BINS: OnceCell<Result<PathBuf, String>> = OnceCell::const_new();
    BINS.get_or_init(|| async {
        tokio::task::spawn_blocking(build_binaries)
            .await
            .unwrap_or_else(|e| Err(format!("building the pod binaries panicked: {e}")))
    })
    .await
    .clone()
}

fn build_binaries() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("WSLOAD_TEST_BIN_DIR").filter(|d| !d.is_empty()) {
        return Ok(dir.into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    // target/<profile>/deps/<test binary>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| format!("unexpected test binary path {}", exe.display()))?;
    let target_dir = profile_dir
        .parent()
        .ok_or_else(|| format!("unexpected test binary path {}", exe.display()))?;
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(other) => other,
        None => return Err(format!("unexpected test binary path {}", exe.display())),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let started = Instant::now();
    let out = std::process::Command::new(&cargo)
        .args([
            "build",
            "-p",
            "wsload",
            "-p",
            "wsload-server",
            "--profile",
            profile,
        ])
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(workspace_root())
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo build -p wsload -p wsload-server --profile {profile} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    eprintln!(
        "wsload test harness: pod binaries up to date in {} ({:.1?})",
        profile_dir.display(),
        started.elapsed()
    );
    Ok(profile_dir.to_path_buf())
}
