#!/usr/bin/env bash
# The kind path for users, run for real on a project machine: dockerd (dockerd.sh), the kind
# node image built here (kind-image.sh), kind from the Go module proxy (scripts/tools.sh kind),
# then examples/kind/smoke.sh --placement --delete on a 1 control plane + 3 worker cluster
# (examples/kind/cluster.yaml) from that image: what the users' workflow runs, plus where shards
# land on four nodes. Not --faults: the node part runs the same fault runs (scripts/e2e/smoke.sh
# --faults) on a real kubelet, and the three of them here cost 82 s of the suite for nothing
# the operator does differently on kind. Stops the dockerd it started at the end,
# so the machine is as before (dockerd runs without iptables rules either way: the node
# cluster's FORWARD policy stays ACCEPT, checked here).
#
# usage: scripts/k8s/kind-smoke.sh
# Environment: WSLOAD_CACHE (default ~/.cache/wsload); WSLOAD_KIND_KEEP=1 keeps the cluster and
# dockerd afterwards (smoke.sh without --delete), to look around.
set -euo pipefail

K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$K8S_DIR/../.." && pwd)"
# shellcheck source=scripts/k8s/versions.sh
source "$K8S_DIR/versions.sh"
LOG_NAME=kind-smoke
# shellcheck source=scripts/lib/common.sh
source "$ROOT/scripts/lib/common.sh"

[[ $EUID -eq 0 ]] || fail "needs root (dockerd, mmdebstrap)"
started=$SECONDS
forward_before="$(iptables -S FORWARD 2>/dev/null | head -n 1 || true)"

step "dockerd (scripts/k8s/dockerd.sh up)"
docker_was_up=0
timeout 10 docker info >/dev/null 2>&1 && docker_was_up=1
"$K8S_DIR/dockerd.sh" up
keep="${WSLOAD_KIND_KEEP:-0}"
if ((!docker_was_up && !keep)); then
	at_exit '"$K8S_DIR/dockerd.sh" down || true'
fi
timed dockerd

step "kind node image (scripts/k8s/kind-image.sh, cached)"
t=$SECONDS
image="$("$K8S_DIR/kind-image.sh")"
echo "  $image in $((SECONDS - t))s"
KIND="$("$ROOT/scripts/tools.sh" kind)"
HELM="$("$ROOT/scripts/tools.sh" helm)"
# The chart's minimal Prometheus: no registry to pull it from here (built from source, cached).
PROMETHEUS_TAR="$(nice -n 19 "$K8S_DIR/prometheus.sh")" || fail "scripts/k8s/prometheus.sh failed (above)"
"$K8S_DIR/build.sh" kubectl
timed image

args=(--placement)
((keep)) || args+=(--delete)
rc=0
KIND="$KIND" HELM="$HELM" KUBECTL="$K8S_BIN_DIR/kubectl" WSLOAD_KIND_IMAGE="$image" WSLOAD_KIND_LOAD="$PROMETHEUS_TAR" \
	nice -n 5 "$ROOT/examples/kind/smoke.sh" "${args[@]}" || rc=$?
timed smoke

forward_after="$(iptables -S FORWARD 2>/dev/null | head -n 1 || true)"
if [[ "$forward_after" != "$forward_before" ]]; then
	log "the FORWARD policy changed: '$forward_before' -> '$forward_after' (the node cluster needs it as it was)"
	rc=1
fi
summary="$(
	IFS=,
	echo "${TIMES[*]}"
)"
((rc == 0)) || fail "examples/kind/smoke.sh failed after $((SECONDS - started))s ($summary)"
printf '\nkind-smoke: PASS in %ss (%s)\n' "$((SECONDS - started))" "$summary"
