#!/usr/bin/env python3
"""Checks the kind path for users (examples/kind/, .github/workflows/kind-smoke.yml) against the
rest of the project; run by scripts/check-kind.sh, which prepares WORK:

  cluster.json     examples/kind/cluster.yaml as kind v0.30.0 loads, validates and renders it
                   into each node's kubeadm config, patches applied (scripts/lib/kind-render.go)
  chart.json       `helm template charts/wsload -f examples/kind/values.yaml`, as JSON
  workflow.json    the workflow, as JSON
  loadtests/*.json every YAML file under examples/, as JSON (the LoadTests among them count)

usage: check-kind.py ROOT WORK K8S_VERSION [SAFE_SYSCTLS_GO]

SAFE_SYSCTLS_GO is the kubelet's pkg/kubelet/sysctl/safe_sysctls.go of K8S_VERSION when the Go
module cache has it (scripts/k8s builds Kubernetes from there); the list in operator/src/pod_security.rs (SAFE_SYSCTLS, read from there) must equal it.
Every failure is listed, then the exit status is 1. Standard library only, like the other
checks. With --self-test, broken variants of the inputs must each be rejected first.
"""

import copy
import glob
import json
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# The kubelet's safe sysctls (pkg/kubelet/sysctl/safe_sysctls.go): a pod may set these without
# allowedUnsafeSysctls. Defined once, for the operator's Pod Security check; read from there.
SAFE_SYSCTLS_SOURCE = "operator/src/pod_security.rs"
SAFE_SYSCTLS_CONST = re.compile(r"pub const SAFE_SYSCTLS: \[&str; (\d+)\] = \[(.*?)\];", re.S)


def parse_safe_sysctls_rs(text):
    m = SAFE_SYSCTLS_CONST.search(text)
    if not m:
        raise SystemExit("check-kind: no `pub const SAFE_SYSCTLS` in %s: update this reader with it" % SAFE_SYSCTLS_SOURCE)
    names = re.findall(r'"([^"]+)"', m.group(2))
    if len(names) != int(m.group(1)) or len(set(names)) != len(names):
        raise SystemExit("check-kind: read %d names from SAFE_SYSCTLS in %s, which declares %s"
                         % (len(names), SAFE_SYSCTLS_SOURCE, m.group(1)))
    return set(names)


# Where the project names sysctls for the shard pods in prose: the spec's doc comments (which
# become the CRD's descriptions) and the two reference pages. Any net.* name there that the
# kubelet does not already allow must be allowed by the kind cluster, so that a user can put
# it in `spec.loadgen.sysctls` (the pod's securityContext) instead of the privileged tuning
# init container.
PROSE_SOURCES = ["crates/wsload-spec/src/cluster.rs", "docs/loadtest.md", "docs/operator.md"]
NET_SYSCTL = re.compile(r"\bnet\.[a-z0-9_]+(?:\.[a-z0-9_]+)+")
# The kubelet's sysctl pattern syntax: dotted segments, optionally ending in `*`.
SYSCTL_PATTERN = re.compile(r"^[a-z0-9]([-_a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-_a-z0-9]*[a-z0-9])?)*(\.\*|\*)?$")
NODE_IMAGE = re.compile(r"^kindest/node:(v1\.(\d+)\.\d+)@sha256:[0-9a-f]{64}$")
SHA_PIN = re.compile(r"^[^@]+@[0-9a-f]{40}$")
# The smoke LoadTest scripts/e2e/smoke.sh applies; its shard count sizes the load-generator pool.
SMOKE_LOADTEST = "examples/smoke.yaml"
WORKFLOW = ".github/workflows/kind-smoke.yml"
SMOKE_SCRIPT = "examples/kind/smoke.sh"


def read(root, rel):
    with open(os.path.join(root, rel)) as f:
        return f.read()


def shell_var(text, name):
    m = re.search(r"^%s=\"?\$?\{?[A-Z_]*:?-?([^\"}\s]+)" % re.escape(name), text, re.M)
    return m.group(1) if m else None


def parse_safe_sysctls_go(path):
    with open(path) as f:
        return set(re.findall(r'name:\s*"([^"]+)"', f.read()))


