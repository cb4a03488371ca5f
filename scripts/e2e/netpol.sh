#!/usr/bin/env bash
# The chart's NetworkPolicies, enforced: run after scripts/e2e/smoke.sh (its install: release
# wsload in wsload-system, the shard and server policies also in wsload-e2e), on a cluster whose
# network enforces NetworkPolicy (scripts/k8s/node-smoke.sh starts kube-router's policy
# controller on the node cluster for it). A shard's port 9464 serves its control API; only the
# operator (and the chart's Prometheus) may reach it:
#   1. LoadTest netpol (examples/smoke.yaml, 20 s, 10 connections): while it runs, a probe pod
#      in wsload-e2e from the shard's own image, which is not the operator, runs `wsload run`
#      against shard 0's pod IP, port 9464: its one connection is refused (or times out)
#   2. LoadTest netpol ends Succeeded with verdict Pass and its figures: the operator's
#      requests (start, cell, result, finish) got through the same policies
#   3. the chart's shard policy deleted, LoadTest netpol-open: the same probe reaches the
#      shard's port (an HTTP answer), so the block in 1 was the policy's; the policy is put
#      back as it was
# 66 s on the node cluster (2 shared cores): probe refused 10 s, LoadTest to Succeeded 22 s,
# probe with the policy deleted and its LoadTest 34 s.
#
# usage: scripts/e2e/netpol.sh
#
# Environment:
#   KUBECTL                  kubectl binary (default: kubectl on PATH)
#   WSLOAD_E2E_SINGLE_NODE=1 one node: LoadTests get loadgen {spread: none, separateFromServer: false}
#   WSLOAD_E2E_OUT           where the statuses and the probes' output are written (default: a
#                            new temporary directory)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LOG_NAME=netpol
# shellcheck source=scripts/lib/common.sh
source "$ROOT/scripts/lib/common.sh"
# shellcheck source=scripts/lib/e2e.sh
source "$ROOT/scripts/lib/e2e.sh"
TEST_NS=wsload-e2e
SHARD_POLICY="$RELEASE-shards"
SHARD_PORT=9464
[[ $# -eq 0 ]] || usage

started=$SECONDS
e2e_begin netpol
kubectl -n "$TEST_NS" get networkpolicy "$SHARD_POLICY" -o json >"$OUT/shard-policy.json" 2>/dev/null ||
	fail "no NetworkPolicy $TEST_NS/$SHARD_POLICY: install the chart with networkPolicy.namespaces={$TEST_NS} first (scripts/e2e/smoke.sh does)"
# The policy as helm made it, for putting back after check 3 (a failure in between too).
jq 'del(.metadata.uid, .metadata.resourceVersion, .metadata.creationTimestamp, .metadata.generation,
	.metadata.managedFields, .status)' "$OUT/shard-policy.json" >"$OUT/shard-policy.restore.json"
restore_policy() {
	kubectl -n "$TEST_NS" get networkpolicy "$SHARD_POLICY" >/dev/null 2>&1 ||
		kubectl -n "$TEST_NS" create -f "$OUT/shard-policy.restore.json" >/dev/null
}
at_exit restore_policy
at_exit 'kubectl -n "$TEST_NS" delete pod,configmap -l app.kubernetes.io/name=wsload-netpol-probe --ignore-not-found --wait=false >/dev/null 2>&1'
at_exit 'kubectl -n "$TEST_NS" delete loadtest netpol netpol-open --ignore-not-found --wait=false >/dev/null 2>&1'

# start_loadtest NAME: examples/smoke.yaml as NAME, 20 s at 10 connections (long enough for a
# probe pod to start and connect while the shards serve), Running.
start_loadtest() {
	kubectl -n "$TEST_NS" delete loadtest "$1" --ignore-not-found --wait=true >/dev/null
	kubectl -n "$TEST_NS" create --dry-run=client -o json -f "$ROOT/examples/smoke.yaml" |
		jq --arg name "$1" --arg one "${WSLOAD_E2E_SINGLE_NODE:-0}" '
			.metadata.name = $name | .spec.duration = "20s" | .spec.connections = [10]
			| if $one == "1" then .spec.loadgen = {spread: "none", separateFromServer: false} else . end' |
		kubectl -n "$TEST_NS" apply -f - >/dev/null
	wait_phase "$1" Running 180
}

probe_done() { [[ "$(kubectl -n "$TEST_NS" get pod "$1" -o jsonpath='{.status.phase}')" =~ ^(Succeeded|Failed)$ ]]; }

# probe_shard NAME LOADTEST: a pod that is not the operator (the shard's own image, no wsload labels)
# opens one WebSocket connection to shard 0 of LOADTEST on its pod IP, port 9464; sets
# PROBE_OUTCOME to how it ended (wsload's connect failure reasons: refused, timeout,
# upgrade_rejected, ...). Its output is kept in $OUT/NAME.log.
probe_shard() {
	local name="$1" lt="$2" shard image ip
	shard="$lt-shard-0"
	image="$(kubectl -n "$TEST_NS" get pod "$shard" -o jsonpath='{.spec.containers[0].image}')"
	ip="$(kubectl -n "$TEST_NS" get pod "$shard" -o jsonpath='{.status.podIP}')"
	[[ -n "$image" && -n "$ip" ]] || fail "pod $shard has no image or no IP (LoadTest $lt Running?)"
	# One connection, 5 s to connect: a refused SYN answers at once, a dropped one times out.
	kubectl -n "$TEST_NS" create configmap "$name" --from-literal=probe.yaml="$(
		jq -n --arg url "ws://$ip:$SHARD_PORT/" '{apiVersion: "wsload.dev/v1alpha1", kind: "LoadTest",
			metadata: {name: "probe"}, spec: {target: {url: $url}, scenario: "throughput",
			connections: [1], duration: "1s", warmup: "0s", connect: {timeout: "5s"}}}'
	)" --dry-run=client -o json |
		jq '.metadata.labels["app.kubernetes.io/name"] = "wsload-netpol-probe"' |
		kubectl -n "$TEST_NS" apply -f - >/dev/null
	# What the namespace's Pod Security level ("restricted") admits.
	jq -n --arg name "$name" --arg image "$image" '{apiVersion: "v1", kind: "Pod",
		metadata: {name: $name, labels: {"app.kubernetes.io/name": "wsload-netpol-probe"}},
		spec: {restartPolicy: "Never",
			securityContext: {runAsNonRoot: true, seccompProfile: {type: "RuntimeDefault"}},
			volumes: [{name: "lt", configMap: {name: $name}}],
			containers: [{name: "probe", image: $image, imagePullPolicy: "IfNotPresent",
				args: ["run", "/lt/probe.yaml"], volumeMounts: [{name: "lt", mountPath: "/lt"}],
				securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: ["ALL"]}}}]}}' |
		kubectl -n "$TEST_NS" apply -f - >/dev/null
	WAIT_INTERVAL=0.5 wait_until 60 probe_done "$name" || {
		kubectl -n "$TEST_NS" describe pod "$name" | tail -n 20 >&2 || true
		fail "probe pod $name did not finish within 60 s"
	}
	kubectl -n "$TEST_NS" logs "$name" >"$OUT/$name.log" 2>&1 || true
	# "note: no connection to URL succeeded in cell 1 (refused x1)"
	PROBE_OUTCOME="$(sed -n 's/^note: no connection to .* succeeded in cell 1 (\([a-z_]*\) x1)$/\1/p' "$OUT/$name.log")"
	if [[ -z "$PROBE_OUTCOME" ]] && grep -q 'Verdict: PASS' "$OUT/$name.log"; then
		PROBE_OUTCOME=connected
	fi
	[[ -n "$PROBE_OUTCOME" ]] || {
		cat "$OUT/$name.log" >&2
		fail "probe $name: no outcome in its output (above)"
	}
	echo "probe $name (image $image) -> $shard $ip:$SHARD_PORT: $PROBE_OUTCOME"
	kubectl -n "$TEST_NS" delete pod,configmap "$name" --wait=false >/dev/null
}

