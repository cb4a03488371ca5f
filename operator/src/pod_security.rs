//! The Pod Security Standards (kubernetes.io/docs/concepts/security/pod-security-standards),
//! as the API server's PodSecurity admission applies them to a namespace labelled
//! `pod-security.kubernetes.io/enforce`: which rules a pod breaks at a level. The operator
//! judges the pods it would create against the namespace's level before creating any, so a
//! test the namespace refuses fails at once saying why, rather than waiting out its start
//! deadline on pods the API server rejects one by one.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, SecurityContext};

/// The namespace label PodSecurity admission enforces.
pub const LABEL_ENFORCE: &str = "pod-security.kubernetes.io/enforce";

/// The levels, from the most permissive; each refuses everything the one before refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    /// The level a namespace's `enforce` label names. No label, or a value admission would
    /// not accept, is taken as privileged: the cluster's own default is not visible from
    /// here (the API server then decides, and a refused pod shows in the shard's status).
    pub fn from_label(value: Option<&str>) -> Level {
        match value {
            Some("restricted") => Level::Restricted,
            Some("baseline") => Level::Baseline,
            _ => Level::Privileged,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// The sysctls baseline allows ("Sysctls" rule): namespaced ones isolated from other pods.
/// The list grows with Kubernetes releases; this is the one of 1.32+ (tcp_rmem and tcp_wmem
/// arrived in 1.32, the keepalive and fin_timeout ones in 1.29, ip_local_reserved_ports in 1.27).
/// scripts/lib/check-kind.py reads this list (keep the form `pub const SAFE_SYSCTLS: [&str; N]`)
/// and compares it with the kubelet's pkg/kubelet/sysctl/safe_sysctls.go of the version built.
pub const SAFE_SYSCTLS: [&str; 12] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

pub fn is_safe_sysctl(name: &str) -> bool {
    SAFE_SYSCTLS.contains(&name)
}

/// Capabilities baseline lets a container add ("Capabilities" rule).
const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Volume types restricted allows ("Volume Types" rule).
const RESTRICTED_VOLUMES: &str =
    "configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected, secret";

/// One rule of the standard a pod breaks, named as the standard names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: &'static str,
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.rule, self.detail)
    }
}

/// Every rule of `level` that `pod` breaks; empty when the namespace admits it.
pub fn violations(pod: &Pod, level: Level) -> Vec<Violation> {
    let Some(spec) = pod.spec.as_ref() else {
        return vec![];
    };
    let mut out = Vec::new();
    if level >= Level::Baseline {
        baseline(spec, &mut out);
    }
    if level >= Level::Restricted {
        restricted(spec, &mut out);
    }
    out
}

/// Every container of the pod: init and regular ones are judged alike.
fn containers(spec: &PodSpec) -> Vec<(&str, Option<&SecurityContext>, &Container)> {
    let plain = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    // Ephemeral containers come through their own subresource, never from the operator.
    plain
        .map(|c| (c.name.as_str(), c.security_context.as_ref(), c))
        .collect()
}

fn push(out: &mut Vec<Violation>, rule: &'static str, detail: impl Into<String>) {
    out.push(Violation {
        rule,
        detail: detail.into(),
    });
}

fn baseline(spec: &PodSpec, out: &mut Vec<Violation>) {
    let psc = spec.security_context.as_ref();
    // Host Namespaces.
    for (field, on) in [
        ("hostNetwork", spec.host_network),
        ("hostPID", spec.host_pid),
        ("hostIPC", spec.host_ipc),
    ] {
        if on == Some(true) {
            push(out, "Host Namespaces", format!("spec.{field} is true"));
        }
    }
    // HostPath Volumes.
    for v in spec.volumes.iter().flatten() {
        if v.host_path.is_some() {
            push(out, "HostPath Volumes", format!("volume {}", v.name));
        }
    }
    // Sysctls.
    for s in psc.and_then(|p| p.sysctls.as_ref()).into_iter().flatten() {
        if !is_safe_sysctl(&s.name) {
            push(out, "Sysctls", format!("{} is not in the safe set", s.name));
        }
    }
    // Seccomp (baseline: not Unconfined), SELinux and AppArmor at pod level.
    let pod_seccomp = psc.and_then(|p| p.seccomp_profile.as_ref());
    if pod_seccomp.is_some_and(|s| s.type_ == "Unconfined") {
        push(out, "Seccomp", "pod seccompProfile Unconfined");
    }
    if psc
        .and_then(|p| p.app_armor_profile.as_ref())
        .is_some_and(|a| a.type_ == "Unconfined")
    {
        push(out, "AppArmor", "pod appArmorProfile Unconfined");
    }
    if psc
        .and_then(|p| p.se_linux_options.as_ref())
        .is_some_and(|o| o.user.is_some() || o.role.is_some())
    {
        push(out, "SELinux", "pod seLinuxOptions sets a user or role");
    }
    if psc
        .and_then(|p| p.windows_options.as_ref())
        .and_then(|w| w.host_process)
        == Some(true)
    {
        push(out, "HostProcess", "pod windowsOptions.hostProcess");
    }
    for (name, sc, c) in containers(spec) {
        baseline_container(name, sc, c, out);
    }
}

