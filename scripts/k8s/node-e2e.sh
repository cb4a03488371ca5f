#!/usr/bin/env bash
# Issue 6 on the single-node cluster (cluster.sh): the operator installed from
# charts/wsload with helm (its own RBAC, not cluster-admin), then LoadTests with
# a managed server and 2 shards, clean and with faults injected mid-run:
#   clean             Succeeded, verdict Pass
#   shard deleted     Failed, condition Failed/ShardFailed, missingShards [1]
#   operator deleted  the Deployment's new pod takes the Lease and finishes it: Succeeded
#   server deleted    Failed, condition Failed/ServerLost
# One node, so every LoadTest says `loadgen: {spread: none, separateFromServer: false}`.
# Not in scripts/test yet (~105 s warm, passes; add it once it has more runs behind it);
# run it by hand as root.
#
# Environment:
#   WSLOAD_K8S_KEEP=1  keep the temporary directory (logs) afterwards; it is
#                      always kept when a check fails
set -euo pipefail

K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$K8S_DIR/../.." && pwd)"
# shellcheck source=scripts/k8s/versions.sh
source "$K8S_DIR/versions.sh"

step() { printf '\n==> %s\n' "$*"; }
fail() {
	printf 'node-e2e: FAILED: %s\n' "$*" >&2
	exit 1
}
TIMES=()
MARK=$SECONDS
timed() {
	TIMES+=("$1 $((SECONDS - MARK))s")
	MARK=$SECONDS
}

[[ $EUID -eq 0 ]] || fail "needs root (containerd, kubelet, network namespaces)"
# The same turn-taking as node-smoke.sh: one node cluster per machine.
exec {HOST_LOCK}>/run/wsload-node-smoke.lock
if ! flock -n "$HOST_LOCK"; then
	echo "node-e2e: another node-smoke or node-e2e runs on this machine; waiting (at most 10 min)"
	flock -w 600 "$HOST_LOCK" || fail "/run/wsload-node-smoke.lock held for 10 min"
fi
started=$SECONDS

step "images and helm (cached)"
for image in server loadgen operator; do
	nice -n 19 "$ROOT/scripts/build-image.sh" "$image" 2>&1 | tail -n 1
done
TARGET_DIR="$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps | jq -r .target_directory)"
declare -A TAR=([server]="$TARGET_DIR/images/wsload-server.tar" [loadgen]="$TARGET_DIR/images/wsload.tar"
	[operator]="$TARGET_DIR/images/wsload-operator.tar")
declare -A TAGV
for image in server loadgen operator; do
	t="$(tar -xOf "${TAR[$image]}" manifest.json | jq -r '.[0].RepoTags[0]')"
	TAGV[$image]="${t##*:}"
done
HELM="$("$ROOT/scripts/tools.sh" helm)" || fail "scripts/tools.sh helm failed (above)"
timed "images+helm"

