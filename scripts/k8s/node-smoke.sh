#!/usr/bin/env bash
# End-to-end check of the single-node cluster (cluster.sh) with our own images:
#   1. the server, load-generator and operator images (scripts/build-image.sh),
#      upstream Prometheus built from source (prometheus.sh), helm: all cached
#   2. `cluster.sh up`, the four images imported into the node's containerd
#   3. a plain pod from the server image (imagePullPolicy Never) gets Ready;
#      the host reaches its /healthz on the pod IP; `kubectl logs` works
#      (API server -> kubelet)
#   4. pod to pod and pod to ClusterIP (kube-proxy): a load-generator pod runs
#      `wsload run` against the server pod's IP and its Service, both PASS
#   5. scripts/e2e/smoke.sh --faults, the same smoke test kind users run: the
#      operator and a Prometheus from charts/wsload (helm), examples/smoke.yaml
#      (managed server, 2 shards) to Succeeded/Pass, Prometheus' pod discovery
#      scraped every pod, then a shard, the operator and the server deleted
#      mid-run, each ending in its defined state with its results kept
#      and, with --preset, examples/socketio.yaml through the operator against a real
#      Socket.IO server (npm socket.io, scripts/test-servers/) on the host, reached from the
#      pods at the CNI bridge's address: Succeeded/Pass with its figures in status
#   6. scripts/e2e/placement.sh's checks one node holds: a shard more than nodes one per node
#      fails as ShardsUnschedulable within its scheduling deadline, and spec.loadgen.sysctls
#      are in force in a shard pod (the multi-node ones are kind's, skipped here)
#   7. scripts/e2e/netpol.sh under `cluster.sh netpol` (kube-router's policy controller, which
#      the bridge plugin lacks): a pod that is not the operator is refused at a running shard's
#      control port, the operator's LoadTest Succeeds through the same policies, and the probe
#      gets through once the chart's shard policy is deleted
#   8. `cluster.sh down` leaves no bridge, mount, pod cgroup, KUBE-* chain or kube-router ipset
#
# Environment:
#   WSLOAD_K8S_KEEP=1  keep the temporary directory (logs) afterwards; it is
#                      always kept when a check fails
set -euo pipefail

K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$K8S_DIR/../.." && pwd)"
# shellcheck source=scripts/k8s/versions.sh
source "$K8S_DIR/versions.sh"

# shellcheck source=scripts/lib/common.sh
source "$ROOT/scripts/lib/common.sh"

[[ $EUID -eq 0 ]] || fail "needs root (containerd, kubelet, network namespaces)"
# One node cluster per machine (cluster.sh): two runs at once (two people's
# scripts/test) take turns instead of the second failing.
exec {HOST_LOCK}>/run/wsload-node-smoke.lock
if ! flock -n "$HOST_LOCK"; then
	echo "node-smoke: another node-smoke runs on this machine; waiting (at most 10 min)"
	flock -w 600 "$HOST_LOCK" || fail "another node-smoke held /run/wsload-node-smoke.lock for 10 min"
fi
started=$SECONDS
MARK=$SECONDS

step "images (scripts/build-image.sh, cached)"
declare -A TAR
for image in server loadgen operator; do
	nice -n 19 "$ROOT/scripts/build-image.sh" "$image" 2>&1 | tail -n 1
done
TARGET_DIR="$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps | jq -r .target_directory)"
TAR[server]="$TARGET_DIR/images/wsload-server.tar"
TAR[loadgen]="$TARGET_DIR/images/wsload.tar"
TAR[operator]="$TARGET_DIR/images/wsload-operator.tar"
declare -A TAG
for image in server loadgen operator; do
	TAG[$image]="$(tar -xOf "${TAR[$image]}" manifest.json | jq -r '.[0].RepoTags[0]')"
done
[[ "${TAG[server]##*:}" == "${TAG[operator]##*:}" && "${TAG[loadgen]##*:}" == "${TAG[operator]##*:}" ]] ||
	fail "the images disagree on their tag (${TAG[*]}): rebuild them from one checkout"
# The chart's minimal Prometheus, built from source (no image can be pulled here).
TAR[prometheus]="$(nice -n 19 "$K8S_DIR/prometheus.sh")" || fail "scripts/k8s/prometheus.sh failed (above)"
HELM="$("$ROOT/scripts/tools.sh" helm)" || fail "scripts/tools.sh helm failed (above)"
timed "images+helm"

# Short: containerd's socket path lives under it.
WORK="$(mktemp -d /tmp/wsload-node.XXXXXX)"
CLUSTER="$WORK/c"
OK=0
DOWN=0 # set once the closing check has run `cluster.sh down` itself
node_teardown() {
	((DOWN)) && return
	step "teardown"
	"$K8S_DIR/cluster.sh" down "$CLUSTER" || true
	if ((OK)) && [[ "${WSLOAD_K8S_KEEP:-0}" != 1 ]]; then
		rm -rf "$WORK"
	else
		printf 'kept %s (logs: %s/*.log, pod logs gone with the node)\n' "$WORK" "$CLUSTER" >&2
	fi
}
at_exit node_teardown
trap 'exit 130' INT
trap 'exit 143' TERM

