//! Reading a pod's status the way the phase machine needs it: is it scheduled, ready, gone,
//! and if it ended, why (exit code, OOM kill, eviction).

use k8s_openapi::api::core::v1::Pod;

/// A pod's state, not an error: the texts it carries are the scheduler's and the kubelet's own
/// words, shown to users as they are (a shard's reason, `status.message`), so they stay text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodHealth {
    /// Not placed on a node yet; the scheduler's message when it has one.
    Unscheduled(String),
    /// Placed, not ready: pulling, starting, or failing its readiness probe.
    Starting(String),
    Ready {
        ip: String,
    },
    /// Will never run again: exited, killed, evicted, or being deleted.
    Ended {
        reason: String,
    },
}

impl PodHealth {
    pub fn describe(&self) -> String {
        match self {
            PodHealth::Unscheduled(m) if m.is_empty() => "not scheduled yet".into(),
            PodHealth::Unscheduled(m) => format!("unschedulable: {m}"),
            PodHealth::Starting(m) => m.clone(),
            PodHealth::Ready { ip } => format!("ready at {ip}"),
            PodHealth::Ended { reason } => reason.clone(),
        }
    }
}

pub fn ip(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .pod_ip
        .clone()
        .filter(|s| !s.is_empty())
}

pub fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).sum())
        .unwrap_or(0)
}

pub fn health(pod: &Pod) -> PodHealth {
    if pod.metadata.deletion_timestamp.is_some() {
        return PodHealth::Ended {
            reason: "pod is being deleted".into(),
        };
    }
    let Some(status) = pod.status.as_ref() else {
        return PodHealth::Unscheduled(String::new());
    };
    let phase = status.phase.as_deref().unwrap_or("Pending");
    // A terminated main container says most: exit code and reason (OOMKilled, Error).
    let terminated = status
        .container_statuses
        .iter()
        .flatten()
        .find_map(|c| c.state.as_ref()?.terminated.as_ref().map(|t| (c, t)));
    if let Some((c, t)) = terminated {
        let reason = t.reason.clone().unwrap_or_else(|| "Terminated".into());
        let mut text = format!("container {} {reason} (exit code {})", c.name, t.exit_code);
        if let Some(m) = t.message.as_deref().filter(|m| !m.is_empty()) {
            text.push_str(&format!(": {}", m.trim()));
        }
        return PodHealth::Ended { reason: text };
    }
    if phase == "Failed" || phase == "Succeeded" {
        let reason = status.reason.clone().unwrap_or_else(|| phase.to_string());
        let message = status.message.clone().unwrap_or_default();
        return PodHealth::Ended {
            reason: format!("pod {reason} {message}").trim().to_string(),
        };
    }
    let condition = |t: &str| status.conditions.iter().flatten().find(|c| c.type_ == t);
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_none()
    {
        let msg = condition("PodScheduled")
            .filter(|c| c.status == "False")
            .and_then(|c| c.message.clone())
            .unwrap_or_default();
        return PodHealth::Unscheduled(msg);
    }
    let ready = condition("Ready").is_some_and(|c| c.status == "True");
    match (ready, ip(pod)) {
        (true, Some(ip)) => PodHealth::Ready { ip },
        _ => {
            let waiting = status
                .container_statuses
                .iter()
                .flatten()
                .find_map(|c| c.state.as_ref()?.waiting.as_ref())
                .map(|w| {
                    format!(
                        "{} {}",
                        w.reason.as_deref().unwrap_or("waiting"),
                        w.message.as_deref().unwrap_or("")
                    )
                    .trim()
                    .to_string()
                });
            PodHealth::Starting(waiting.unwrap_or_else(|| format!("{phase}, not ready")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("pod")
    }

    #[test]
    fn health_reads_scheduling_readiness_and_endings() {
        let unscheduled = pod(
            json!({"metadata": {"name": "p"}, "spec": {"containers": []},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/3 nodes are available"}]}}),
        );
        assert_eq!(
            health(&unscheduled).describe(),
            "unschedulable: 0/3 nodes are available"
        );
        let ready = pod(
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n", "containers": []},
            "status": {"phase": "Running", "podIP": "10.0.0.2",
            "conditions": [{"type": "Ready", "status": "True"}]}}),
        );
        assert_eq!(
            health(&ready),
            PodHealth::Ready {
                ip: "10.0.0.2".into()
            }
        );
        let pulling = pod(
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n", "containers": []},
            "status": {"phase": "Pending", "containerStatuses": [{"name": "c", "image": "i", "imageID": "",
            "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ErrImagePull", "message": "no registry"}}}]}}),
        );
        assert_eq!(health(&pulling).describe(), "ErrImagePull no registry");
        let oom = pod(
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n", "containers": []},
            "status": {"phase": "Failed", "containerStatuses": [{"name": "loadgen", "image": "i", "imageID": "",
            "ready": false, "restartCount": 0, "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]}}),
        );
        assert_eq!(
            health(&oom).describe(),
            "container loadgen OOMKilled (exit code 137)"
        );
    }
}