fn baseline_container(
    name: &str,
    sc: Option<&SecurityContext>,
    c: &Container,
    out: &mut Vec<Violation>,
) {
    // Host Ports.
    for p in c.ports.iter().flatten() {
        if p.host_port.is_some_and(|h| h != 0) {
            push(out, "Host Ports", format!("container {name} hostPort"));
        }
    }
    let Some(sc) = sc else { return };
    // Privileged Containers.
    if sc.privileged == Some(true) {
        push(
            out,
            "Privileged Containers",
            format!("container {name} is privileged"),
        );
    }
    // Capabilities (baseline: only the default set added).
    for cap in sc
        .capabilities
        .as_ref()
        .and_then(|c| c.add.as_ref())
        .into_iter()
        .flatten()
    {
        if !BASELINE_CAPABILITIES.contains(&cap.as_str()) {
            push(out, "Capabilities", format!("container {name} adds {cap}"));
        }
    }
    // /proc Mount Type.
    if sc.proc_mount.as_deref().is_some_and(|m| m != "Default") {
        push(out, "/proc Mount Type", format!("container {name}"));
    }
    if sc
        .seccomp_profile
        .as_ref()
        .is_some_and(|s| s.type_ == "Unconfined")
    {
        push(out, "Seccomp", format!("container {name} Unconfined"));
    }
    if sc
        .app_armor_profile
        .as_ref()
        .is_some_and(|a| a.type_ == "Unconfined")
    {
        push(out, "AppArmor", format!("container {name} Unconfined"));
    }
    if sc
        .se_linux_options
        .as_ref()
        .is_some_and(|o| o.user.is_some() || o.role.is_some())
    {
        push(
            out,
            "SELinux",
            format!("container {name} sets a user or role"),
        );
    }
    if sc.windows_options.as_ref().and_then(|w| w.host_process) == Some(true) {
        push(out, "HostProcess", format!("container {name}"));
    }
}