def covers(pattern, name):
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return pattern == name


def kubeadm_doc(node, kind):
    for d in node["kubeadm"]:
        if d.get("kind") == kind:
            return d
    return {}


def selector_matches(selector, labels):
    return all((labels or {}).get(k) == v for k, v in selector.items())


class Inputs:
    def __init__(self, root, work, k8s_version, safe_go):
        self.root = root
        self.k8s_version = k8s_version
        self.cluster = common.load_json(os.path.join(work, "cluster.json"))
        self.chart = common.load_json(os.path.join(work, "chart.json"))
        self.workflow = common.load_json(os.path.join(work, "workflow.json"))[0]
        self.examples = {}
        for p in sorted(glob.glob(os.path.join(work, "loadtests", "*.json"))):
            with open(p + ".path") as f:
                rel = f.read().strip()
            self.examples[rel] = common.load_json(p)
        self.safe = parse_safe_sysctls_rs(read(root, SAFE_SYSCTLS_SOURCE))
        self.safe_go = parse_safe_sysctls_go(safe_go) if safe_go else None
        self.prose = {rel: read(root, rel) for rel in PROSE_SOURCES}
        self.smoke_script = read(root, SMOKE_SCRIPT)


def loadtests(inp):
    for rel, docs in inp.examples.items():
        for d in docs:
            if isinstance(d, dict) and d.get("kind") == "LoadTest":
                yield rel, d


def required_sysctls(inp):
    """Every net.* sysctl the project names for the shard pods, with where, minus the safe ones."""
    named = {}
    for rel, text in inp.prose.items():
        for name in NET_SYSCTL.findall(text):
            named.setdefault(name, set()).add(rel)
    for rel, lt in loadtests(inp):
        lg = (lt.get("spec") or {}).get("loadgen") or {}
        for field, sysctls in (("loadgen.sysctls", lg.get("sysctls")),
                               ("loadgen.tuning.sysctls", (lg.get("tuning") or {}).get("sysctls"))):
            for name in sysctls or {}:
                named.setdefault(name, set()).add("%s (%s)" % (rel, field))
    return {n: w for n, w in named.items() if n not in inp.safe}


def operator_env(inp):
    for o in inp.chart:
        if isinstance(o, dict) and o.get("kind") == "Deployment":
            for c in o["spec"]["template"]["spec"]["containers"]:
                return {e["name"]: e.get("value") for e in c.get("env", [])}
    return None


