#!/usr/bin/env bash
# Where shard pods land, on the nodes of a real cluster (issue 25): run after scripts/e2e/smoke.sh
# (examples/kind/smoke.sh --placement), on the install it made (chart, operator, images on the
# nodes). Each check is a small LoadTest of a few seconds, named place-*-ID, deleted at exit:
#   spread      2 shards `spread: onePerNode` on the loadgen pool land on two distinct
#               wsload.dev/loadgen-pool nodes, never on the server's node or a control plane
#               (each pod's spec.nodeName against the nodes' labels); Succeeded, verdict Pass
#   too-many    one shard more than loadgen-pool nodes, one per node, scheduling deadline 10s:
#               Failed with reason ShardsUnschedulable within the deadline, the message naming
#               the shard left over and the scheduler's reason
#   big-node    a worker of the loadgen pool tainted and labelled here (undone at exit); 2
#               shards with its toleration and node selector: both on it, none elsewhere;
#               Succeeded, verdict Pass
#   sysctls     1 shard with spec.loadgen.sysctls: the values its `wsload kernel:` log line
#               read from /proc/sys inside the pod are the ones asked for
#
# usage: scripts/e2e/placement.sh
#
# spread needs 2 loadgen-pool nodes and big-node one that is not in the server pool; on a
# smaller cluster (the project's single node carries both pool labels) they fail, unless
# WSLOAD_PLACEMENT_ALLOW_SKIP=1, which skips them saying so.
#
# Environment:
#   KUBECTL                      kubectl binary (default: the project's pinned one, else PATH)
#   WSLOAD_E2E_OUT               where the statuses are written (default: a new temporary directory)
#   WSLOAD_PLACEMENT_ALLOW_SKIP  1: skip the checks the cluster has too few nodes for
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LOG_NAME=placement
# shellcheck source=scripts/lib/common.sh
source "$ROOT/scripts/lib/common.sh"
# shellcheck source=scripts/lib/e2e.sh
source "$ROOT/scripts/lib/e2e.sh"
TEST_NS=default
# One run's LoadTests, node label and taint: two runs on one cluster never touch each other's.
ID="$(printf '%04x' $((RANDOM % 65536)))"
RUN_LABEL="wsload.dev/e2e-placement"
BIG_KEY="wsload.dev/big-node"
LOADGEN_POOL="wsload.dev/loadgen-pool"
SERVER_POOL="wsload.dev/server-pool"
# The scheduling deadline of the too-many check, and how much later than it the failure may be
# written (a reconcile a second, the status write, seconds-granular timestamps).
SCHEDULING=10
SCHEDULING_SLACK=15
SKIPPED=()
[[ $# -eq 0 ]] || usage

started=$SECONDS
e2e_begin placement
kubectl -n "$NS" get deployment "$RELEASE" >/dev/null 2>&1 ||
	fail "no Deployment $NS/$RELEASE: install the chart first (scripts/e2e/smoke.sh does)"
at_exit 'kubectl -n "$TEST_NS" delete loadtest -l "$RUN_LABEL=$ID" --ignore-not-found --wait=false >/dev/null 2>&1'

# --- the nodes ------------------------------------------------------------------------------
step "nodes"
kubectl get nodes -L "$SERVER_POOL" -L "$LOADGEN_POOL" -L node-role.kubernetes.io/control-plane
kubectl get nodes -o json >"$OUT/nodes.json"
# nodes JQ-FILTER: the names of the nodes FILTER selects (given the node as `.`).
nodes() { jq -r --arg lg "$LOADGEN_POOL" --arg sv "$SERVER_POOL" ".items[] | select($1) | .metadata.name" "$OUT/nodes.json"; }
in_loadgen_pool='.metadata.labels[$lg] == "true" and (.spec.unschedulable | not)'
mapfile -t LOADGEN_NODES < <(nodes "$in_loadgen_pool")
mapfile -t CONTROL_PLANES < <(nodes '.metadata.labels | has("node-role.kubernetes.io/control-plane")')
# A big node must not be where the managed server runs: the taint would not let it back on.
mapfile -t BIG_CANDIDATES < <(nodes "$in_loadgen_pool and .metadata.labels[\$sv] != \"true\"")
echo "loadgen pool: ${LOADGEN_NODES[*]:-none}; control plane: ${CONTROL_PLANES[*]:-none}"
((${#LOADGEN_NODES[@]} >= 1)) || fail "no schedulable node labelled $LOADGEN_POOL=true: nothing to place shards on"

# needs CHECK HAVE WANT WHAT: CHECK can run when HAVE >= WANT; otherwise it fails, or is skipped
# under WSLOAD_PLACEMENT_ALLOW_SKIP=1 (returns 1 then).
needs() {
	(($2 >= $3)) && return 0
	if [[ "${WSLOAD_PLACEMENT_ALLOW_SKIP:-0}" == 1 ]]; then
		echo "placement: $1 needs $3 $4, this cluster has $2: skipped (WSLOAD_PLACEMENT_ALLOW_SKIP=1)"
		SKIPPED+=("$1")
		return 1
	fi
	fail "$1 needs $3 $4, this cluster has $2 (WSLOAD_PLACEMENT_ALLOW_SKIP=1 skips it)"
}

# --- helpers --------------------------------------------------------------------------------
# apply NAME SPEC-JSON: a LoadTest of this run named NAME with SPEC.
apply() {
	jq -n --arg name "$1" --arg key "$RUN_LABEL" --arg id "$ID" --argjson spec "$2" '{
		apiVersion: "wsload.dev/v1alpha1", kind: "LoadTest",
		metadata: {name: $name, labels: {($key): $id}}, spec: $spec}' |
		kubectl -n "$TEST_NS" apply -f -
}
# spec SHARDS LOADGEN-JSON [TARGET-JSON]: a few seconds of echo over 4 connections, SHARDS
# shards placed by LOADGEN (spec.loadgen), against TARGET (default: a managed server in the
# server pool). Pods are kept until the LoadTest goes: their nodes and logs are read after.
spec() {
	jq -n --argjson shards "$1" --argjson loadgen "$2" --argjson target "${3:-null}" --arg sv "$SERVER_POOL" '{
		target: ($target // {server: {profile: "echo", placement: {nodeSelector: {($sv): "true"}}}}),
		scenario: "throughput", connections: [4], duration: "2s", warmup: "1s", shards: $shards,
		message: {size: 64}, thresholds: ["errors < 1%"],
		loadgen: $loadgen, run: {cleanup: "keep"}}'
}
# pods NAME ROLE: "POD NODE" of the LoadTest's pods of ROLE (shard, server), one a line.
pods() {
	kubectl -n "$TEST_NS" get pods -l "wsload.dev/loadtest=$1,wsload.dev/role=$2" -o json |
		jq -r '.items[] | "\(.metadata.name) \(.spec.nodeName // "-")"'
}
# placed NAME: the LoadTest's pods and their nodes, for the log.
placed() {
	echo "LoadTest $1's pods:"
	{ pods "$1" server; pods "$1" shard; } | awk '{ print "  " $1 " on " $2 }'
}
contains() { # word list...: word is one of list
	local w="$1"
	shift
	for x; do [[ "$x" != "$w" ]] || return 0; done
	return 1
}
pool_selector() { jq -nc --arg lg "$LOADGEN_POOL" '{nodeSelector: {($lg): "true"}}'; }

# --- too-many: applied first, checked last (it waits out its scheduling deadline) -------------
too_many="place-toomany-$ID"
want_shards=$((${#LOADGEN_NODES[@]} + 1))
step "too-many: $want_shards shards one per node on ${#LOADGEN_NODES[@]} loadgen-pool node(s), scheduling deadline ${SCHEDULING}s"
# An address nothing answers on: the shards are never released, so none needs a server.
apply "$too_many" "$(spec "$want_shards" "$(jq -nc --argjson p "$(pool_selector)" '{placement: $p, spread: "onePerNode"}')" \
	'{"url": "ws://192.0.2.1:9/"}' | jq --arg s "${SCHEDULING}s" '.run.deadlines.scheduling = $s')"

# --- sysctls --------------------------------------------------------------------------------
step "sysctls: spec.loadgen.sysctls in force inside the shard pod"
sysctls="place-sysctls-$ID"
# Two safe sysctls (every kubelet allows them) and one unsafe one that examples/kind/cluster.yaml
# and the project's node allow (allowedUnsafeSysctls), each at a value no default has.
declare -A ASKED=([net.ipv4.ip_local_port_range]="20000 40000" [net.ipv4.tcp_fin_timeout]="17"
	[net.core.somaxconn]="1234")
asked_json="$(for k in "${!ASKED[@]}"; do jq -nc --arg k "$k" --arg v "${ASKED[$k]}" '{($k): $v}'; done | jq -sc add)"
# Beside the server on one node, so this check runs on any cluster.
apply "$sysctls" "$(spec 1 "$(jq -nc --argjson p "$(pool_selector)" --argjson s "$asked_json" \
	'{placement: $p, spread: "none", separateFromServer: false, sysctls: $s}')")"
wait_done "$sysctls" 120
placed "$sysctls"
expect "$sysctls" Succeeded - Pass
kubectl -n "$TEST_NS" logs "$sysctls-shard-0" >"$OUT/$sysctls-shard-0.log" 2>&1 ||
	fail "kubectl logs $sysctls-shard-0 failed: $(tail -n 3 "$OUT/$sysctls-shard-0.log")"
# The line is crates/wsload-contract's announce::KernelLine.
kernel_line="$(grep -m1 '^wsload kernel: ' "$OUT/$sysctls-shard-0.log" || true)"
[[ -n "$kernel_line" ]] ||
	fail "shard $sysctls-shard-0 logged no 'wsload kernel: ' line (its log: $OUT/$sysctls-shard-0.log)"
echo "$sysctls-shard-0: $kernel_line"
for key in "${!ASKED[@]}"; do
	got="$(grep -oE " ${key//./\\.}=\"[^\"]*\"" <<<"$kernel_line" | sed -E 's/^[^"]*"//; s/"$//' || true)"
	got="${got:-(absent)}"
	[[ "$got" == "${ASKED[$key]}" ]] ||
		fail "sysctl $key in shard pod $sysctls-shard-0 is '$got'; spec.loadgen.sysctls asked '${ASKED[$key]}' (line: $kernel_line)"
done
echo "sysctls in force in the shard pod, as asked: $asked_json"
timed sysctls

# --- spread ---------------------------------------------------------------------------------
spread="place-spread-$ID"
if needs spread "${#LOADGEN_NODES[@]}" 2 "schedulable $LOADGEN_POOL=true nodes"; then
	step "spread: 2 shards onePerNode on the loadgen pool, apart from the server"
	apply "$spread" "$(spec 2 "$(jq -nc --argjson p "$(pool_selector)" '{placement: $p, spread: "onePerNode"}')")"
	wait_done "$spread" 120
	placed "$spread"
	expect "$spread" Succeeded - Pass
	server_node="$(pods "$spread" server | awk '{print $2}')"
	mapfile -t shard_nodes < <(pods "$spread" shard | awk '{print $2}')
	((${#shard_nodes[@]} == 2)) || fail "LoadTest $spread has ${#shard_nodes[@]} shard pods; want 2"
	[[ "${shard_nodes[0]}" != "${shard_nodes[1]}" ]] ||
		fail "LoadTest $spread: both shards on node ${shard_nodes[0]}; onePerNode wants two nodes"
	for n in "${shard_nodes[@]}"; do
		contains "$n" "${LOADGEN_NODES[@]}" ||
			fail "LoadTest $spread: a shard on node $n, not one of the loadgen pool (${LOADGEN_NODES[*]})"
		[[ "$n" != "$server_node" ]] || fail "LoadTest $spread: a shard on node $n, the server's node"
		! contains "$n" "${CONTROL_PLANES[@]}" || fail "LoadTest $spread: a shard on node $n, a control plane"
	done
	echo "shards on ${shard_nodes[*]} (loadgen pool), server on $server_node: as expected"
	timed spread
fi

# --- too-many, checked ----------------------------------------------------------------------
step "too-many: the verdict"
wait_done "$too_many" 120
placed "$too_many"
got="$(jq -r '[.status.phase, .status.reason // "-"] | join(" ")' "$OUT/$too_many.json")"
[[ "$got" == "Failed ShardsUnschedulable" ]] || {
	diagnose "$too_many"
	fail "LoadTest $too_many ended '$got' (phase, reason); want 'Failed ShardsUnschedulable'"
}
message="$(jq -r .status.message "$OUT/$too_many.json")"
echo "message: $message"
[[ "$message" == "1 of $want_shards shards not scheduled within ${SCHEDULING}s: shard "[0-9]*": unschedulable: "*"nodes are available"* ]] || {
	diagnose "$too_many"
	fail "LoadTest $too_many: message '$message'; want '1 of $want_shards shards not scheduled within ${SCHEDULING}s: shard N: unschedulable: <the scheduler's reason: ... nodes are available ...>'"
}
left_over="$(jq -c '[.status.shards[] | select(.reason // "" | startswith("unschedulable: ")) | .index]' "$OUT/$too_many.json")"
[[ "$(jq length <<<"$left_over")" == 1 && "$message" == *"shard $(jq '.[0]' <<<"$left_over"): "* ]] || {
	diagnose "$too_many"
	fail "LoadTest $too_many: status.shards says shards $left_over are unschedulable; want the one the message names"
}
took="$(jq '(.status.completionTime | fromdateiso8601) - (.status.startTime | fromdateiso8601)' "$OUT/$too_many.json")"
((took <= SCHEDULING + SCHEDULING_SLACK)) ||
	fail "LoadTest $too_many failed ${took}s after its start; want within its ${SCHEDULING}s scheduling deadline (+${SCHEDULING_SLACK}s)"
echo "LoadTest $too_many: Failed ShardsUnschedulable ${took}s after its start (scheduling deadline ${SCHEDULING}s): as expected"
timed too-many

# --- big-node -------------------------------------------------------------------------------
big="place-big-$ID"
if needs big-node "${#BIG_CANDIDATES[@]}" 1 "$LOADGEN_POOL node outside $SERVER_POOL"; then
	node="${BIG_CANDIDATES[-1]}"
	step "big-node: $node tainted $BIG_KEY=$ID:NoSchedule and labelled; 2 shards tolerating it and selecting it"
	at_exit 'kubectl taint node "$node" "$BIG_KEY:NoSchedule-" >/dev/null 2>&1; kubectl label node "$node" "$BIG_KEY-" >/dev/null 2>&1'
	kubectl label node "$node" "$BIG_KEY=$ID" --overwrite >/dev/null
	kubectl taint node "$node" "$BIG_KEY=$ID:NoSchedule" --overwrite >/dev/null
	apply "$big" "$(spec 2 "$(jq -nc --arg k "$BIG_KEY" --arg id "$ID" '{
		placement: {nodeSelector: {($k): $id},
			tolerations: [{key: $k, operator: "Equal", value: $id, effect: "NoSchedule"}]},
		spread: "none"}')")"
	wait_done "$big" 120
	placed "$big"
	expect "$big" Succeeded - Pass
	mapfile -t shard_nodes < <(pods "$big" shard | awk '{print $2}')
	((${#shard_nodes[@]} == 2)) || fail "LoadTest $big has ${#shard_nodes[@]} shard pods; want 2"
	for n in "${shard_nodes[@]}"; do
		[[ "$n" == "$node" ]] || fail "LoadTest $big: a shard on node $n; want every shard on the big node $node"
	done
	echo "both shards on the big node $node: as expected"
	timed big-node
fi

printf '\nplacement: PASS in %ss (%s)%s; statuses in %s\n' "$((SECONDS - started))" "$(
	IFS=,
	echo "${TIMES[*]}"
)" "${SKIPPED[*]:+; skipped: ${SKIPPED[*]}}" "$OUT"
