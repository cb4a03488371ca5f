#!/usr/bin/env bash
# Checks charts/wsload the way a cluster would judge it, offline:
#   1. versions: Chart.yaml version and appVersion are the workspace version; the chart's
#      copies of the CRD and dashboards match their sources (scripts/generate.sh)
#   2. helm lint --strict with values.yaml and each charts/wsload/ci/*-values.yaml, and
#      values.schema.json (generated from values.yaml's annotations, scripts/generate.sh)
#      refuses misspelt keys and wrong values; NOTES.txt renders
#   3. a real control plane (scripts/k8s): its /openapi/v2 becomes kubeconform's JSON
#      schemas (scripts/chart/openapi2jsonschema.py, cached per Kubernetes version); the
#      LoadTest CRD and minimal ServiceMonitor/PodMonitor CRDs (scripts/chart/monitoring-crds.yaml)
#      are installed and their schemas converted the same way
#   4. kubeconform -strict on every rendering (CRD included), and on deliberately broken
#      manifests, which it must reject (the check can fail)
#   5. kubectl apply --dry-run=server of every rendering, with server-side field validation;
#      a broken manifest must be rejected; what the server would store is then asserted
#      (scripts/chart/check-rendered.py: env, security context, probes, least-privilege
#      RBAC without Secrets, NetworkPolicies, monitors, dashboards byte-for-byte); PodSecurity
#      admission (warn=restricted on the namespaces) must find nothing to say about the
#      chart's pods, and must about a privileged one
#   6. the chart's RBAC in action: the `full` rendering installed, wsload-operator run on this
#      machine as the chart's ServiceAccount (a token, not admin) with the Deployment's env:
#      it must take the Lease, turn a LoadTest into a server pod and Service with the chart's
#      default image and placement, and (once that pod is marked ready) shard pods likewise,
#      with no request forbidden; the account must not be able to read Secrets
#   7. the chart's Prometheus (prometheus.install, on in the full and namespaced values): its
#      account may only read pods, where it looks; when scripts/k8s/prometheus.sh has built
#      Prometheus 3.9.1 (cached; this check never starts that 6-minute build), promtool checks
#      the rendered prometheus.yml and that Prometheus, run here with the config and the
#      account's token, must discover the managed server pod with the labels the dashboards
#      use. Debian's promtool cannot stand in: it refuses kubernetes_sd_configs.
#
# Tools come from scripts/tools.sh (helm, kubeconform) and scripts/k8s/build.sh
# (kube-apiserver, kubectl), all cached under ${WSLOAD_CACHE:-~/.cache/wsload}; a warm run takes
# about half a minute, mostly the control plane's start.
#
# Environment:
#   WSLOAD_CACHE           cache root
#   WSLOAD_CHART_KEEP=1    keep the work directory (renderings, schemas, logs); always kept
#                          when a check fails
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHART="$ROOT/charts/wsload"
HERE="$ROOT/scripts/chart"
# shellcheck source=scripts/lib/common.sh
source "$ROOT/scripts/lib/common.sh"
# shellcheck source=scripts/k8s/versions.sh
source "$ROOT/scripts/k8s/versions.sh"
WSLOAD_CACHE="${WSLOAD_CACHE:-$HOME/.cache/wsload}"

# The release every rendering uses; check-rendered.py expects these names.
RELEASE=wsload
NS=wsload-system
WATCH_NS=wsload-tests
CASES=(default namespaced full)

started=$SECONDS
WORK="$(mktemp -d "${TMPDIR:-/tmp}/wsload-chart.XXXXXX")"
CLUSTER="$WORK/cluster"
OK=0
UP_PID=""
OPERATOR_PID=""
PROMETHEUS_PID=""
# At exit, in this order: the operator and Prometheus stopped, the control plane's start
# awaited, the control plane down, the work directory removed (or kept).
at_exit 'if ((OK)) && [[ "${WSLOAD_CHART_KEEP:-0}" != 1 ]]; then rm -rf "$WORK"; else log "kept $WORK (renderings, schemas, cluster/*.log, operator.log)"; fi'
at_exit '"$ROOT/scripts/k8s/control-plane.sh" down "$CLUSTER" 2>/dev/null'
at_exit '[[ -z "$UP_PID" ]] || wait "$UP_PID" 2>/dev/null'
at_exit 'stop_process "$PROMETHEUS_PID"'
at_exit 'stop_process "$OPERATOR_PID"'
trap 'exit 130' INT
trap 'exit 143' TERM

# --- tools ---------------------------------------------------------------------------------

step "tools: helm, kubeconform (scripts/tools.sh), kube-apiserver, kubectl (scripts/k8s/build.sh)"
{
	read -r HELM
	read -r KUBECONFORM
} < <("$ROOT/scripts/tools.sh" helm kubeconform || true)
[[ -x "${HELM:-}" && -x "${KUBECONFORM:-}" ]] || fail "scripts/tools.sh could not install helm and kubeconform (above)"
"$ROOT/scripts/k8s/install-deps.sh"
"$ROOT/scripts/k8s/build.sh" kube-apiserver kubectl
# kubectl (scripts/lib/common.sh) is the one just built, of the control plane's release, even
# when the caller's environment names another in KUBECTL.
KUBECTL=""
export KUBECACHEDIR="$WORK/kube-cache"