def check(inp):
    fails = []
    info = []
    nodes = inp.cluster["nodes"]
    control = [n for n in nodes if n["role"] == "control-plane"]
    workers = [n for n in nodes if n["role"] == "worker"]

    # --- nodes and the image ---------------------------------------------------------------
    if len(control) != 1:
        fails.append("cluster.yaml: %d control-plane nodes, want 1" % len(control))
    if len(workers) < 3:
        fails.append("cluster.yaml: %d workers, want >= 3 (a server node and a load-generator node per shard)" % len(workers))
    images = {n["image"] for n in nodes}
    node_version = None
    if len(images) != 1:
        fails.append("cluster.yaml: nodes use different images: %s" % sorted(images))
    for image in images:
        m = NODE_IMAGE.match(image or "")
        if not m:
            fails.append("cluster.yaml: node image %r is not kindest/node:vX.Y.Z@sha256:<digest>" % image)
            continue
        node_version = m.group(1)
        want_minor = inp.k8s_version.split(".")[1]
        if m.group(2) != want_minor:
            fails.append("cluster.yaml: node image is %s; the project's Kubernetes is %s (scripts/k8s/versions.sh)"
                         % (node_version, inp.k8s_version))
    info.append("nodes: 1 control plane, %d workers, image %s" % (len(workers), ", ".join(sorted(images))))

    # --- node labels reach the kubelet -------------------------------------------------------
    for i, n in enumerate(nodes):
        kind = "InitConfiguration" if n["role"] == "control-plane" else "JoinConfiguration"
        reg = kubeadm_doc(n, kind).get("nodeRegistration") or {}
        flag = (reg.get("kubeletExtraArgs") or {}).get("node-labels", "")
        got = dict(kv.split("=", 1) for kv in flag.split(",") if kv)
        if got != (n.get("labels") or {}):
            fails.append("cluster.yaml: node %d (%s): kubelet --node-labels %r, config labels %r"
                         % (i, n["role"], flag, n.get("labels")))
    for n in control:
        if any(k.startswith("wsload.dev/") for k in (n.get("labels") or {})):
            fails.append("cluster.yaml: the control plane carries a wsload pool label; it is tainted, pods do not go there")

    # --- placement: values.yaml as the chart hands it to the operator ---------------------
    env = operator_env(inp)
    shards = 0
    for rel, lt in loadtests(inp):
        if rel == SMOKE_LOADTEST:
            shards = max(shards, int(lt["spec"].get("shards", 1)))
    if shards == 0:
        fails.append("%s: no LoadTest found (scripts/e2e/smoke.sh applies it)" % SMOKE_LOADTEST)
    if env is None:
        fails.append("helm template -f examples/kind/values.yaml: no Deployment rendered")
    else:
        pools = {}
        for what, var in (("loadgen", "WSLOAD_OPERATOR_LOADGEN_PLACEMENT"), ("server", "WSLOAD_OPERATOR_SERVER_PLACEMENT")):
            raw = env.get(var)
            selector = (json.loads(raw) if raw else {}).get("nodeSelector") or {}
            if not selector:
                fails.append("values.yaml: %s.placement.nodeSelector is empty in the rendered chart (%s)" % (what, var))
                continue
            pools[what] = {i for i, n in enumerate(nodes) if n["role"] == "worker" and selector_matches(selector, n.get("labels"))}
            info.append("%s pool: %s -> %d worker(s)" % (what, json.dumps(selector, sort_keys=True), len(pools[what])))
        if "loadgen" in pools and len(pools["loadgen"]) < shards:
            fails.append("cluster.yaml: %d worker(s) match loadgen.placement.nodeSelector; %s has %d shards, one per node"
                         % (len(pools["loadgen"]), SMOKE_LOADTEST, shards))
        if "server" in pools and not pools["server"]:
            fails.append("cluster.yaml: no worker matches server.placement.nodeSelector")
        if "loadgen" in pools and "server" in pools and pools["loadgen"] & pools["server"]:
            fails.append("cluster.yaml: worker(s) %s are in both pools; shards would compete with the server for its node"
                         % sorted(pools["loadgen"] & pools["server"]))

    # --- sysctls -------------------------------------------------------------------------------
    if inp.safe_go is not None and inp.safe_go != inp.safe:
        fails.append("the safe sysctl list in %s differs from the kubelet's %s: only here %s, only there %s"
                     % (SAFE_SYSCTLS_SOURCE, inp.k8s_version, sorted(inp.safe - inp.safe_go), sorted(inp.safe_go - inp.safe)))
    kubelet = [kubeadm_doc(n, "KubeletConfiguration") for n in nodes]
    allowed = (kubeadm_doc(control[0], "KubeletConfiguration") if control else {}).get("allowedUnsafeSysctls") or []
    # kubeadm join takes the KubeletConfiguration the control plane uploaded, not its own: a
    # node-level patch would look right here and do nothing there.
    for i, k in enumerate(kubelet):
        if (k.get("allowedUnsafeSysctls") or []) != allowed:
            fails.append("cluster.yaml: node %d's allowedUnsafeSysctls differ from the control plane's; kubeadm join ignores "
                         "a node's own KubeletConfiguration, patch it cluster-wide" % i)
    for p in allowed:
        if not SYSCTL_PATTERN.match(p):
            fails.append("cluster.yaml: allowedUnsafeSysctls %r is not a sysctl name or pattern; the kubelet would not start" % p)
        elif not p.startswith("net."):
            fails.append("cluster.yaml: allowedUnsafeSysctls %r: shards need net.* only (other groups are node-wide or not "
                         "namespaced)" % p)
        if p in inp.safe:
            fails.append("cluster.yaml: allowedUnsafeSysctls %r is safe already; the kubelet allows it anyway" % p)
    required = required_sysctls(inp)
    for name, where in sorted(required.items()):
        if not any(covers(p, name) for p in allowed):
            fails.append("cluster.yaml: allowedUnsafeSysctls lacks %s, named for the shards in %s" % (name, ", ".join(sorted(where))))
    for p in allowed:
        if not any(covers(p, n) for n in required):
            fails.append("cluster.yaml: allowedUnsafeSysctls %r is named nowhere for the shards (%s, examples/); "
                         "allow only what they use" % (p, ", ".join(PROSE_SOURCES)))
    info.append("unsafe sysctls the shards are told to use: %s; allowed: %s" % (", ".join(sorted(required)) or "none",
                                                                                ", ".join(allowed) or "none"))

    # --- one cluster name, one kind release, one kubectl ------------------------------------
    wf = inp.workflow
    on = wf.get("on", wf.get("true", wf.get(True)))
    if not isinstance(on, dict) or "push" not in on or "pull_request" not in on:
        fails.append("%s: must run on push and pull_request" % WORKFLOW)
    jobs = wf.get("jobs") or {}
    if len(jobs) != 1:
        fails.append("%s: want one job, found %d" % (WORKFLOW, len(jobs)))
    job = next(iter(jobs.values()), {})
    jenv = job.get("env") or {}
    smoke_kind = shell_var(inp.smoke_script, "KIND_VERSION")
    smoke_cluster = shell_var(inp.smoke_script, "CLUSTER")
    for what, a, b in (("kind version", jenv.get("KIND_VERSION"), smoke_kind),
                       ("cluster name", jenv.get("KIND_CLUSTER"), smoke_cluster),
                       ("cluster name", inp.cluster.get("name"), smoke_cluster),
                       ("kubectl version", jenv.get("KUBECTL_VERSION"), node_version)):
        if not a or a != b:
            fails.append("%s: %r in one place, %r in the other (%s, %s, cluster.yaml)" % (what, a, b, WORKFLOW, SMOKE_SCRIPT))
    info.append("kind %s, cluster %s, kubectl %s" % (smoke_kind, smoke_cluster, jenv.get("KUBECTL_VERSION")))

    # --- the workflow's steps ------------------------------------------------------------------
    steps = job.get("steps") or []
    runs_smoke = False
    seen = []
    tracked = subprocess.run(["git", "-C", inp.root, "ls-files", "-s"], capture_output=True, text=True).stdout
    modes = {line.split("\t", 1)[1]: line.split()[0] for line in tracked.splitlines() if "\t" in line}
    for s in steps:
        uses = s.get("uses")
        if uses and not SHA_PIN.match(uses):
            fails.append("%s: %s is not pinned to a commit (owner/repo@<40 hex> # vX.Y.Z)" % (WORKFLOW, uses))
        run = s.get("run") or ""
        for script in re.findall(r"(?:^|[\s;&|(\"$])((?:\./)?(?:scripts|examples)/[\w./-]+\.(?:sh|py))", run):
            path = os.path.join(inp.root, script)
            rel = os.path.normpath(script)
            seen.append(rel)
            if not os.path.isfile(path):
                fails.append("%s runs %s, which does not exist" % (WORKFLOW, script))
            elif not os.access(path, os.X_OK):
                fails.append("%s runs %s, which is not executable" % (WORKFLOW, script))
            elif rel in modes and modes[rel] != "100755":
                fails.append("%s runs %s, which git records as mode %s, not 100755 (git update-index --chmod=+x)"
                             % (WORKFLOW, script, modes[rel]))
            if rel == SMOKE_SCRIPT:
                runs_smoke = True
    if not runs_smoke:
        fails.append("%s: no step runs %s" % (WORKFLOW, SMOKE_SCRIPT))
    if not any(s.get("if") == "failure()" and "kind export logs" in (s.get("run") or "") for s in steps):
        fails.append("%s: no `if: failure()` step runs `kind export logs`" % WORKFLOW)
    if not any((s.get("uses") or "").startswith("actions/upload-artifact@") for s in steps):
        fails.append("%s: the logs are not uploaded (actions/upload-artifact)" % WORKFLOW)
    info.append("workflow: %d steps, every action pinned by commit; runs %s" % (len(steps), ", ".join(sorted(set(seen)))))
    return fails, info


