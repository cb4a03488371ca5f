//! Before anything is created: whether the namespace's Pod Security level admits the pods the
//! test needs. A refused test fails at once with `PodSecurityRefused`, saying what the level
//! refuses and what to ask for instead; otherwise the API server would refuse each pod and the
//! test would wait out its start deadline for pods that never appear.
//!
//! And whether the installed CRD declares every field this operator writes. One left over from
//! an older chart (`helm upgrade` never upgrades CRDs) has the API server refuse every status
//! write that carries a newer field ("field not declared in schema"): the first cell's measure
//! instant could never be recorded, and the test would stall until its deadline. Such a test
//! fails at once with `CrdOutdated`, naming the fields and the command that fixes it. Where
//! the CRD cannot be read, the first refused write stops the test the same way (mod.rs).

use super::reason::Reason;
use super::view::View;
use crate::Result;
use crate::builders;
use crate::pod_security::{self, LABEL_ENFORCE, Level, Violation};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::Api;
use wsload_spec::LoadTestResource;
use wsload_spec::status::Phase;

impl View<'_> {
    /// `true` when the namespace refuses the test, which is then Failed with nothing created.
    pub(super) async fn refused_by_pod_security(&mut self) -> Result<bool> {
        if !self.ctx.config.read_cluster_objects {
            return Ok(false);
        }
        let ns = self.lt.namespace().unwrap_or_default();
        let Some(level) = namespace_level(&self.ctx.client, &ns).await? else {
            return Ok(false);
        };
        let Some(message) = refusal(self.lt, &ns, level) else {
            return Ok(false);
        };
        self.refuse(Reason::PodSecurityRefused, message);
        Ok(true)
    }

    /// `true` when the installed CRD lacks fields this operator writes; the test is then
    /// Failed with nothing created. Read at each admission, so that applying the new CRD
    /// fixes the next test without restarting the operator.
    pub(super) async fn refused_by_outdated_crd(&mut self) -> Result<bool> {
        if !self.ctx.config.read_cluster_objects {
            return Ok(false);
        }
        let Some(installed) = installed_crd(&self.ctx.client).await? else {
            return Ok(false);
        };
        let missing = crate::crd::missing_fields(&installed);
        if missing.is_empty() {
            return Ok(false);
        }
        let message = outdated_crd(&missing, "nothing was created");
        tracing::error!(missing = missing.len(), "{message}");
        self.refuse(Reason::CrdOutdated, message);
        Ok(true)
    }

    fn refuse(&mut self, reason: Reason, message: String) {
        self.mark_failed(reason, message.clone());
        self.enter(Phase::Failed, message);
        self.st.completion_time = Some(Time(self.now));
    }
}

/// What a test that an outdated CRD stops is told: the fields it lacks, the fix, and `what`
/// became of the test.
pub(super) fn outdated_crd(missing: &[String], what: &str) -> String {
    format!(
        "the installed LoadTest CRD ({}) is older than this operator: it lacks {}, so the API \
         server refuses the operator's records of it; apply this version's CRD, then \
         create the test again: kubectl apply --server-side -f charts/wsload/crds/ (helm \
         upgrade never upgrades a chart's CRDs); {what}",
        crate::crd::NAME,
        crate::text::listed(missing, 10)
    )
}