step "policies enforced: a pod that is not the operator probes a running shard's port $SHARD_PORT"
start_loadtest netpol
probe_shard netpol-probe-blocked netpol
case "$PROBE_OUTCOME" in
refused | timeout) echo "blocked, as the policy $TEST_NS/$SHARD_POLICY says" ;;
*) fail "a pod that is not the operator reached shard 0's port $SHARD_PORT ($PROBE_OUTCOME): the policy $TEST_NS/$SHARD_POLICY is not enforced (does the cluster's network enforce NetworkPolicy?)" ;;
esac
timed "probe blocked"

step "the operator's requests pass the same policies: LoadTest netpol to Succeeded"
wait_done netpol
expect netpol Succeeded - Pass
jq -c '.status | {achievedRate, p99, shards: [.shards[] | {index, state}],
	tiers: [.tiers[] | {connections, messagesPerSecond, errors}]}' "$OUT/netpol.json"
jq -e '[.status.shards[] | select(.state == "Collected")] | length == 2' "$OUT/netpol.json" >/dev/null ||
	{ diagnose netpol; fail "LoadTest netpol: not every shard's result was collected through the policy"; }
timed "operator through"

step "the shard policy deleted: the same probe reaches the port"
kubectl -n "$TEST_NS" delete networkpolicy "$SHARD_POLICY" >/dev/null
start_loadtest netpol-open
probe_shard netpol-probe-open netpol-open
case "$PROBE_OUTCOME" in
# The port answered: HTTP's refusal of the upgrade (the control API is no WebSocket server),
# or a connection the port accepted then closed.
upgrade_rejected | upgrade_invalid | auth_failed | closed_early | connected)
	echo "reached without the policy: the block above was the policy's"
	;;
*) fail "with $TEST_NS/$SHARD_POLICY deleted the probe still did not reach the port ($PROBE_OUTCOME): the block was not (only) the policy's" ;;
esac
restore_policy
wait_done netpol-open
expect netpol-open Succeeded - Pass
timed "probe open"

printf '\nnetpol: PASS in %ss (%s); statuses and probe output in %s\n' "$((SECONDS - started))" "$(
	IFS=,
	echo "${TIMES[*]}"
)" "$OUT"