def self_test(inp):
    """Each broken variant must be rejected with the expected message: the check can fail."""
    def worker(x, i):
        return [n for n in x.cluster["nodes"] if n["role"] == "worker"][i]

    def kubelet_docs(x):
        return [kubeadm_doc(n, "KubeletConfiguration") for n in x.cluster["nodes"]]

    cases = []

    def case(name, want, mutate):
        cases.append((name, want, mutate))

    case("a sysctl left out", "allowedUnsafeSysctls lacks",
         lambda x: [k.__setitem__("allowedUnsafeSysctls", k.get("allowedUnsafeSysctls", [])[:-1]) for k in kubelet_docs(x)])
    case("an extra sysctl", "is named nowhere",
         lambda x: [k.setdefault("allowedUnsafeSysctls", []).append("net.ipv4.tcp_max_tw_buckets") for k in kubelet_docs(x)])
    case("a safe sysctl allowed", "is safe already",
         lambda x: [k.setdefault("allowedUnsafeSysctls", []).append("net.ipv4.ip_local_port_range") for k in kubelet_docs(x)])
    if inp.safe_go is not None:
        case("the safe list off the kubelet's", "differs from the kubelet's",
             lambda x: x.safe.discard("net.ipv4.tcp_wmem"))
    case("a node-wide sysctl", "net.* only",
         lambda x: [k.setdefault("allowedUnsafeSysctls", []).append("kernel.msgmax") for k in kubelet_docs(x)])
    case("a LoadTest asking for another", "lacks net.ipv4.tcp_max_syn_backlog",
         lambda x: x.examples.setdefault("examples/x.yaml", []).append(
             {"kind": "LoadTest", "spec": {"loadgen": {"sysctls": {"net.ipv4.tcp_max_syn_backlog": "4096"}}}}))
    case("one load-generator node", "worker(s) match loadgen.placement",
         lambda x: worker(x, 2).__setitem__("labels", {}))
    case("a node in both pools", "in both pools",
         lambda x: worker(x, 0)["labels"].update(worker(x, 1)["labels"]))
    case("an unpinned node image", "is not kindest/node",
         lambda x: [n.__setitem__("image", "kindest/node:v1.33.4") for n in x.cluster["nodes"]])
    case("an unpinned action", "is not pinned",
         lambda x: next(iter(x.workflow["jobs"].values()))["steps"][0].__setitem__("uses", "actions/checkout@v7"))
    case("another kind release", "kind version",
         lambda x: next(iter(x.workflow["jobs"].values()))["env"].__setitem__("KIND_VERSION", "v0.33.0"))
    case("a missing script", "does not exist",
         lambda x: next(iter(x.workflow["jobs"].values()))["steps"].append({"run": "scripts/no-such.sh"}))
    bad = []
    for name, want, mutate in cases:
        x = copy.deepcopy(inp)
        mutate(x)
        fails, _ = check(x)
        ok = any(want in f for f in fails)
        print("  self-test: %-32s %s" % (name, "rejected" if ok else "NOT REJECTED"))
        if not ok:
            bad.append("self-test %r: no failure containing %r (got %s)" % (name, want, fails))
    return bad


def main():
    args = [a for a in sys.argv[1:] if a != "--self-test"]
    if len(args) not in (3, 4):
        sys.exit(__doc__)
    inp = Inputs(args[0], args[1], args[2], args[3] if len(args) == 4 and args[3] else None)
    bad = self_test(inp) if "--self-test" in sys.argv else []
    fails, info = check(inp)
    for line in info:
        print("  " + line)
    if inp.safe_go is None:
        print("  safe sysctls: the list in %s, unchecked (no Kubernetes %s source in the Go module cache)"
              % (SAFE_SYSCTLS_SOURCE, inp.k8s_version))
    else:
        print("  safe sysctls: equal to the kubelet's %s source" % inp.k8s_version)
    fails = bad + fails
    for f in fails:
        print("FAIL: " + f, file=sys.stderr)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
