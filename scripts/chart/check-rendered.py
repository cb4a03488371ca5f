#!/usr/bin/env python3
"""Asserts what the chart renders, on the objects as the API server would store them.

usage: check-rendered.py CASE APPLIED.json DASHBOARDS_DIR APP_VERSION

APPLIED.json is `kubectl apply --dry-run=server -o json -f <rendered chart>` (a List), so the
checks see the server's view (defaults filled, YAML quirks resolved), with the standard
library alone. CASE names the values: `default` (values.yaml), `namespaced` and `full`
(charts/wsload/ci/<case>-values.yaml; the expectations below follow those files).
Every failure is listed, then the exit status is 1.
"""

import base64
import json
import os
import re
import sys

# No __pycache__ left in the work tree by the import below.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import common  # noqa: E402

RELEASE, NAMESPACE, WATCH = "wsload", "wsload-system", "wsload-tests"
# The release name contains the chart name, so objects are named after the release alone.
FULL = RELEASE

CHECKS = common.Checks()
check = CHECKS.check
failures = CHECKS.failures


def check_prometheus(case, by_kind, one, operator_labels):
    name = f"{FULL}-prometheus"
    mine = [o for objs in by_kind.values() for o in objs
            if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "prometheus"]
    if case == "default":
        check(not mine, f"{case}: Prometheus objects rendered although prometheus.install is off: "
              f"{sorted((o['kind'], o['metadata']['name']) for o in mine)}")
        return
    check(all(o["metadata"]["name"] == name for o in mine),
          f"{case}: Prometheus objects not named {name}: {sorted((o['kind'], o['metadata']['name']) for o in mine)}")
    one("ServiceAccount", name)

    # Pods, get list watch: all kubernetes_sd_configs role pod needs, in the namespaces it watches.
    pods_only = {("", "pods", v) for v in ("get", "list", "watch")}
    if case == "namespaced":
        roles = [o for o in by_kind.get("Role", []) if o["metadata"]["name"] == name]
        bindings = [o for o in by_kind.get("RoleBinding", []) if o["metadata"]["name"] == name]
        want_ns = {WATCH, NAMESPACE}
        check({r["metadata"].get("namespace") for r in roles} == want_ns and len(roles) == 2,
              f"{case}: Prometheus Roles in {[r['metadata'].get('namespace') for r in roles]}, expected {sorted(want_ns)}")
        check({b["metadata"].get("namespace") for b in bindings} == want_ns and len(bindings) == 2,
              f"{case}: Prometheus RoleBindings in {[b['metadata'].get('namespace') for b in bindings]}, expected {sorted(want_ns)}")
    else:
        roles = [one("ClusterRole", name)]
        bindings = [one("ClusterRoleBinding", name)]
    for r in roles:
        got = {(g, res, v) for rule in r.get("rules", []) for g in rule["apiGroups"] for res in rule["resources"]
               for v in rule["verbs"]}
        check(got == pods_only, f"{case}: Prometheus {r['kind']} in {r['metadata'].get('namespace')} grants {sorted(got)}, expected pods get/list/watch only")
    for b in bindings:
        check(b.get("subjects") == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
              and b.get("roleRef", {}).get("name") == name,
              f"{case}: Prometheus {b['kind']} binds {b.get('subjects')} to {b.get('roleRef')}")

    # prometheus.yml, as text: the standard library has no YAML parser (promtool, when built,
    # checks it for real in check-chart.sh).
    config = one("ConfigMap", name).get("data", {}).get("prometheus.yml", "")
    interval = "10s" if case == "full" else "5s"
    for want in ("kubernetes_sd_configs:", "- role: pod", f"scrape_interval: {interval}",
                 "__meta_kubernetes_pod_annotation_prometheus_io_scrape", "__meta_kubernetes_pod_annotation_prometheus_io_port",
                 "__meta_kubernetes_pod_annotation_prometheus_io_path", "regex: __meta_kubernetes_pod_label_(.+)",
                 "target_label: namespace", "target_label: pod"):
        check(want in config, f"{case}: prometheus.yml lacks {want!r}")
    if case == "namespaced":
        check(re.search(rf"namespaces:\n *names:\n *- {WATCH}\n *- {NAMESPACE}\n", config),
              f"{case}: prometheus.yml does not restrict discovery to {WATCH} and {NAMESPACE}:\n{config}")
    else:
        check("namespaces:" not in config, f"{case}: a cluster-wide install's Prometheus must discover every namespace")
    check("scrape_timeout: 8s" in config if case == "full" else "scrape_timeout" not in config, f"{case}: scrape_timeout in {config}")

    dep = one("Deployment", name)
    spec = dep.get("spec", {})
    tmpl = spec.get("template", {})
    pod = tmpl.get("spec", {})
    check(spec.get("replicas") == 1, f"{case}: Prometheus replicas {spec.get('replicas')}")
    check(pod.get("serviceAccountName") == name and pod.get("automountServiceAccountToken") is True,
          f"{case}: Prometheus pod account {pod.get('serviceAccountName')}, automount {pod.get('automountServiceAccountToken')}")
    check(tmpl.get("metadata", {}).get("annotations", {}).get("checksum/config"), f"{case}: no checksum/config on the Prometheus pod")
    c = (pod.get("containers") or [{}])[0]
    check(c.get("image") == "quay.io/prometheus/prometheus:v3.9.1", f"{case}: Prometheus image {c.get('image')}")
    args = c.get("args", [])
    want_args = ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
    if case == "full":
        want_args += ["--storage.tsdb.retention.time=2d", "--storage.tsdb.retention.size=1GB", "--query.max-samples=10000000"]
    else:
        want_args += ["--storage.tsdb.retention.time=24h"]
    check(all(a in args for a in want_args), f"{case}: Prometheus args {args}, expected {want_args} among them")
    check(not any(a.startswith("--storage.tsdb.retention.size") for a in args) or case == "full", f"{case}: retention size set: {args}")
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
    check(ports == {"http": 9090}, f"{case}: Prometheus container ports {ports}")
    ready = c.get("readinessProbe", {}).get("httpGet", {})
    check(ready.get("path") == "/-/ready" and ready.get("port") == "http", f"{case}: Prometheus readiness probe {ready}")
    sc, psc = c.get("securityContext", {}), pod.get("securityContext", {})
    for key, want in (("runAsNonRoot", True), ("runAsUser", 65534), ("readOnlyRootFilesystem", True),
                      ("allowPrivilegeEscalation", False)):
        check(sc.get(key) == want, f"{case}: Prometheus securityContext.{key} is {sc.get(key)}, expected {want}")
    check(sc.get("capabilities", {}).get("drop") == ["ALL"], f"{case}: Prometheus capabilities {sc.get('capabilities')}")
    check(psc.get("runAsNonRoot") is True and psc.get("runAsUser") == 65534
          and psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{case}: Prometheus pod securityContext {psc}")
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    check(mounts.get("/prometheus") == "data" and "emptyDir" in vols.get("data", {}), f"{case}: Prometheus data volume {mounts} {vols}")
    check(mounts.get("/etc/prometheus") == "config" and vols.get("config", {}).get("configMap", {}).get("name") == name,
          f"{case}: Prometheus config volume {mounts} {vols}")
    if case == "full":
        check(pod.get("nodeSelector") == {"pool": "servers"} and len(pod.get("tolerations", [])) == 1,
              f"{case}: Prometheus placement {pod.get('nodeSelector')} {pod.get('tolerations')}")

    svc = one("Service", name)
    ports = [(p.get("name"), p.get("port"), p.get("targetPort")) for p in svc.get("spec", {}).get("ports", [])]
    check(ports == [("http", 9090, "http")], f"{case}: Prometheus Service ports {ports}")
    sel = svc.get("spec", {}).get("selector", {})
    labels = tmpl.get("metadata", {}).get("labels", {})
    check(sel and all(labels.get(k) == v for k, v in sel.items()), f"{case}: Prometheus Service selector {sel} misses its pod")
    check(not all(operator_labels.get(k) == v for k, v in sel.items()), f"{case}: Prometheus Service selector {sel} also selects the operator")


# The labels the operator puts on its pods (operator/src/names.rs): the policies select by them.
SHARD_LABELS = {"wsload.dev/role": "shard", "app.kubernetes.io/managed-by": "wsload-operator"}
SERVER_LABELS = {"wsload.dev/role": "server", "app.kubernetes.io/managed-by": "wsload-operator"}
SHARD_PORT = 9464


def selects(match, labels):
    return bool(match) and all(labels.get(k) == v for k, v in match.items())


def check_network_policies(case, by_kind, operator_labels, prometheus_labels):
    """What each NetworkPolicy selects and lets in (charts/wsload/templates/networkpolicies.yaml)."""
    pols = by_kind.get("NetworkPolicy", [])
    want_ns = {NAMESPACE} if case == "default" else {NAMESPACE, WATCH}
    names = sorted((p["metadata"]["namespace"], p["metadata"]["name"]) for p in pols)
    want = sorted([(NAMESPACE, f"{FULL}-operator")] + [(ns, f"{FULL}-{k}") for ns in want_ns for k in ("shards", "server")])
    check(names == want, f"{case}: NetworkPolicies {names}, expected {want}")
    operator_peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
                     "podSelector": {"matchLabels": {k: operator_labels[k] for k in
                                                     ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")}}}
    check(selects(operator_peer["podSelector"]["matchLabels"], operator_labels), f"{case}: operator peer misses the operator pod")
    if case == "full":
        # Told of a Prometheus elsewhere (ci/full-values.yaml): it, not the chart's own.
        prom_peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                       "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]
    elif case == "namespaced":
        # The chart's own Prometheus (prometheus.install), by its pod labels.
        prom_peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
                       "podSelector": {"matchLabels": prometheus_labels}}]
        check(selects(prometheus_labels, prometheus_labels) and not selects(prometheus_labels, operator_labels),
              f"{case}: Prometheus peer labels {prometheus_labels} select the operator too")
    else:
        prom_peers = []
    for p in pols:
        spec, where = p.get("spec", {}), f"{case}: {p['metadata']['namespace']}/{p['metadata']['name']}"
        # Ingress only: egress (to targets, the API server, DNS) stays open.
        check(spec.get("policyTypes") == ["Ingress"], f"{where} policyTypes {spec.get('policyTypes')}")
        sel = spec.get("podSelector", {}).get("matchLabels", {})
        rules = [(sorted((q.get("port"), q.get("protocol")) for q in r.get("ports", [])), r.get("from")) for r in spec.get("ingress", [])]
        kind = p["metadata"]["name"].removeprefix(f"{FULL}-")
        if kind == "operator":
            check(selects(sel, operator_labels) and not selects(sel, prometheus_labels or {"x": "y"}), f"{where} selects {sel}")
            check(rules == [([(8080, "TCP")], prom_peers or None)], f"{where} lets in {rules}")
        elif kind == "shards":
            check(sel == SHARD_LABELS, f"{where} selects {sel}")
            # The control API and the metrics share the port: the operator and Prometheus only.
            check(rules == [([(SHARD_PORT, "TCP")], [operator_peer] + prom_peers)], f"{where} lets in {rules}")
        elif kind == "server":
            check(sel == SERVER_LABELS, f"{where} selects {sel}")
            shards_here = [{"podSelector": {"matchLabels": SHARD_LABELS}}]
            check(rules == [([("ws", "TCP")], shards_here),
                            ([("metrics", "TCP")], ([operator_peer] + prom_peers) if prom_peers else None)],
                  f"{where} lets in {rules}")


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    case, applied, dash_dir, app_version = sys.argv[1:]
    with open(applied) as f:
        doc = json.load(f)
    objs = doc["items"] if doc.get("kind") == "List" else [doc]
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)

    def one(kind, name=None):
        found = [o for o in by_kind.get(kind, []) if name is None or o["metadata"]["name"] == name]
        check(len(found) == 1, f"{case}: expected one {kind} {name or ''}, got {len(found)}")
        return found[0] if found else {}

    # --- the operator Deployment ---------------------------------------------------------
    dep = one("Deployment", FULL)
    pod = dep.get("spec", {}).get("template", {}).get("spec", {})
    containers = pod.get("containers", [])
    check(len(containers) == 1, f"{case}: operator pod has {len(containers)} containers")
    c = containers[0] if containers else {}
    env = {e["name"]: e for e in c.get("env", [])}
    val = lambda n: env.get(n, {}).get("value")  # noqa: E731
    check(c.get("image") == f"wsload/operator:{app_version}",
          f"{case}: operator image is {c.get('image')}, expected wsload/operator:{app_version}")
    check(c.get("args") == ["run"], f"{case}: operator args {c.get('args')}")
    for name, path in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")):
        got = env.get(name, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        check(got == path, f"{case}: {name} comes from {got}, expected the downward API {path}")
    check(val("WSLOAD_OPERATOR_METRICS_LISTEN") == "0.0.0.0:8080", f"{case}: metrics listen {val('WSLOAD_OPERATOR_METRICS_LISTEN')}")
    check(val("WSLOAD_OPERATOR_LEADER_ELECT") == "true", f"{case}: leader election {val('WSLOAD_OPERATOR_LEADER_ELECT')}")
    sc, psc = c.get("securityContext", {}), pod.get("securityContext", {})
    for key, want in (("runAsNonRoot", True), ("runAsUser", 65532), ("readOnlyRootFilesystem", True),
                      ("allowPrivilegeEscalation", False)):
        check(sc.get(key) == want, f"{case}: container securityContext.{key} is {sc.get(key)}, expected {want}")
    check(sc.get("capabilities", {}).get("drop") == ["ALL"], f"{case}: capabilities not dropped: {sc.get('capabilities')}")
    check(sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{case}: container seccompProfile {sc.get('seccompProfile')}")
    check(psc.get("runAsNonRoot") is True and psc.get("runAsUser") == 65532, f"{case}: pod securityContext {psc}")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = c.get(probe, {}).get("httpGet", {})
        check(get.get("path") == path and get.get("port") == "metrics", f"{case}: {probe} is {get}, expected {path} on port metrics")
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
    check(ports == {"metrics": 8080}, f"{case}: container ports {ports}")
    ann = dep.get("spec", {}).get("template", {}).get("metadata", {}).get("annotations", {})
    check(ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/port") == "8080"
          and ann.get("prometheus.io/path") == "/metrics", f"{case}: prometheus.io annotations {ann}")
    check(pod.get("serviceAccountName") == FULL, f"{case}: serviceAccountName {pod.get('serviceAccountName')}")

    svc = one("Service", f"{FULL}-metrics")
    check(svc.get("spec", {}).get("publishNotReadyAddresses") is True, f"{case}: metrics Service does not publish standbys")
    sel = svc.get("spec", {}).get("selector", {})
    tmpl_labels = dep.get("spec", {}).get("template", {}).get("metadata", {}).get("labels", {})
    check(sel and all(tmpl_labels.get(k) == v for k, v in sel.items()), f"{case}: metrics Service selector {sel} misses the pod")
    one("ServiceAccount", FULL)

    # --- the control key: a generated Secret, mounted as a file the operator's group reads --
    key = one("Secret", f"{FULL}-control-key")
    check(key.get("metadata", {}).get("namespace") == NAMESPACE, f"{case}: control key Secret in {key.get('metadata', {}).get('namespace')}")
    raw = base64.b64decode(key.get("data", {}).get("key", ""))
    check(len(raw) >= 32, f"{case}: control key of {len(raw)} bytes, expected at least 32")
    check(val("WSLOAD_OPERATOR_CONTROL_KEY_FILE") == "/var/run/wsload/operator/key",
          f"{case}: control key file {val('WSLOAD_OPERATOR_CONTROL_KEY_FILE')}")
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
    secret_vol = vols.get("control-key", {}).get("secret", {})
    check(secret_vol.get("secretName") == f"{FULL}-control-key" and secret_vol.get("defaultMode") == 0o440,
          f"{case}: control key volume {vols.get('control-key')}")
    km = mounts.get("/var/run/wsload/operator", {})
    check(km.get("name") == "control-key" and km.get("readOnly") is True, f"{case}: control key mount {km}")
    check(psc.get("fsGroup") == 65532, f"{case}: pod fsGroup {psc.get('fsGroup')}: the key file would be unreadable")
    check(all(not str(e.get("value", "")).endswith(raw.decode(errors="replace")) for e in c.get("env", [])),
          f"{case}: the control key is in the operator's env")

    # --- RBAC: Secrets created only (never read), the leader Lease only in the release namespace
    roles = by_kind.get("ClusterRole", []) + by_kind.get("Role", [])
    for r in roles:
        for rule in r.get("rules", []):
            res = rule.get("resources", [])
            check("*" not in res and "*" not in rule.get("verbs", []), f"{case}: {r['kind']} {r['metadata']['name']} grants {rule}")
            if "secrets" in res:
                check(res == ["secrets"] and rule.get("verbs") == ["create"] and rule.get("apiGroups") == [""],
                      f"{case}: {r['kind']} {r['metadata']['name']} grants more than create on Secrets: {rule}")
    lease = one("Role", f"{FULL}-leader-election")
    check(lease.get("metadata", {}).get("namespace") == NAMESPACE, f"{case}: leader-election Role in {lease.get('metadata', {}).get('namespace')}")
    lease_rules = {(tuple(r.get("resourceNames", [])), tuple(r["verbs"])) for r in lease.get("rules", [])}
    check(lease_rules == {((), ("create",)), (("wsload-operator",), ("get", "update"))},
          f"{case}: leader-election rules {lease_rules}")

    if case == "namespaced":
        check("ClusterRole" not in by_kind and "ClusterRoleBinding" not in by_kind, f"{case}: renders cluster-wide RBAC")
        role = one("Role", FULL)
        check(role.get("metadata", {}).get("namespace") == WATCH, f"{case}: operator Role in {role.get('metadata', {}).get('namespace')}, expected {WATCH}")
        rb = one("RoleBinding", FULL)
        check(rb.get("metadata", {}).get("namespace") == WATCH and rb.get("subjects", [{}])[0].get("namespace") == NAMESPACE,
              f"{case}: RoleBinding {rb.get('metadata')} subjects {rb.get('subjects')}")
        check(val("WSLOAD_OPERATOR_WATCH_NAMESPACE") == WATCH, f"{case}: WATCH_NAMESPACE {val('WSLOAD_OPERATOR_WATCH_NAMESPACE')}")
        rules = role.get("rules", [])
    else:
        check("WSLOAD_OPERATOR_WATCH_NAMESPACE" not in env, f"{case}: cluster-wide install sets WATCH_NAMESPACE")
        rules = one("ClusterRole", FULL).get("rules", [])
        crb = one("ClusterRoleBinding", FULL)
        check(crb.get("subjects") == [{"kind": "ServiceAccount", "name": FULL, "namespace": NAMESPACE}],
              f"{case}: ClusterRoleBinding subjects {crb.get('subjects')}")
    got = {(g, res, v) for r in rules for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}
    want = set()
    for group, resource, verbs in (
        ("wsload.dev", "loadtests", "get list watch delete"),
        ("wsload.dev", "loadtests/status", "get patch update"),
        ("", "pods", "get list watch create patch delete"),
        ("", "services", "get create patch delete"),
        ("", "configmaps", "get create patch"),
        ("", "secrets", "create"),
        ("", "events", "create patch"),
        ("events.k8s.io", "events", "create patch"),
    ):
        want |= {(group, resource, v) for v in verbs.split()}
    if case != "namespaced":
        # A namespace's Pod Security level, read before a test creates anything.
        want.add(("", "namespaces", "get"))
        # The installed LoadTest CRD, and no other.
        want.add(("apiextensions.k8s.io", "customresourcedefinitions", "get"))
        crd_rules = [r for r in rules if "customresourcedefinitions" in r["resources"]]
        check([r.get("resourceNames") for r in crd_rules] == [["loadtests.wsload.dev"]],
              f"{case}: the CRD rule must name loadtests.wsload.dev only: {crd_rules}")
    check(got == want, f"{case}: operator rules differ from the least-privilege set: extra {sorted(got - want)}, missing {sorted(want - got)}")

    # Deployments rolled (restart: {deployment}) only where rbac.rollDeployments names, and
    # only read and patched there.
    rolls = [o for o in by_kind.get("Role", []) if o["metadata"]["name"] == f"{FULL}-roll-deployments"]
    if case == "full":
        check([r["metadata"].get("namespace") for r in rolls] == [WATCH],
              f"{case}: roll-deployments Roles {[r['metadata'] for r in rolls]}, expected one in {WATCH}")
        for r in rolls:
            check(r.get("rules") == [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "patch"]}],
                  f"{case}: roll-deployments rules {r.get('rules')}")
        binds = [o for o in by_kind.get("RoleBinding", []) if o["metadata"]["name"] == f"{FULL}-roll-deployments"]
        check(len(binds) == 1 and binds[0].get("subjects") == [{"kind": "ServiceAccount", "name": FULL, "namespace": NAMESPACE}],
              f"{case}: roll-deployments RoleBinding {binds}")
    else:
        check(rolls == [], f"{case}: Deployments may be rolled without rbac.rollDeployments: {rolls}")

    # --- install-wide defaults --------------------------------------------------------------
    if case == "full":
        images = ("registry.test:5000/wsload/loadgen:0.1.0-check", f"registry.test:5000/wsload/server:{app_version}")
        lg = json.loads(val("WSLOAD_OPERATOR_LOADGEN_PLACEMENT") or "null")
        sv = json.loads(val("WSLOAD_OPERATOR_SERVER_PLACEMENT") or "null")
        check(lg == {"nodeSelector": {"pool": "loadgen"}, "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "loadgen", "effect": "NoSchedule"}]},
            f"{case}: loadgen placement JSON {lg}")
        check(sv is not None and set(sv) == {"nodeSelector", "affinity"} and sv["nodeSelector"] == {"pool": "servers"},
              f"{case}: server placement JSON {sv} (an empty part must be left out)")
        check(dep.get("spec", {}).get("replicas") == 2, f"{case}: replicas {dep.get('spec', {}).get('replicas')}")
        check(val("WSLOAD_OPERATOR_POLL") == "500ms" and val("WSLOAD_OPERATOR_LOG_FORMAT") == "json"
              and val("RUST_LOG") == "debug,kube=info" and val("WSLOAD_CHART_CHECK") == "1", f"{case}: operator settings {env}")
        check(pod.get("imagePullSecrets") == [{"name": "regcred"}], f"{case}: imagePullSecrets {pod.get('imagePullSecrets')}")
    else:
        images = (f"wsload/loadgen:{app_version}", f"wsload/server:{app_version}")
        check("WSLOAD_OPERATOR_LOADGEN_PLACEMENT" not in env and "WSLOAD_OPERATOR_SERVER_PLACEMENT" not in env,
              f"{case}: empty placements must not be passed")
        check(val("WSLOAD_OPERATOR_POLL") == "2s" and val("WSLOAD_OPERATOR_LOG_FORMAT") == "text", f"{case}: operator settings {env}")
    check((val("WSLOAD_OPERATOR_LOADGEN_IMAGE"), val("WSLOAD_OPERATOR_SERVER_IMAGE")) == images,
          f"{case}: default images {(val('WSLOAD_OPERATOR_LOADGEN_IMAGE'), val('WSLOAD_OPERATOR_SERVER_IMAGE'))}, expected {images}")

    # --- monitors ---------------------------------------------------------------------------
    monitors = by_kind.get("ServiceMonitor", []) + by_kind.get("PodMonitor", [])
    if case == "default":
        check(not monitors, f"{case}: monitors rendered although off by default")
    else:
        op = one("ServiceMonitor", f"{FULL}-operator")
        servers = one("ServiceMonitor", f"{FULL}-servers")
        shards = one("PodMonitor", f"{FULL}-shards")
        for m in (op, servers, shards):
            check(m.get("metadata", {}).get("labels", {}).get("release") == "kube-prometheus-stack",
                  f"{case}: {m.get('metadata', {}).get('name')} lacks the release label")
        check(op.get("spec", {}).get("selector", {}).get("matchLabels") == sel, f"{case}: operator ServiceMonitor selects {op.get('spec', {}).get('selector')}")
        check(servers.get("spec", {}).get("selector", {}).get("matchLabels") == {"wsload.dev/role": "server"}, f"{case}: servers selector")
        check(shards.get("spec", {}).get("selector", {}).get("matchLabels") == {"wsload.dev/role": "shard"}, f"{case}: shards selector")
        check(servers.get("spec", {}).get("endpoints", [{}])[0].get("port") == "metrics", f"{case}: servers port")
        check(shards.get("spec", {}).get("podMetricsEndpoints", [{}])[0].get("port") == "metrics", f"{case}: shards port")
        want_ns = {"matchNames": [WATCH]} if case == "namespaced" else {"any": True}
        for m in (servers, shards):
            check(m.get("spec", {}).get("namespaceSelector") == want_ns,
                  f"{case}: {m['metadata']['name']} namespaceSelector {m.get('spec', {}).get('namespaceSelector')}, expected {want_ns}")
        if case == "full":
            ep = servers["spec"]["endpoints"][0]
            check(ep.get("interval") == "5s" and ep.get("scrapeTimeout") == "4s" and len(ep.get("relabelings", [])) == 1
                  and len(ep.get("metricRelabelings", [])) == 1, f"{case}: servers endpoint {ep}")

    # --- the chart's Prometheus (prometheus.install: on in full and namespaced) --------------
    check_prometheus(case, by_kind, one, tmpl_labels)

    # --- NetworkPolicies ----------------------------------------------------------------------
    prom_dep = [d for d in by_kind.get("Deployment", []) if d["metadata"]["name"] == f"{FULL}-prometheus"]
    prom_labels = prom_dep[0]["spec"]["template"]["metadata"]["labels"] if prom_dep else {}
    check_network_policies(case, by_kind, tmpl_labels,
                           {k: v for k, v in prom_labels.items() if k in ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")})

    # --- dashboards: the ConfigMaps carry the dashboards/ files unchanged -------------------
    sources = sorted(f for f in os.listdir(dash_dir) if f.endswith(".json"))
    check(sources, f"no dashboards in {dash_dir}")
    cms = {}
    for cm in by_kind.get("ConfigMap", []):
        if cm["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "dashboards":
            for key, text in cm.get("data", {}).items():
                cms[key] = (cm, text)
    check(sorted(cms) == sources, f"{case}: dashboard ConfigMaps hold {sorted(cms)}, dashboards/ has {sources}")
    want_ns = "monitoring" if case == "full" else NAMESPACE
    folder = "Load testing" if case == "full" else "wsload"
    for key, (cm, text) in cms.items():
        with open(os.path.join(dash_dir, key)) as f:
            source = json.load(f)
        try:
            same = json.loads(text) == source
        except ValueError as e:
            same = False
            failures.append(f"{case}: {cm['metadata']['name']} {key} is not JSON: {e}")
        check(same, f"{case}: {cm['metadata']['name']} {key} differs from dashboards/{key}")
        md = cm["metadata"]
        check(md.get("labels", {}).get("grafana_dashboard") == "1", f"{case}: {md['name']} lacks grafana_dashboard=1")
        check(md.get("annotations", {}).get("grafana_folder") == folder, f"{case}: {md['name']} folder {md.get('annotations')}")
        check(md.get("namespace") == want_ns, f"{case}: {md['name']} in namespace {md.get('namespace')}, expected {want_ns}")

    if failures:
        for f in failures:
            print(f"check-rendered: {f}", file=sys.stderr)
        sys.exit(1)
    print(f"check-rendered: {case}: {len(objs)} objects as expected")


if __name__ == "__main__":
    main()