# kubectl: common.sh's, the one build.sh made (K8S_BIN_DIR), pointed at the
# cluster by `cluster.sh up`'s KUBECONFIG.
export KUBECACHEDIR="$WORK/kube-cache" HELM_CACHE_HOME="$WORK/helm/cache" \
	HELM_CONFIG_HOME="$WORK/helm/config" HELM_DATA_HOME="$WORK/helm/data"

step "cluster up"
# The lock closed for it, or the daemons would hold it after a crash of this script.
eval "$("$K8S_DIR/cluster.sh" up "$CLUSTER" {HOST_LOCK}>&-)"
timed "cluster up"
"$K8S_DIR/cluster.sh" load "$CLUSTER" "${TAR[server]}" "${TAR[loadgen]}" "${TAR[operator]}" "${TAR[prometheus]}"
timed "image import"
kubectl get nodes -o wide

step "a server pod from ${TAG[server]}, host -> pod IP"
kubectl apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: server, labels: {app: server}}
spec:
  containers:
  - name: server
    image: ${TAG[server]}
    imagePullPolicy: Never
    args: [--listen, "0.0.0.0:8080", --metrics-listen, "0.0.0.0:9090", --profile, echo]
    readinessProbe: {httpGet: {path: /readyz, port: 9090}, periodSeconds: 1}
EOF
kubectl wait --for=condition=Ready pod/server --timeout=120s ||
	fail "pod server not Ready (kubectl describe above; $CLUSTER/kubelet.log, $CLUSTER/containerd.log)"