WORK="$(mktemp -d /tmp/wsload-node.XXXXXX)"
CLUSTER="$WORK/c"
OK=0
cleanup() {
	step "teardown"
	"$K8S_DIR/cluster.sh" down "$CLUSTER" || true
	if ((OK)) && [[ "${WSLOAD_K8S_KEEP:-0}" != 1 ]]; then
		rm -rf "$WORK"
	else
		printf 'kept %s (logs: %s/*.log)\n' "$WORK" "$CLUSTER" >&2
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
export KUBECACHEDIR="$WORK/kube-cache" HELM_CACHE_HOME="$WORK/helm/cache" \
	HELM_CONFIG_HOME="$WORK/helm/config" HELM_DATA_HOME="$WORK/helm/data"
kubectl() { "$K8S_BIN_DIR/kubectl" "$@"; }

step "cluster up, images imported"
eval "$("$K8S_DIR/cluster.sh" up "$CLUSTER" {HOST_LOCK}>&-)"
"$K8S_DIR/cluster.sh" load "$CLUSTER" "${TAR[server]}" "${TAR[loadgen]}" "${TAR[operator]}"
timed "cluster up"

step "the operator from charts/wsload (helm install)"
"$HELM" install wsload "$ROOT/charts/wsload" --namespace wsload-system --create-namespace \
	--set image.tag="${TAGV[operator]}" --set loadgen.image.tag="${TAGV[loadgen]}" \
	--set server.image.tag="${TAGV[server]}" --wait --timeout 3m ||
	fail "helm install failed (above; kubectl -n wsload-system describe pods)"
kubectl -n wsload-system get pods -o wide
timed "helm install"

loadtest() { # name duration
	kubectl apply -f - <<EOF
apiVersion: wsload.dev/v1alpha1
kind: LoadTest
metadata: {name: $1, namespace: default}
spec:
  target: {server: {profile: echo}}
  scenario: throughput
  connections: [10]
  duration: $2
  warmup: 1s
  shards: 2
  loadgen: {spread: none, separateFromServer: false}
  thresholds: ["errors < 1%", "throughput > 1K msg/s"]
EOF
}
phase() { kubectl get loadtest "$1" -o jsonpath='{.status.phase}' 2>/dev/null || true; }
wait_running() {
	local deadline=$((SECONDS + 120))
	until [[ "$(phase "$1")" == Running ]]; do
		((SECONDS < deadline)) || fail "LoadTest $1 not Running after 120s (phase '$(phase "$1")')"
		sleep 0.5
	done
}
wait_done() { # name: prints the final phase
	local deadline=$((SECONDS + 180)) p
	while :; do
		p="$(phase "$1")"
		[[ "$p" == Succeeded || "$p" == Failed ]] && break
		((SECONDS < deadline)) || fail "LoadTest $1 not finished after 180s (phase '$p')"
		sleep 1
	done
	kubectl get loadtest "$1" >&2
	printf '%s\n' "$p"
}
failed_reason() {
	kubectl get loadtest "$1" -o jsonpath='{.status.conditions[?(@.type=="Failed")].status} {.status.conditions[?(@.type=="Failed")].reason}'
}
expect() { # name want-phase want-failed-reason|-
	local got reason
	got="$(wait_done "$1")"
	reason="$(failed_reason "$1")"
	if [[ "$got" != "$2" ]] || { [[ "$3" != - ]] && [[ "$reason" != "True $3" ]]; }; then
		kubectl get loadtest "$1" -o json | jq '.status | {phase, verdict, missingShards, shards, conditions}' >&2 || true
		kubectl -n wsload-system logs deploy/wsload --tail=30 >&2 || true
		fail "LoadTest $1: phase $got (want $2), Failed condition '$reason' (want $3)"
	fi
	echo "LoadTest $1: $got${reason:+ ($reason)} as expected"
}

step "a clean run: managed server, 2 shards"
loadtest clean 3s
expect clean Succeeded -
[[ "$(kubectl get loadtest clean -o jsonpath='{.status.verdict}')" == Pass ]] || fail "LoadTest clean: verdict not Pass"
timed "clean"

step "a shard pod deleted mid-run"
loadtest shard-deleted 20s
wait_running shard-deleted
sleep 6
kubectl delete pod shard-deleted-shard-1 --wait=false
expect shard-deleted Failed ShardFailed
[[ "$(kubectl get loadtest shard-deleted -o jsonpath='{.status.missingShards}')" == "[1]" ]] ||
	fail "LoadTest shard-deleted: missingShards is not [1]"
timed "shard deleted"

step "the operator pod deleted mid-run"
loadtest operator-deleted 20s
wait_running operator-deleted
sleep 6
kubectl -n wsload-system delete pod -l app.kubernetes.io/name=wsload --wait=false
expect operator-deleted Succeeded -
timed "operator deleted"

step "the server pod deleted mid-run"
loadtest server-deleted 20s
wait_running server-deleted
sleep 6
kubectl delete pod server-deleted-server --wait=false
expect server-deleted Failed ServerLost
timed "server deleted"

trap - EXIT
"$K8S_DIR/cluster.sh" down "$CLUSTER"
OK=1
if [[ "${WSLOAD_K8S_KEEP:-0}" == 1 ]]; then printf 'kept %s\n' "$WORK"; else rm -rf "$WORK"; fi
timed "down"
printf '\nnode-e2e: PASS in %ss (%s)\n' "$((SECONDS - started))" "$(
	IFS=,
	echo "${TIMES[*]}"
)"
