//! The test kubelet's kube-proxy: a Service's cluster IP reaches its ready endpoints.
//!
//! A cluster routes a Service's cluster IP (10.96.0.0/16 here) through kube-proxy's rules on
//! every node; pods of the test kubelet are processes sharing the host's network, and nothing
//! here may program the kernel, so it goes the userspace way instead: each Service of the
//! namespace gets a loopback address of its own, a listener on every Service port there
//! forwards each connection to the next ready pod the selector matches (round robin, the
//! `targetPort` resolved by name or number), and a pod started after the Service sees
//! `<clusterIP>:<port>` in its env (and args made of it) as `<proxy address>:<port>` (what the kernel would
//! do to its packets). Services created after a pod started are not seen by that pod.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams};
use tokio::task::JoinHandle;

/// How often a proxy re-reads its Service's endpoints.
const REFRESH: Duration = Duration::from_millis(200);

/// One Service's proxy: its address and the tasks serving it (aborted on drop).
pub struct ServiceProxy {
    pub cluster_ip: String,
    pub ip: String,
    pub ports: Vec<u16>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for ServiceProxy {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl ServiceProxy {
    /// `text` with every `<clusterIP>:<port>` of this Service pointed at the proxy.
    pub fn rewrite(&self, text: &str) -> String {
        self.ports.iter().fold(text.to_string(), |t, port| {
            t.replace(
                &format!("{}:{port}", self.cluster_ip),
                &format!("{}:{port}", self.ip),
            )
        })
    }
}

/// A ready pod the Service selects: its address and its named container ports.
#[derive(Clone, Debug)]
struct Endpoint {
    ip: String,
    named: HashMap<String, u16>,
}

/// Starts serving `svc` on loopback address `ip`; `None` for a Service with no cluster IP
/// or no selector (nothing to route).
pub fn start(
    client: kube::Client,
    namespace: &str,
    svc: &Service,
    ip: String,
) -> Option<ServiceProxy> {
    let spec = svc.spec.as_ref()?;
    let cluster_ip = spec
        .cluster_ip
        .clone()
        .filter(|c| !c.is_empty() && c != "None")?;
    let selector = spec.selector.clone().filter(|s| !s.is_empty())?;
    let endpoints: Arc<Mutex<Vec<Endpoint>>> = Arc::default();
    let mut tasks = vec![tokio::spawn(refresh(
        Api::namespaced(client, namespace),
        selector,
        endpoints.clone(),
    ))];
    let mut ports = Vec::new();
    for p in spec.ports.iter().flatten() {
        let Ok(port) = u16::try_from(p.port) else {
            continue;
        };
        let listener = std::net::TcpListener::bind((ip.as_str(), port))
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .and_then(tokio::net::TcpListener::from_std)
            .unwrap_or_else(|e| panic!("test kube-proxy: bind {ip}:{port}: {e}"));
        let target = p.target_port.clone().unwrap_or(IntOrString::Int(p.port));
        tasks.push(tokio::spawn(forward(listener, target, endpoints.clone())));
        ports.push(port);
    }
    Some(ServiceProxy {
        cluster_ip,
        ip,
        ports,
        tasks,
    })
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn refresh(
    pods: Api<Pod>,
    selector: BTreeMap<String, String>,
    endpoints: Arc<Mutex<Vec<Endpoint>>>,
) {
    let labels = selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    loop {
        if let Ok(list) = pods.list(&ListParams::default().labels(&labels)).await {
            let mut ready: Vec<Endpoint> = list
                .items
                .iter()
                .filter(|p| ready(p) && p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| {
                    let ip = p.status.as_ref()?.pod_ip.clone()?;
                    let named = p
                        .spec
                        .iter()
                        .flat_map(|s| &s.containers)
                        .flat_map(|c| c.ports.iter().flatten())
                        .filter_map(|cp| {
                            Some((cp.name.clone()?, u16::try_from(cp.container_port).ok()?))
                        })
                        .collect();
                    Some(Endpoint { ip, named })
                })
                .collect();
            ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            *endpoints.lock().unwrap_or_else(|e| e.into_inner()) = ready;
        }
        tokio::time::sleep(REFRESH).await;
    }
}

async fn forward(
    listener: tokio::net::TcpListener,
    target: IntOrString,
    endpoints: Arc<Mutex<Vec<Endpoint>>>,
) {
    let next = Arc::new(AtomicUsize::new(0));
    loop {
        let Ok((mut client, _)) = listener.accept().await else {
            continue;
        };
        let backend = {
            let eps = endpoints.lock().unwrap_or_else(|e| e.into_inner());
            (!eps.is_empty()).then(|| eps[next.fetch_add(1, Ordering::Relaxed) % eps.len()].clone())
        };
        let port = backend.as_ref().and_then(|b| match &target {
            IntOrString::Int(n) => u16::try_from(*n).ok(),
            IntOrString::String(name) => b.named.get(name).copied().or_else(|| name.parse().ok()),
        });
        // No ready endpoint: the connection is refused, as kube-proxy's REJECT rule does.
        let (Some(backend), Some(port)) = (backend, port) else {
            drop(client);
            continue;
        };
        tokio::spawn(async move {
            if let Ok(mut server) =
                tokio::net::TcpStream::connect((backend.ip.as_str(), port)).await
            {
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            }
        });
    }
}