/// The LoadTest CRD as the API server serves it; `None` when the operator may not read it
/// (RBAC that predates the rule): the check is then skipped.
async fn installed_crd(client: &kube::Client) -> Result<Option<CustomResourceDefinition>> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    match api.get(crate::crd::NAME).await {
        Ok(crd) => Ok(Some(crd)),
        Err(kube::Error::Api(e)) if e.code == 403 || e.code == 404 => {
            tracing::warn!(
                code = e.code,
                "cannot read the CRD {} (RBAC: get customresourcedefinitions); an older CRD \
                 will show only when a status write is refused",
                crate::crd::NAME
            );
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// The namespace's enforced level; `None` when the operator may not read namespaces (RBAC
/// that predates the rule): the API server still refuses what the level forbids.
async fn namespace_level(client: &kube::Client, ns: &str) -> Result<Option<Level>> {
    let api: Api<Namespace> = Api::all(client.clone());
    match api.get(ns).await {
        Ok(n) => Ok(Some(Level::from_label(
            n.labels().get(LABEL_ENFORCE).map(String::as_str),
        ))),
        Err(kube::Error::Api(e)) if e.code == 403 => {
            tracing::warn!(
                namespace = ns,
                "may not read the namespace's Pod Security level (RBAC: get namespaces); \
                 pods it refuses will show only as shards not ready"
            );
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// What `level` refuses of the pods `lt` needs, as a status message; `None` when it admits
/// them all.
pub(super) fn refusal(lt: &LoadTestResource, ns: &str, level: Level) -> Option<String> {
    if level == Level::Privileged {
        return None;
    }
    let mut pods: Vec<Pod> = vec![builders::shard_pod(lt, 0, "", "")];
    if let Some(server) = &lt.spec.target.server {
        pods.extend((0..server.replicas.max(1)).map(|r| builders::server_pod(lt, server, r)));
    }
    let mut other: Vec<String> = Vec::new();
    let (mut tuning, mut sysctls) = (false, false);
    for pod in &pods {
        for v in pod_security::violations(pod, level) {
            if is_tuning(&v) {
                tuning = true;
            } else if v.rule == "Sysctls" {
                sysctls = true;
            } else {
                other.push(format!("pod {}: {v}", pod.name_any()));
            }
        }
    }
    let mut parts = Vec::new();
    if tuning {
        parts.push(tuning_advice(lt));
    }
    if sysctls {
        parts.push(sysctls_advice(lt));
    }
    if !other.is_empty() {
        parts.push(format!("the rules {}", other.join("; ")));
    }
    if parts.is_empty() {
        return None;
    }
    Some(format!(
        "namespace {ns} enforces Pod Security level \"{}\" ({LABEL_ENFORCE}), which refuses {}; \
         nothing was created",
        level.as_str(),
        parts.join("; and ")
    ))
}

/// The tuning init container's name, as builders.rs gives it.
const TUNING_CONTAINER: &str = "container tune ";

fn is_tuning(v: &Violation) -> bool {
    v.detail.starts_with(TUNING_CONTAINER)
}

/// Sysctls a pod may set through its security context: those of a network or IPC namespace.
/// The rest are node-wide, which no pod of a baseline or restricted namespace can change.
fn namespaced(name: &str) -> bool {
    name.starts_with("net.")
        || name.starts_with("kernel.shm")
        || name.starts_with("kernel.msg")
        || name == "kernel.sem"
        || name.starts_with("fs.mqueue.")
}

fn tuning_advice(lt: &LoadTestResource) -> String {
    let asked = lt
        .spec
        .loadgen
        .tuning
        .as_ref()
        .map(|t| t.sysctls.clone())
        .unwrap_or_default();
    let (safe, rest): (Vec<_>, Vec<_>) = asked
        .iter()
        .partition(|(k, _)| pod_security::is_safe_sysctl(k));
    let (unsafe_ns, node): (Vec<_>, Vec<_>) = rest.into_iter().partition(|(k, _)| namespaced(k));
    let pairs = |list: &[(&String, &String)]| {
        list.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let keys = |list: &[(&String, &String)]| {
        list.iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut advice = vec![];
    if !safe.is_empty() {
        advice.push(format!(
            "set {} as spec.loadgen.sysctls, which every level allows",
            pairs(&safe)
        ));
    }
    if !unsafe_ns.is_empty() {
        advice.push(format!(
            "set these as spec.loadgen.sysctls and allow them on the kubelet \
             (allowedUnsafeSysctls: [{}]) in a namespace at privileged level: {}",
            keys(&unsafe_ns),
            pairs(&unsafe_ns)
        ));
    }
    if !node.is_empty() {
        advice.push(format!(
            "{} are node-wide: set them on the nodes themselves, or run the test in a \
             namespace at privileged level",
            pairs(&node)
        ));
    }
    format!(
        "the privileged tuning init container (spec.loadgen.tuning); instead {}",
        advice.join("; ")
    )
}

fn sysctls_advice(lt: &LoadTestResource) -> String {
    let refused: Vec<&str> = lt
        .spec
        .loadgen
        .sysctls
        .keys()
        .map(String::as_str)
        .filter(|k| !pod_security::is_safe_sysctl(k))
        .collect();
    format!(
        "spec.loadgen.sysctls outside the safe set ({}); run the test in a namespace at \
         privileged level with them allowed on the kubelet (allowedUnsafeSysctls: [{}]), or \
         leave them out",
        refused.join(", "),
        refused.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::yaml_loadtest as lt;

    const PLAIN: &str = "  target: {server: {replicas: 2}}\n  scenario: throughput\n  connections: [10]\n  loadgen: {sysctls: {net.ipv4.ip_local_port_range: \"1024 65535\"}}\n";

    #[test]
    fn what_wsload_creates_passes_every_level() {
        for level in [Level::Privileged, Level::Baseline, Level::Restricted] {
            assert_eq!(refusal(&lt(PLAIN), "ns", level), None, "{level:?}");
        }
    }

    #[test]
    fn the_tuning_container_is_refused_by_baseline_and_restricted_with_what_to_do_instead() {
        let tuned = lt(
            "  target: {url: \"ws://x:80/\"}\n  scenario: throughput\n  connections: [10]\n  loadgen: {tuning: {sysctls: {net.core.somaxconn: \"65535\", net.ipv4.tcp_fin_timeout: \"10\", fs.nr_open: \"2000000\"}}}\n",
        );
        assert_eq!(refusal(&tuned, "load", Level::Privileged), None);
        for level in [Level::Baseline, Level::Restricted] {
            let m = refusal(&tuned, "load", level).expect("refused");
            for part in [
                "namespace load",
                &format!("\"{}\"", level.as_str()),
                "privileged tuning init container",
                "allowedUnsafeSysctls: [net.core.somaxconn]",
                "net.core.somaxconn=65535",
                "in a namespace at privileged level",
                "set net.ipv4.tcp_fin_timeout=10 as spec.loadgen.sysctls",
                "fs.nr_open=2000000 are node-wide",
                "nothing was created",
            ] {
                assert!(m.contains(part), "{level:?}: {part:?} not in {m}");
            }
        }
    }

    #[test]
    fn unsafe_pod_sysctls_are_refused_by_baseline_and_named() {
        let unsafe_ = lt(
            "  target: {url: \"ws://x:80/\"}\n  scenario: throughput\n  connections: [10]\n  loadgen: {sysctls: {net.core.somaxconn: \"4096\", net.ipv4.tcp_fin_timeout: \"10\"}}\n",
        );
        assert_eq!(refusal(&unsafe_, "load", Level::Privileged), None);
        let m = refusal(&unsafe_, "load", Level::Baseline).expect("refused");
        assert!(
            m.contains("spec.loadgen.sysctls outside the safe set (net.core.somaxconn)"),
            "{m}"
        );
        assert!(
            m.contains("allowedUnsafeSysctls: [net.core.somaxconn]"),
            "{m}"
        );
    }
}