# The control plane starts in the background while helm works.
mkdir -p "$CLUSTER"
"$ROOT/scripts/k8s/control-plane.sh" up "$CLUSTER" >"$WORK/up.env" 2>"$WORK/up.log" &
UP_PID=$!

# --- 1. versions and generated copies ---------------------------------------------------------

step "chart version = appVersion = workspace version; the chart's copies match their sources"
workspace_version="$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps |
	python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "wsload-operator"))')"
chart_version="$(sed -n 's/^version: *//p' "$CHART/Chart.yaml")"
app_version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$CHART/Chart.yaml")"
[[ "$chart_version" == "$workspace_version" && "$app_version" == "$workspace_version" ]] ||
	fail "charts/wsload/Chart.yaml has version '$chart_version' and appVersion '$app_version', the workspace (Cargo.toml) $workspace_version: set both to $workspace_version"
printf 'chart %s, appVersion %s, workspace %s\n' "$chart_version" "$app_version" "$workspace_version"
cmp -s "$ROOT/crds/loadtest.yaml" "$CHART/crds/loadtest.yaml" ||
	fail "charts/wsload/crds/loadtest.yaml differs from crds/loadtest.yaml: run scripts/generate.sh and commit"
for src in "$ROOT"/dashboards/*.json; do
	cmp -s "$src" "$CHART/dashboards/$(basename "$src")" ||
		fail "charts/wsload/dashboards/$(basename "$src") differs from dashboards/$(basename "$src") (or is missing): run scripts/generate.sh and commit"
done
python3 -m json.tool "$CHART/values.schema.json" >/dev/null ||
	fail "charts/wsload/values.schema.json is not valid JSON"

# --- 2. helm lint, the values schema, rendering ---------------------------------------------------

values_args() { # case
	if [[ "$1" != default ]]; then
		printf '%s\n' -f "$CHART/ci/$1-values.yaml"
	fi
}

step "helm lint --strict (${CASES[*]}) and rendering"
mkdir -p "$WORK/rendered" "$WORK/with-crds"
for values in "${CASES[@]}"; do
	mapfile -t args < <(values_args "$values")
	[[ "$values" == default || -f "$CHART/ci/$values-values.yaml" ]] || fail "charts/wsload/ci/$values-values.yaml is missing"
	if ! out="$("$HELM" lint --strict "$CHART" -n "$NS" "${args[@]}" 2>&1)"; then
		printf '%s\n' "$out" >&2
		fail "helm lint ($values values) failed, see above"
	fi
	printf 'lint %-10s %s\n' "$values" "$(tail -n1 <<<"$out")"
	"$HELM" template "$RELEASE" "$CHART" -n "$NS" --kube-version "$K8S_VERSION" "${args[@]}" >"$WORK/rendered/$values.yaml"
	"$HELM" template "$RELEASE" "$CHART" -n "$NS" --kube-version "$K8S_VERSION" --include-crds "${args[@]}" >"$WORK/with-crds/$values.yaml"
done

step "values.schema.json and the templates refuse wrong values"
expect_helm_failure() { # what message-fragment helm-args...
	local what="$1" fragment="$2" out
	shift 2
	if out="$("$HELM" "$@" 2>&1)"; then
		fail "helm accepted $what (helm $*)"
	fi
	[[ "$out" == *"$fragment"* ]] || fail "helm refused $what, but without naming '$fragment': $out"
	printf 'refused: %s\n' "$what"
}
expect_helm_failure "a misspelt placement key" "nodeSelectors" \
	lint --strict "$CHART" --set loadgen.placement.nodeSelectors.pool=x
expect_helm_failure "a numeric scrape interval" "/serviceMonitor/interval" \
	lint --strict "$CHART" --set serviceMonitor.interval=15
expect_helm_failure "an unknown log format" "/operator/logFormat" \
	lint --strict "$CHART" --set operator.logFormat=xml
expect_helm_failure "watchNamespace without rbac.namespaced" "rbac.namespaced=true" \
	template "$RELEASE" "$CHART" --set watchNamespace=elsewhere
expect_helm_failure "a Deployment roll granted outside a namespaced install's namespace" "is not the namespace this namespaced install watches" \
	template "$RELEASE" "$CHART" -n "$NS" --set rbac.namespaced=true --set "rbac.rollDeployments={elsewhere}"
expect_helm_failure "a Deployment roll granted in an empty namespace" "rbac.rollDeployments[0] is empty" \
	template "$RELEASE" "$CHART" --set "rbac.rollDeployments[0]="
expect_helm_failure "a misspelt prometheus key" "scrapeIntervall" \
	lint --strict "$CHART" --set prometheus.install=true --set prometheus.scrapeIntervall=5s
expect_helm_failure "a Prometheus retention that is no duration" "/prometheus/retention" \
	lint --strict "$CHART" --set prometheus.install=true --set prometheus.retention=1week
# The pieces under charts/wsload/schema/ reach helm only bundled into values.schema.json.
expect_helm_failure "a misspelt EnvVar key (schema/env-var.json, bundled)" "'nam' not allowed" \
	lint --strict "$CHART" --set 'operator.extraEnv[0].nam=X'
expect_helm_failure "an unknown relabel action (schema/relabel-config.json, bundled)" "/podMonitor/metricRelabelings/0/action" \
	lint --strict "$CHART" --set 'podMonitor.metricRelabelings[0].action=delete'

# --- 3. control plane, schemas ---------------------------------------------------------------

step "control plane up (started in the background)"
if ! wait "$UP_PID"; then
	UP_PID=""
	cat "$WORK/up.log" >&2
	fail "scripts/k8s/control-plane.sh up failed (above)"
fi
UP_PID=""
eval "$(cat "$WORK/up.env")"
[[ "$(kubectl get --raw /readyz)" == ok ]] || fail "the API server is not ready"

step "NOTES.txt renders (helm install --dry-run=client, which reads the server version) and shows a LoadTest"
notes="$("$HELM" install "$RELEASE" "$CHART" -n "$NS" --dry-run=client 2>&1 | sed -n '/^NOTES:/,$p')"
[[ "$notes" == *"kubectl -n default get lt -w"* ]] || fail "NOTES.txt does not tell the user to watch LoadTests: $notes"
# The LoadTest NOTES.txt shows, as the user would paste it.
sed -n "/<<'EOF'/,/^ *EOF\$/p" <<<"$notes" | sed '1d;$d' | sed 's/^     //' >"$WORK/notes-loadtest.yaml"
grep -q '^kind: LoadTest$' "$WORK/notes-loadtest.yaml" || fail "no LoadTest found in NOTES.txt: $notes"

CONVERTER_HASH="$(sha256sum "$HERE/openapi2jsonschema.py" | cut -c1-12)"
CORE_SCHEMAS="$WSLOAD_CACHE/kubeconform-schemas/$K8S_VERSION-$CONVERTER_HASH"
step "kubeconform schemas of Kubernetes $K8S_VERSION from its /openapi/v2 (cached: $CORE_SCHEMAS)"
if [[ ! -f "$CORE_SCHEMAS/.complete" ]]; then
	# Fetched before any CRD is installed, so only built-in kinds land in the cache.
	kubectl get --raw /openapi/v2 >"$WORK/openapi-v2.json"
	rm -rf "$CORE_SCHEMAS.tmp"
	python3 "$HERE/openapi2jsonschema.py" openapi "$WORK/openapi-v2.json" "$CORE_SCHEMAS.tmp"
	rm -rf "$CORE_SCHEMAS"
	mv "$CORE_SCHEMAS.tmp" "$CORE_SCHEMAS"
	touch "$CORE_SCHEMAS/.complete"
	# Schemas of an older converter or Kubernetes release are never read again (~8 MB each).
	find "$(dirname "$CORE_SCHEMAS")" -mindepth 1 -maxdepth 1 -type d ! -name "$(basename "$CORE_SCHEMAS")" \
		! -name '*.tmp' -exec rm -rf {} +
fi
printf '%s schemas\n' "$(find "$CORE_SCHEMAS" -name '*.json' | wc -l)"

step "CRDs: LoadTest (the chart's crds/), minimal ServiceMonitor and PodMonitor; their schemas"
kubectl apply --server-side -f "$CHART/crds/loadtest.yaml" -f "$HERE/monitoring-crds.yaml"
for crd in loadtests.wsload.dev servicemonitors.monitoring.coreos.com podmonitors.monitoring.coreos.com; do
	wait_until 30 crd_established "$crd" || fail "CRD $crd not Established after 30s (logs: $CLUSTER/kube-apiserver.log)"
done
kubectl get crd loadtests.wsload.dev servicemonitors.monitoring.coreos.com podmonitors.monitoring.coreos.com \
	-o json >"$WORK/crds.json"
python3 "$HERE/openapi2jsonschema.py" crds "$WORK/crds.json" "$WORK/crd-schemas"

# --- 4. kubeconform ------------------------------------------------------------------------

kubeconform_run() { # files...
	"$KUBECONFORM" -strict -summary \
		-schema-location "$CORE_SCHEMAS/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
		-schema-location "$WORK/crd-schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json" "$@"
}

step "kubeconform -strict: every rendering, CRD included"
kubeconform_run "$WORK"/with-crds/*.yaml || fail "kubeconform found invalid objects in the chart's renderings (above)"

# Each of these has one mistake a schema must catch; each must be reported invalid.
mkdir -p "$WORK/broken"
sed 's/^\( *\)imagePullPolicy: /\1imagePullPolicyy: /' "$WORK/rendered/default.yaml" |
	awk '/^---/{n++} {print > ("'"$WORK"'/broken/doc" n ".yaml")}'
broken_deployment="$(grep -l '^kind: Deployment' "$WORK"/broken/doc*.yaml)"
mv "$broken_deployment" "$WORK/broken/deployment.yaml"
rm -f "$WORK"/broken/doc*.yaml
sed 's/^\(      \)interval: /\1intervall: /' "$WORK/rendered/full.yaml" |
	awk '/^---/{n++} /^kind: PodMonitor/{keep=n} {doc[n]=doc[n] $0 "\n"} END{printf "%s", doc[keep]}' \
		>"$WORK/broken/podmonitor.yaml"
grep -q intervall "$WORK/broken/podmonitor.yaml" || fail "self-test: could not make the broken PodMonitor"
sed 's/^  scenario: throughput$/  scenario: thruput/' "$WORK/notes-loadtest.yaml" >"$WORK/broken/loadtest.yaml"
grep -q thruput "$WORK/broken/loadtest.yaml" || fail "self-test: could not make the broken LoadTest"
step "kubeconform must reject broken manifests (misspelt field in a Deployment and a PodMonitor, a LoadTest's unknown scenario)"
# Rejected as invalid for that mistake, not for another reason: kubeconform also fails when a
# schema is missing or does not compile, which would make this test pass for nothing.
for f in deployment:imagePullPolicyy podmonitor:intervall loadtest:/spec/scenario; do
	if out="$(kubeconform_run "$WORK/broken/${f%%:*}.yaml" 2>&1)"; then
		fail "kubeconform accepted $WORK/broken/${f%%:*}.yaml: $out"
	fi
	[[ "$out" == *"is invalid"*"${f#*:}"* ]] ||
		fail "kubeconform refused $WORK/broken/${f%%:*}.yaml, but not for ${f#*:}: $out"
	printf 'rejected %s: %s\n' "${f%%:*}" "$(grep -m1 -o -- "- at '.*" <<<"$out")"
done

# --- 5. the API server's judgement ----------------------------------------------------------

step "kubectl apply --dry-run=server (server-side field validation) and what the server would store"
for n in "$NS" "$WATCH_NS" monitoring; do kubectl create namespace "$n" >/dev/null; done
# No controller manager here to give the namespace its default ServiceAccount, which pods use.
kubectl -n "$WATCH_NS" create serviceaccount default >/dev/null
kubectl apply --dry-run=server -f "$WORK/notes-loadtest.yaml" -n default >/dev/null ||
	fail "the LoadTest NOTES.txt shows is refused by the CRD"
# The chart's pods (operator, Prometheus) must pass Pod Security "restricted": PodSecurity
# admission warns about a workload whose pod template would be refused; a privileged one
# proves that it does.
kubectl label namespace "$NS" "$WATCH_NS" pod-security.kubernetes.io/warn=restricted >/dev/null
privileged="$(kubectl -n "$NS" create deployment psa-probe --image=x --dry-run=client -o json |
	python3 -c 'import json, sys; d = json.load(sys.stdin); d["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}; print(json.dumps(d))' |
	kubectl apply --dry-run=server -f - 2>&1 >/dev/null)"
[[ "$privileged" == *'would violate PodSecurity "restricted'* ]] ||
	fail "PodSecurity admission did not warn about a privileged Deployment in $NS: $privileged"
for values in "${CASES[@]}"; do
	if ! kubectl apply --dry-run=server -o json -f "$WORK/rendered/$values.yaml" >"$WORK/applied-$values.json" 2>"$WORK/applied-$values.err"; then
		cat "$WORK/applied-$values.err" >&2
		fail "the API server refused the $values rendering (above)"
	fi
	if grep -i 'PodSecurity' "$WORK/applied-$values.err" >&2; then
		fail "the $values rendering has pods that Pod Security \"restricted\" refuses (above)"
	fi
	python3 "$HERE/check-rendered.py" "$values" "$WORK/applied-$values.json" "$ROOT/dashboards" "$app_version" ||
		fail "the $values rendering is not what the chart promises (above)"
done

# The chart's prometheus.yml of a case, as the server would store it.
prometheus_config() { # case out-file
	python3 - "$WORK/applied-$1.json" "$RELEASE-prometheus" >"$2" <<'PY'
import json, sys
items = json.load(open(sys.argv[1]))["items"]
cm = [o for o in items if o["kind"] == "ConfigMap" and o["metadata"]["name"] == sys.argv[2]]
if not cm:
    sys.exit("no ConfigMap %s in %s" % (sys.argv[2], sys.argv[1]))
sys.stdout.write(cm[0]["data"]["prometheus.yml"])
PY
}
# Prometheus 3.9.1 as the chart's pod runs it (Debian's 2.42 has no kubernetes_sd_configs), built
# by scripts/k8s/prometheus.sh: ~6 min the first time, which a full suite run spends in its
# prepare lane while earlier parts run; cached after. Never skipped: a chart whose Prometheus
# config only a cached machine checks is not checked on a fresh one.
PROMTOOL="$("$ROOT/scripts/k8s/prometheus.sh" promtool)" || fail "scripts/k8s/prometheus.sh promtool failed (above)"
PROMETHEUS="$("$ROOT/scripts/k8s/prometheus.sh" prometheus)" || fail "scripts/k8s/prometheus.sh prometheus failed (above)"
for values in full namespaced; do
	prometheus_config "$values" "$WORK/prometheus-$values.yml" || fail "the $values rendering has no Prometheus config (above)"
	"$PROMTOOL" check config "$WORK/prometheus-$values.yml" >"$WORK/promtool-$values.log" 2>&1 || {
		cat "$WORK/promtool-$values.log" >&2
		fail "promtool check config refused the $values rendering's prometheus.yml (above)"
	}
	printf 'promtool %s: %s\n' "$values" "$(grep -m1 -o 'SUCCESS.*' "$WORK/promtool-$values.log")"
done

if out="$(kubectl apply --dry-run=server -f "$WORK/broken/deployment.yaml" 2>&1)"; then
	fail "the API server accepted the broken Deployment: $out"
fi
[[ "$out" == *imagePullPolicyy* ]] || fail "the API server refused the broken Deployment, but not for its misspelt field: $out"
printf 'rejected by the server: %s\n' "$(cut -c1-160 <<<"$out")"

# --- 6. RBAC in action --------------------------------------------------------------------------

SA="system:serviceaccount:$NS:$RELEASE"
can() { kubectl auth can-i "$@" --as="$SA"; }
expect_can() { # yes|no check...
	local want="$1" check
	shift
	for check in "$@"; do
		# shellcheck disable=SC2086 # the words of each check are its arguments
		[[ "$(can $check 2>/dev/null || true)" == "$want" ]] || {
			[[ "$want" == yes ]] && fail "the operator's ServiceAccount cannot $check ($values install)"
			fail "the operator's ServiceAccount can $check; the $values install must not grant it"
		}
	done
}

# Its warnings and errors (the full values set RUST_LOG=debug: too much to show).
operator_log_tail() {
	printf 'last warnings and errors of wsload-operator (all: %s):\n' "$WORK/operator-$values.log" >&2
	grep -E '"level":"(WARN|ERROR)"|(WARN|ERROR) ' "$WORK/operator-$values.log" | tail -n 5 >&2 ||
		tail -n 5 "$WORK/operator-$values.log" >&2
}
operator_wait() { # seconds description command...
	local seconds="$1" what="$2" rc=0
	shift 2
	wait_until "$seconds" --pid "$OPERATOR_PID" "$@" || rc=$?
	((rc)) || return 0
	operator_log_tail
	if ((rc == 1)); then
		fail "wsload-operator exited while waiting for: $what ($values install)"
	fi
	fail "timed out waiting for: $what ($values install)"
}
# pod_has POD IMAGE NODE_SELECTOR_JSON TOLERATION_KEY|- NODE_AFFINITY(true|false)
pod_has() {
	kubectl -n "$WATCH_NS" get pod "$1" -o json | python3 -c '
import json, sys
pod, image, selector, toleration, affinity = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], sys.argv[5] == "true"
p = json.load(sys.stdin)["spec"]
got_image, got_sel = p["containers"][0]["image"], p.get("nodeSelector") or {}
got_tol = [t for t in p.get("tolerations", []) if t.get("key") == toleration]
got_aff = bool(p.get("affinity", {}).get("nodeAffinity"))
print(f"{pod}: image {got_image}, nodeSelector {got_sel}, toleration {toleration}: {bool(got_tol)}, node affinity {got_aff}")
if (got_image, got_sel, bool(got_tol), got_aff) != (image, selector, toleration != "-", affinity):
    sys.exit(f"{pod} does not carry the install-wide defaults: expected image {image}, nodeSelector {selector}, toleration {toleration}, node affinity {affinity}")
' "$@"
}

has_events() { [[ -n "$(kubectl -n "$WATCH_NS" get events.events.k8s.io -o name)" ]]; }

PROM_SA="system:serviceaccount:$NS:$RELEASE-prometheus"
# The chart's Prometheus account reads pods where it discovers them, and nothing else.
prometheus_rbac() {
	local check
	local -a granted=("list pods -n $WATCH_NS" "watch pods -n $WATCH_NS" "list pods -n $NS" "watch pods -n $NS")
	local -a refused=("get secrets -n $NS" "list secrets -n $WATCH_NS" "create pods -n $WATCH_NS"
		"list services -n $WATCH_NS" "list nodes" "get configmaps -n $NS")
	if [[ "$values" == namespaced ]]; then
		refused+=("list pods -n default" "watch pods -A")
	else
		granted+=("watch pods -A")
	fi
	for check in "${granted[@]}"; do
		# shellcheck disable=SC2086 # the words of each check are its arguments
		[[ "$(kubectl auth can-i $check --as="$PROM_SA" 2>/dev/null || true)" == yes ]] ||
			fail "the chart's Prometheus account cannot $check ($values install): its discovery would see nothing there"
	done
	for check in "${refused[@]}"; do
		# shellcheck disable=SC2086
		[[ "$(kubectl auth can-i $check --as="$PROM_SA" 2>/dev/null || true)" == no ]] ||
			fail "the chart's Prometheus account can $check; the $values install must not grant it"
	done
	printf 'ServiceAccount %s: pods get/list/watch where it discovers them, nothing else\n' "$PROM_SA"
}

# The rendered prometheus.yml run here by the built Prometheus as the chart's account: the same
# discovery and relabelling, pointed at this API server (off-cluster, so api_server, the token
# and the CA are added to its kubernetes_sd_configs).
prometheus_start() {
	local token ca_file
	token="$(kubectl -n "$NS" create token "$RELEASE-prometheus" --duration=10m)"
	printf '%s' "$token" >"$WORK/prometheus.token"
	kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' |
		base64 -d >"$WORK/prometheus-ca.crt"
	ca_file="$WORK/prometheus-ca.crt"
	python3 - "$WORK/prometheus-$values.yml" "$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')" \
		"$WORK/prometheus.token" "$ca_file" >"$WORK/prometheus-$values-offcluster.yml" <<'PY'
import re, sys
text, server, token, ca = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3], sys.argv[4]
out, n = re.subn(r"^( *)- role: pod\n",
                 lambda m: (f"{m.group(1)}- role: pod\n{m.group(1)}  api_server: {server}\n"
                            f"{m.group(1)}  authorization: {{credentials_file: {token}}}\n"
                            f"{m.group(1)}  tls_config: {{ca_file: {ca}}}\n"), text, flags=re.M)
if n != 1:
    sys.exit("expected one `- role: pod` in the chart's prometheus.yml, found %d" % n)
sys.stdout.write(out)
PY
	PROM_PORT="$(free_ports 1)"
	"$PROMETHEUS" --config.file="$WORK/prometheus-$values-offcluster.yml" --storage.tsdb.path="$WORK/prometheus-data-$values" \
		--web.listen-address="127.0.0.1:$PROM_PORT" >"$WORK/prometheus-$values.log" 2>&1 &
	PROMETHEUS_PID=$!
}

# The managed server pod (marked Running by hand) must be an active target with the labels the
# dashboards and the relabelling promise; the shard, still Pending, must not.
# What it found goes to $WORK/prometheus-targets.txt.
prometheus_targets_ok() {
	{
		curl -fsS "http://127.0.0.1:$PROM_PORT/api/v1/targets" | python3 -c '
import json, sys
ns, port = sys.argv[1], sys.argv[2]
targets = json.load(sys.stdin)["data"]["activeTargets"]
pods = [t for t in targets if t["labels"].get("job") == "kubernetes-pods"]
want = {"namespace": ns, "pod": "quickstart-server", "wsload_dev_loadtest": "quickstart", "wsload_dev_role": "server"}
ok = [t for t in pods if all(t["labels"].get(k) == v for k, v in want.items())
      and t["scrapeUrl"] == "http://10.244.0.10:%s/metrics" % port]
shards = [t for t in pods if t["labels"].get("pod", "").startswith("quickstart-shard")]
print("targets: %s" % [(t["labels"].get("pod"), t["scrapeUrl"]) for t in pods])
sys.exit(0 if len(ok) == 1 and not shards else 1)
' "$WATCH_NS" "$1"
	} >"$WORK/prometheus-targets.txt" 2>&1
}

prometheus_check() {
	local port rc=0
	port="$(kubectl -n "$WATCH_NS" get pod quickstart-server -o jsonpath='{.metadata.annotations.prometheus\.io/port}')"
	WAIT_INTERVAL=1 wait_until 45 --pid "$PROMETHEUS_PID" prometheus_targets_ok "$port" || rc=$?
	if ((rc == 1)); then
		tail -n 20 "$WORK/prometheus-$values.log" >&2
		fail "Prometheus exited with the $values rendering's prometheus.yml (above)"
	elif ((rc == 2)); then
		cat "$WORK/prometheus-targets.txt" >&2
		grep -i 'level=error' "$WORK/prometheus-$values.log" | tail -n 5 >&2 || true
		fail "the chart's Prometheus ($values install) did not discover quickstart-server as a target with namespace, pod and wsload_dev_* labels on 10.244.0.10:$port within 45s (above; log: $WORK/prometheus-$values.log)"
	fi
	printf 'Prometheus %s (%s install, as %s): %s\n' "$("$PROMETHEUS" --version 2>&1 | head -n1 | cut -d' ' -f3)" \
		"$values" "$PROM_SA" "$(cat "$WORK/prometheus-targets.txt")"
	if grep -Ei 'forbidden' "$WORK/prometheus-$values.log" | tail -n 3 >&2; then
		fail "Prometheus was refused a request with the $values install's RBAC (above)"
	fi
	stop_process "$PROMETHEUS_PID"
	PROMETHEUS_PID=""
}

# The shard's control Secret (read here as admin): the token the operator derived, owned by the
# LoadTest, mounted by the shard pod, whose env names only the file.
control_secret_ok() {
	local token
	token="$(kubectl -n "$WATCH_NS" get secret quickstart-control -o jsonpath='{.data.token}' | base64 -d)" || {
		printf 'no Secret quickstart-control next to the shard pod\n' >&2
		return 1
	}
	[[ ${#token} -eq 64 ]] || {
		printf 'Secret quickstart-control holds a token of %s characters, expected 64\n' "${#token}" >&2
		return 1
	}
	kubectl -n "$WATCH_NS" get secret quickstart-control -o json | python3 -c '
import json, sys
s = json.load(sys.stdin)
owners = s["metadata"].get("ownerReferences", [])
ok = any(o["kind"] == "LoadTest" and o["name"] == "quickstart" and o.get("controller") for o in owners)
sys.exit(0 if ok else "Secret quickstart-control is not owned by LoadTest quickstart: %s" % owners)
' || return 1
	if kubectl -n "$WATCH_NS" get pod quickstart-shard-0 -o json | grep -qF "$token"; then
		printf 'the shard pod quickstart-shard-0 holds the control token itself\n' >&2
		return 1
	fi
	if kubectl -n "$WATCH_NS" get lt quickstart -o json | grep -qF "$token" || grep -qF "$token" "$WORK/operator-$values.log"; then
		printf 'the control token is in the LoadTest or the operator log\n' >&2
		return 1
	fi
	printf 'Secret quickstart-control: a 64-character token owned by LoadTest quickstart; the shard pod names only its file\n'
}

operator_binary() {
	OPERATOR_BIN="$("$ROOT/scripts/cargo-build.sh" debug)/wsload-operator"
}

# live_run CASE LOADGEN_IMAGE SERVER_IMAGE PLACEMENTS(true|false): the CASE rendering installed
# for real, wsload-operator run here with its Deployment's env and the ServiceAccount's token.
live_run() {
	local loadgen_image="$2" server_image="$3" placed="$4" token server ca port phase events
	values="$1"
	step "the chart's RBAC in action ($values install): wsload-operator as the chart's ServiceAccount"
	kubectl apply -f "$WORK/rendered/$values.yaml" >/dev/null
	expect_can no "get secrets -n $WATCH_NS" "list secrets -A" "watch secrets -n $NS" \
		"get secrets/quickstart-control -n $WATCH_NS" "update secrets -n $WATCH_NS" "delete secrets -n $WATCH_NS" \
		"create loadtests -n $WATCH_NS" "update loadtests -n $WATCH_NS" "patch loadtests -n $WATCH_NS" \
		"delete configmaps -n $WATCH_NS" "list configmaps -n $WATCH_NS" "get leases -n $WATCH_NS" \
		"update leases/other -n $NS" "create pods --subresource=exec -n $WATCH_NS" "list nodes"
	expect_can yes "watch loadtests -n $WATCH_NS" "patch loadtests --subresource=status -n $WATCH_NS" \
		"delete loadtests -n $WATCH_NS" "create pods -n $WATCH_NS" "delete services -n $WATCH_NS" \
		"patch configmaps -n $WATCH_NS" "create events.events.k8s.io -n $WATCH_NS" \
		"update leases/wsload-operator -n $NS" "create secrets -n $WATCH_NS"
	if [[ "$values" == namespaced ]]; then
		expect_can no "list loadtests -A" "create pods -n default" "list pods -n $NS"
	else
		expect_can yes "watch loadtests -A" "watch pods -A" "get namespaces/$WATCH_NS" \
			"get customresourcedefinitions/loadtests.wsload.dev"
		expect_can no "list namespaces" "patch namespaces/$WATCH_NS" "list customresourcedefinitions" \
			"get customresourcedefinitions/other.example.com" "patch customresourcedefinitions/loadtests.wsload.dev"
	fi
	printf 'ServiceAccount %s: Secrets created only, never read; nothing beyond its rules; its rules granted\n' "$SA"
	prometheus_rbac
	prometheus_start

	# A kubeconfig holding the ServiceAccount's token, not the admin certificate.
	token="$(kubectl -n "$NS" create token "$RELEASE" --duration=10m)"
	server="$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')"
	ca="$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')"
	cat >"$WORK/operator.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: operator, user: {token: "$token"}}]
contexts: [{name: c, context: {cluster: c, user: operator}}]
current-context: c
EOF
	chmod 0600 "$WORK/operator.kubeconfig"

	# The container's env from the Deployment as the server stored it, the downward API filled
	# in as the kubelet would, metrics on loopback, the control key's mounted file a copy of the
	# chart's Secret here.
	port="$(free_ports 1)"
	kubectl -n "$NS" get secret "$RELEASE-control-key" -o jsonpath='{.data.key}' | base64 -d >"$WORK/control-key"
	chmod 0600 "$WORK/control-key"
	mapfile -t op_env < <(kubectl -n "$NS" get deploy "$RELEASE" -o json | python3 -c '
import json, sys
c = json.load(sys.stdin)["spec"]["template"]["spec"]["containers"][0]
for e in c["env"]:
    if "value" in e:
        v = e["value"]
    else:
        v = {"metadata.name": "wsload-check-0", "metadata.namespace": sys.argv[1]}[e["valueFrom"]["fieldRef"]["fieldPath"]]
    if e["name"] == "WSLOAD_OPERATOR_METRICS_LISTEN":
        v = "127.0.0.1:" + sys.argv[2]
    if e["name"] == "WSLOAD_OPERATOR_CONTROL_KEY_FILE":
        v = sys.argv[3]
    print(e["name"] + "=" + v)
' "$NS" "$port" "$WORK/control-key")
	env -i PATH="$PATH" HOME="$HOME" KUBECONFIG="$WORK/operator.kubeconfig" "${op_env[@]}" \
		"$OPERATOR_BIN" run >"$WORK/operator-$values.log" 2>&1 &
	OPERATOR_PID=$!

	operator_wait 30 "the operator holding the Lease (/readyz 200)" curl -fsS "http://127.0.0.1:$port/readyz"
	holder="$(kubectl -n "$NS" get lease wsload-operator -o jsonpath='{.spec.holderIdentity}')"
	[[ "$holder" == wsload-check-0 ]] || fail "Lease wsload-operator is held by '$holder', not wsload-check-0"
	printf 'leader: %s holds Lease %s/wsload-operator\n' "$holder" "$NS"

	kubectl -n "$WATCH_NS" apply -f "$WORK/notes-loadtest.yaml" >/dev/null
	operator_wait 30 "the managed server pod quickstart-server" kubectl -n "$WATCH_NS" get pod quickstart-server
	operator_wait 30 "the managed server Service quickstart-server" kubectl -n "$WATCH_NS" get service quickstart-server
	if [[ "$placed" == true ]]; then
		pod_has quickstart-server "$server_image" '{"pool": "servers"}' - true || fail "(above)"
	else
		pod_has quickstart-server "$server_image" '{}' - false || fail "(above)"
	fi
	# No kubelet here: bind the pod and mark it ready as a kubelet would, so shards follow.
	kubectl create --raw "/api/v1/namespaces/$WATCH_NS/pods/quickstart-server/binding" -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "quickstart-server"}, "target": {"apiVersion": "v1", "kind": "Node", "name": "node-0"}}
EOF
	kubectl -n "$WATCH_NS" patch pod quickstart-server --subresource=status --type=merge -p \
		'{"status": {"phase": "Running", "podIP": "10.244.0.10", "podIPs": [{"ip": "10.244.0.10"}], "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]}}' >/dev/null
	operator_wait 30 "the shard pod quickstart-shard-0" kubectl -n "$WATCH_NS" get pod quickstart-shard-0
	control_secret_ok || fail "(above)"
	if [[ "$placed" == true ]]; then
		pod_has quickstart-shard-0 "$loadgen_image" '{"pool": "loadgen"}' dedicated false || fail "(above)"
	else
		pod_has quickstart-shard-0 "$loadgen_image" '{}' - false || fail "(above)"
	fi
	phase="$(kubectl -n "$WATCH_NS" get lt quickstart -o jsonpath='{.status.phase}')"
	[[ "$phase" == Starting ]] || fail "LoadTest quickstart is in phase '$phase', expected Starting (status written by the operator)"
	operator_wait 15 "an Event on the LoadTest" has_events
	events="$(kubectl -n "$WATCH_NS" get events.events.k8s.io -o name | wc -l)"
	printf 'LoadTest quickstart: phase %s, %s Event(s)\n' "$phase" "$events"
	prometheus_check

	stop_process "$OPERATOR_PID"
	OPERATOR_PID=""
	if grep -Ei 'forbidden|\b403\b' "$WORK/operator-$values.log" | tail -n 5 >&2; then
		fail "wsload-operator was refused a request with the $values install's RBAC (above; all: $WORK/operator-$values.log)"
	fi
	printf 'wsload-operator made no forbidden request\n'

	# Clean slate for the next install (no garbage collector, no kubelet here).
	kubectl delete -f "$WORK/rendered/$values.yaml" --wait=false >/dev/null
	kubectl -n "$WATCH_NS" delete lt,pods,services,configmaps,secrets,events.events.k8s.io --all \
		--grace-period=0 --force --wait=false >/dev/null 2>&1
}

operator_binary
live_run full "registry.test:5000/wsload/loadgen:0.1.0-check" "registry.test:5000/wsload/server:$app_version" true
live_run namespaced "wsload/loadgen:$app_version" "wsload/server:$app_version" false

# shellcheck disable=SC2034 # read by the clean-up at exit (at_exit above)
OK=1
printf '\n==> chart checks passed in %ss\n' "$((SECONDS - started))"