ip="$(kubectl get pod server -o jsonpath='{.status.podIP}')"
[[ "$(curl -fsS --max-time 5 "http://$ip:9090/healthz")" == ok ]] || fail "no /healthz from the server pod at $ip:9090"
echo "host -> pod $ip:9090/healthz: ok"
# Read whole, then matched (grep -q closing the pipe early fails it under pipefail), and again
# for a few seconds: the line may reach the container's log file after the pod is Ready.
logged=""
for _ in {1..20}; do
	logged="$(kubectl logs server 2>/dev/null || true)"
	[[ "$logged" == *'listening on'* ]] && break
	sleep 0.5
done
[[ "$logged" == *'listening on'* ]] || fail "kubectl logs server shows no 'listening on' ($CLUSTER/kubelet.log)"
echo "kubectl logs server: ok"
timed "server pod"

step "pod -> pod IP and pod -> ClusterIP: wsload run from ${TAG[loadgen]}"
kubectl expose pod server --name server --port 8080
cip="$(kubectl get service server -o jsonpath='{.spec.clusterIP}')"
lt() { # name url
	printf '    apiVersion: wsload.dev/v1alpha1\n    kind: LoadTest\n    metadata: {name: %s}\n' "$1"
	printf '    spec:\n      target: {url: "%s"}\n      scenario: throughput\n      connections: [10]\n' "$2"
	printf '      duration: 3s\n      warmup: 1s\n      thresholds: ["errors < 1%%", "throughput > 1K msg/s"]\n'
}
kubectl apply -f - <<EOF
apiVersion: v1
kind: ConfigMap
metadata: {name: loadtests}
data:
  pod.yaml: |
$(lt pod-to-pod "ws://$ip:8080/")
  service.yaml: |
$(lt pod-to-service "ws://$cip:8080/")
---
apiVersion: v1
kind: Pod
metadata: {name: loadgen}
spec:
  restartPolicy: Never
  volumes: [{name: lt, configMap: {name: loadtests}}]
  containers:
  - {name: pod, image: "${TAG[loadgen]}", imagePullPolicy: Never, args: [run, /lt/pod.yaml], volumeMounts: [{name: lt, mountPath: /lt}]}
  - {name: service, image: "${TAG[loadgen]}", imagePullPolicy: Never, args: [run, /lt/service.yaml], volumeMounts: [{name: lt, mountPath: /lt}]}
EOF
pod_phase() { kubectl get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null || true; }
pod_ended() {
	local phase
	phase="$(pod_phase "$1")"
	[[ "$phase" == Succeeded || "$phase" == Failed ]]
}
ok=0
if WAIT_INTERVAL=1 wait_until 120 pod_ended loadgen; then
	[[ "$(pod_phase loadgen)" == Succeeded ]] && ok=1
else
	phase="$(pod_phase loadgen)"
	log "pod/loadgen still ${phase:-without a phase} after 120s"
fi
if ((ok)); then
	for c in pod service; do kubectl logs loadgen -c "$c" | grep -E 'Verdict|^\| 10 ' || true; done
else
	# The cluster is torn down after a failure, so everything needed to tell why is printed here.
	kubectl describe pod loadgen || true
	for c in pod service; do
		log "kubectl logs loadgen -c $c:"
		kubectl logs loadgen -c "$c" 2>&1 | tail -n 60 || true
	done
	fail "pod loadgen did not succeed (its description and container logs above)"
fi
timed "pod traffic"

step "a real Socket.IO server on the host, for the pods (scripts/test-servers/)"
# The pods' gateway is the host's address on the CNI bridge: what they reach the host at.
bridge_ip="$(ip -4 -o addr show dev cni0 | awk '{ sub(/\/.*/, "", $4); print $4; exit }')"
[[ -n "$bridge_ip" ]] || fail "the CNI bridge cni0 has no IPv4 address"
mkfifo "$WORK/socketio.line"
"$ROOT/scripts/test-servers/run.sh" socketio --host "$bridge_ip" >"$WORK/socketio.line" 2>"$WORK/socketio.log" &
# shellcheck disable=SC2034 # read by the clean-up at exit
socketio_pid=$!
at_exit 'stop_process "$socketio_pid"'
read -r -t 120 socketio_line <"$WORK/socketio.line" ||
	fail "the Socket.IO server printed no line within 120 s ($WORK/socketio.log)"
socketio_port="$(jq -r .port <<<"$socketio_line")"
echo "Socket.IO on $bridge_ip:$socketio_port (pods' gateway)"
timed "socketio server"

step "the cluster smoke test (scripts/e2e/smoke.sh): chart, Prometheus, a 2-shard LoadTest, fault runs, the Socket.IO preset"
# The same script kind users run (examples/kind/smoke.sh); one node, so its LoadTests put both
# shards and the server on it.
KUBECTL="$K8S_BIN_DIR/kubectl" HELM="$HELM" WSLOAD_E2E_TAG="${TAG[operator]##*:}" WSLOAD_E2E_SINGLE_NODE=1 \
	WSLOAD_E2E_PROMETHEUS=install WSLOAD_E2E_OUT="$WORK/e2e" "$ROOT/scripts/e2e/smoke.sh" --faults \
	--preset socketio "$bridge_ip:$socketio_port" ||
	fail "scripts/e2e/smoke.sh (above; statuses in $WORK/e2e, daemon logs in $CLUSTER)"
jq -r '.status | "Socket.IO preset through the operator: \(.phase) \(.verdict), rtt \(.tiers[0].rtt)"' "$WORK/e2e/socketio.json"
jq -c . <<<"$(curl -fsS --max-time 5 "http://$bridge_ip:$socketio_port/stats")" || true
timed "e2e smoke + faults"

step "placement (scripts/e2e/placement.sh): the checks one node can hold"
# One node carrying both pools: shards one per node beyond it are named unschedulable, and
# sysctls are read back from a shard; spreading over nodes and a big node need kind's nodes
# (./scripts/test kind), so they are skipped here, saying so.
KUBECTL="$K8S_BIN_DIR/kubectl" WSLOAD_PLACEMENT_ALLOW_SKIP=1 WSLOAD_E2E_OUT="$WORK/placement" \
	"$ROOT/scripts/e2e/placement.sh" || fail "scripts/e2e/placement.sh (above; statuses in $WORK/placement)"
timed placement

step "NetworkPolicy enforced (scripts/e2e/netpol.sh): kube-router's policy controller on the node"
# Last: its host rules stay until `cluster.sh down`, which removes them (checked below).
"$K8S_DIR/cluster.sh" netpol "$CLUSTER" {HOST_LOCK}>&- || fail "cluster.sh netpol failed (above; $CLUSTER/kube-router.log)"
KUBECTL="$K8S_BIN_DIR/kubectl" WSLOAD_E2E_SINGLE_NODE=1 WSLOAD_E2E_OUT="$WORK/netpol" \
	"$ROOT/scripts/e2e/netpol.sh" || fail "scripts/e2e/netpol.sh (above; statuses in $WORK/netpol, $CLUSTER/kube-router.log)"
timed netpol

step "teardown leaves nothing behind"
DOWN=1
"$K8S_DIR/cluster.sh" down "$CLUSTER"
timed "cluster down"
leftover=()
ip link show cni0 >/dev/null 2>&1 && leftover+=("bridge cni0")
grep -qF " $WORK/" /proc/self/mountinfo && leftover+=("mounts under $WORK")
# Captured, not piped into grep -q: under pipefail an early grep exit can fail the pipe.
[[ -n "$(find /sys/fs/cgroup -maxdepth 2 -path '*kubepods*')" ]] && leftover+=("kubepods cgroups")
grep -q KUBE- <<<"$(iptables-save 2>/dev/null)" && leftover+=("KUBE-* iptables chains")
grep -Eq '^KUBE-(SRC|DST)-' <<<"$(ipset list -n 2>/dev/null)" && leftover+=("kube-router ipsets")
for p in kubelet containerd kube-apiserver etcd kube-router; do
	[[ -f "$CLUSTER/$p.pid" ]] && leftover+=("$p.pid")
done
((${#leftover[@]} == 0)) || {
	printf 'kept %s\n' "$WORK" >&2
	fail "left behind after down: ${leftover[*]}"
}
OK=1
if [[ "${WSLOAD_K8S_KEEP:-0}" == 1 ]]; then
	printf 'kept %s\n' "$WORK"
else
	rm -rf "$WORK"
fi

printf '\nnode-smoke: PASS in %ss (%s)\n' "$((SECONDS - started))" "$(
	IFS=,
	echo "${TIMES[*]}"
)"
