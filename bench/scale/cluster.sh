#!/usr/bin/env bash
# usage: bench/scale/cluster.sh [CONNECTIONS]
#
# The scale test through the operator: bench/scale/hold-100k.yaml (sustainedHold, 6 shards,
# 6 server replicas) as a LoadTest on the single-node cluster of scripts/k8s/cluster.sh, with
# the chart's operator. One node carries every pod, so the LoadTest gets
# `loadgen: {spread: none, separateFromServer: false}`; the shards dial the server's Service
# (kube-proxy spreads connections over the replica pods). Prints the LoadTest's status and
# ends with one line:
#   cluster: phase=P verdict=V connections=N held=H survival=S% open_s=O reason=R
# CONNECTIONS (default 100000) replaces the tier. Needs root (containerd, kubelet).
#
# Environment: WSLOAD_K8S_KEEP=1 keeps the temporary directory (logs) afterwards; it is always
# kept when the run fails. WSLOAD_SCALE_TIMEOUT: seconds to wait for the end (default 900).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
K8S_DIR=$ROOT/scripts/k8s
# shellcheck source=scripts/k8s/versions.sh
source "$K8S_DIR/versions.sh"
# shellcheck source=scripts/lib/common.sh
source "$ROOT/scripts/lib/common.sh"

connections=${1:-100000}
timeout=${WSLOAD_SCALE_TIMEOUT:-900}
[[ $EUID -eq 0 ]] || fail "needs root (containerd, kubelet, network namespaces)"
# One node cluster per machine: wait for a node-smoke of the suite rather than fail.
exec {HOST_LOCK}>/run/wsload-node-smoke.lock
flock -w 600 "$HOST_LOCK" || fail "another node cluster held /run/wsload-node-smoke.lock for 10 min"

step "images (scripts/build-image.sh, cached)"
for image in server loadgen operator; do
	nice -n 19 "$ROOT/scripts/build-image.sh" "$image" 2>&1 | tail -n 1
done
target_dir=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
tars=("$target_dir/images/wsload-server.tar" "$target_dir/images/wsload.tar" "$target_dir/images/wsload-operator.tar")
tag=$(tar -xOf "$target_dir/images/wsload-operator.tar" manifest.json | jq -r '.[0].RepoTags[0]')
HELM=$("$ROOT/scripts/tools.sh" helm) || fail "scripts/tools.sh helm failed (above)"

WORK=$(mktemp -d /tmp/wsload-scale.XXXXXX)
CLUSTER=$WORK/c
OK=0
teardown() {
	step "teardown"
	"$K8S_DIR/cluster.sh" down "$CLUSTER" || true
	if ((OK)) && [[ ${WSLOAD_K8S_KEEP:-0} != 1 ]]; then
		rm -rf "$WORK"
	else
		log "kept $WORK (logs: $CLUSTER/*.log)"
	fi
}
at_exit teardown
trap 'exit 130' INT
trap 'exit 143' TERM
export KUBECACHEDIR=$WORK/kube-cache HELM_CACHE_HOME=$WORK/helm/cache \
	HELM_CONFIG_HOME=$WORK/helm/config HELM_DATA_HOME=$WORK/helm/data

step "cluster up"
eval "$("$K8S_DIR/cluster.sh" up "$CLUSTER" {HOST_LOCK}>&-)"
"$K8S_DIR/cluster.sh" load "$CLUSTER" "${tars[@]}"
step "helm install charts/wsload (operator $tag)"
"$HELM" upgrade --install wsload "$ROOT/charts/wsload" --namespace wsload-system --create-namespace \
	--wait --timeout 5m --set "image.tag=${tag##*:}" --set "loadgen.image.tag=${tag##*:}" \
	--set "server.image.tag=${tag##*:}"

step "LoadTest scale-hold: $connections connections"
kubectl create --dry-run=client -o json -f "$here/hold-100k.yaml" |
	jq --argjson n "$connections" '.spec.connections = [$n]
		| .spec.loadgen = {spread: "none", separateFromServer: false}' |
	kubectl apply -f -
scale_phase() { kubectl get loadtest scale-hold -o jsonpath='{.status.phase}' 2>/dev/null || true; }
scale_done() { [[ $(scale_phase) == Succeeded || $(scale_phase) == Failed ]]; }
started=$SECONDS
last=
until scale_done; do
	now=$(scale_phase)
	[[ $now == "$last" ]] || log "phase ${now:-none} after $((SECONDS - started)) s"
	last=$now
	((SECONDS - started < timeout)) || break
	sleep 2
done
kubectl get loadtest scale-hold -o json >"$WORK/status.json"
kubectl get loadtest scale-hold
kubectl get pods -o wide
jq '.status | {phase, reason, message, verdict, startSkewMillis, cells, tiers: [.tiers[]? | {connections, survival, errors, rtt, connect}], shards: [.shards[] | {index, state, message}]}' "$WORK/status.json" >&2 || true
if ! scale_done; then
	kubectl -n wsload-system logs deploy/wsload --tail=40 >&2 || true
	fail "the LoadTest did not end within $timeout s (phase $(scale_phase))"
fi
summary=$(jq -r --argjson n "$connections" '.status as $s | ($s.tiers // [])[0] as $t
	| "cluster: phase=\($s.phase) verdict=\($s.verdict // "none") connections=\($n) held=\($t.survived // "?") survival=\(($t.survival // 0) * 100 | tostring | .[0:6])% open_s=\($t.connectSeconds // "?") reason=\($s.reason // "none")"' "$WORK/status.json")
[[ $(scale_phase) == Succeeded ]] && OK=1
echo "$summary"