fn restricted(spec: &PodSpec, out: &mut Vec<Violation>) {
    let psc = spec.security_context.as_ref();
    // Volume Types.
    for v in spec.volumes.iter().flatten() {
        let allowed = v.config_map.is_some()
            || v.csi.is_some()
            || v.downward_api.is_some()
            || v.empty_dir.is_some()
            || v.ephemeral.is_some()
            || v.persistent_volume_claim.is_some()
            || v.projected.is_some()
            || v.secret.is_some();
        if !allowed {
            push(
                out,
                "Volume Types",
                format!("volume {} is none of {RESTRICTED_VOLUMES}", v.name),
            );
        }
    }
    let pod_non_root = psc.and_then(|p| p.run_as_non_root);
    let pod_user = psc.and_then(|p| p.run_as_user);
    if pod_user == Some(0) {
        push(out, "Running as Non-root user", "pod runAsUser 0");
    }
    let confined = |t: &str| t == "RuntimeDefault" || t == "Localhost";
    let pod_seccomp = psc
        .and_then(|p| p.seccomp_profile.as_ref())
        .map(|s| s.type_.as_str());
    for (name, sc, _) in containers(spec) {
        // Privilege Escalation.
        if sc.and_then(|s| s.allow_privilege_escalation) != Some(false) {
            push(
                out,
                "Privilege Escalation",
                format!("container {name} does not set allowPrivilegeEscalation: false"),
            );
        }
        // Running as Non-root: set true on the container, or on the pod and not false here.
        let non_root = sc.and_then(|s| s.run_as_non_root).or(pod_non_root);
        if non_root != Some(true) {
            push(
                out,
                "Running as Non-root",
                format!("container {name} runAsNonRoot is not true"),
            );
        }
        // Running as Non-root user.
        if sc.and_then(|s| s.run_as_user) == Some(0) {
            push(
                out,
                "Running as Non-root user",
                format!("container {name} runAsUser 0"),
            );
        }
        // Seccomp (restricted: RuntimeDefault or Localhost, on the pod or every container).
        let seccomp = sc
            .and_then(|s| s.seccomp_profile.as_ref())
            .map(|s| s.type_.as_str())
            .or(pod_seccomp);
        if !seccomp.is_some_and(confined) {
            push(
                out,
                "Seccomp",
                format!("container {name} has no RuntimeDefault or Localhost seccompProfile"),
            );
        }
        // Capabilities (restricted: drop ALL, add at most NET_BIND_SERVICE).
        let caps = sc.and_then(|s| s.capabilities.as_ref());
        let drops_all = caps
            .and_then(|c| c.drop.as_ref())
            .is_some_and(|d| d.iter().any(|c| c == "ALL"));
        if !drops_all {
            push(
                out,
                "Capabilities",
                format!("container {name} does not drop ALL"),
            );
        }
        for cap in caps.and_then(|c| c.add.as_ref()).into_iter().flatten() {
            if cap != "NET_BIND_SERVICE" {
                push(out, "Capabilities", format!("container {name} adds {cap}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Capabilities, ContainerPort, HostPathVolumeSource, PodSecurityContext, SeccompProfile,
        Sysctl, Volume,
    };

    fn pod(psc: PodSecurityContext, sc: SecurityContext) -> Pod {
        Pod {
            spec: Some(PodSpec {
                security_context: Some(psc),
                containers: vec![Container {
                    name: "c".into(),
                    security_context: Some(sc),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn compliant() -> (PodSecurityContext, SecurityContext) {
        (
            PodSecurityContext {
                run_as_non_root: Some(true),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    localhost_profile: None,
                }),
                ..Default::default()
            },
            SecurityContext {
                allow_privilege_escalation: Some(false),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".into()]),
                    add: None,
                }),
                ..Default::default()
            },
        )
    }

    fn rules(p: &Pod, level: Level) -> Vec<&'static str> {
        violations(p, level).into_iter().map(|v| v.rule).collect()
    }

    #[test]
    fn a_compliant_pod_passes_every_level() {
        let (psc, sc) = compliant();
        let p = pod(psc, sc);
        for level in [Level::Privileged, Level::Baseline, Level::Restricted] {
            assert_eq!(rules(&p, level), Vec::<&str>::new(), "{level:?}");
        }
    }

    /// The checker can fail: each rule it names is caught on a pod that breaks it, at the
    /// level that has it and not below.
    #[test]
    fn each_rule_is_caught_at_its_level() {
        type Break = fn(&mut PodSecurityContext, &mut SecurityContext, &mut PodSpec);
        let cases: [(&str, Level, Break); 12] = [
            ("Privileged Containers", Level::Baseline, |_, sc, _| {
                sc.privileged = Some(true)
            }),
            ("Sysctls", Level::Baseline, |psc, _, _| {
                psc.sysctls = Some(vec![Sysctl {
                    name: "net.core.somaxconn".into(),
                    value: "1".into(),
                }])
            }),
            ("Host Namespaces", Level::Baseline, |_, _, s| {
                s.host_network = Some(true)
            }),
            ("HostPath Volumes", Level::Baseline, |_, _, s| {
                s.volumes = Some(vec![Volume {
                    name: "h".into(),
                    host_path: Some(HostPathVolumeSource {
                        path: "/".into(),
                        type_: None,
                    }),
                    ..Default::default()
                }])
            }),
            ("Host Ports", Level::Baseline, |_, _, s| {
                s.containers[0].ports = Some(vec![ContainerPort {
                    container_port: 80,
                    host_port: Some(80),
                    ..Default::default()
                }])
            }),
            ("Capabilities", Level::Baseline, |_, sc, _| {
                sc.capabilities = Some(Capabilities {
                    drop: Some(vec!["ALL".into()]),
                    add: Some(vec!["NET_ADMIN".into()]),
                })
            }),
            ("Seccomp", Level::Baseline, |psc, _, _| {
                psc.seccomp_profile = Some(SeccompProfile {
                    type_: "Unconfined".into(),
                    localhost_profile: None,
                })
            }),
            ("Privilege Escalation", Level::Restricted, |_, sc, _| {
                sc.allow_privilege_escalation = None
            }),
            ("Running as Non-root", Level::Restricted, |psc, _, _| {
                psc.run_as_non_root = None
            }),
            ("Running as Non-root user", Level::Restricted, |_, sc, _| {
                sc.run_as_user = Some(0)
            }),
            ("Seccomp", Level::Restricted, |psc, _, _| {
                psc.seccomp_profile = None
            }),
            ("Capabilities", Level::Restricted, |_, sc, _| {
                sc.capabilities = None
            }),
        ];
        for (rule, level, breaks) in cases {
            let (mut psc, mut sc) = compliant();
            let mut spec = PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    ..Default::default()
                }],
                ..Default::default()
            };
            breaks(&mut psc, &mut sc, &mut spec);
            spec.security_context = Some(psc);
            spec.containers[0].security_context = Some(sc);
            let p = Pod {
                spec: Some(spec),
                ..Default::default()
            };
            assert!(rules(&p, level).contains(&rule), "{rule} at {level:?}");
            assert!(rules(&p, Level::Privileged).is_empty(), "{rule}");
            if level == Level::Restricted {
                assert!(!rules(&p, Level::Baseline).contains(&rule), "{rule}");
            }
        }
    }

    #[test]
    fn levels_come_from_the_label() {
        assert_eq!(Level::from_label(Some("restricted")), Level::Restricted);
        assert_eq!(Level::from_label(Some("baseline")), Level::Baseline);
        assert_eq!(Level::from_label(Some("privileged")), Level::Privileged);
        assert_eq!(Level::from_label(None), Level::Privileged);
    }
}
