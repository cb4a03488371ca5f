#!/usr/bin/env bash
# The cluster smoke test on kind: a 4-node cluster from examples/kind/cluster.yaml, the three
# wsload images built from this checkout and loaded into it, then scripts/e2e/smoke.sh (the
# same test the project runs on its bare-process node): helm install of charts/wsload with
# examples/kind/values.yaml (and the chart's minimal Prometheus unless one runs), the
# examples/smoke.yaml LoadTest (managed server + 2 shards, one per load-generator node) to
# Succeeded with verdict Pass, its status and verdict printed, Prometheus' scrapes checked.
# Exits non-zero when any of that fails. What it proves and what to expect: README.md here.
#
# usage: examples/kind/smoke.sh [--faults] [--placement] [--delete]
#   --faults     then the fault runs of scripts/e2e/smoke.sh (a shard, the operator, the server
#                deleted mid-run)
#   --placement  then scripts/e2e/placement.sh: where shards land on the nodes (one per
#                load-generator node, unschedulable ones named, a tainted big node, sysctls)
#   --delete  delete the kind cluster at the end, passed or not (default: keep it, to look
#             around or rerun; a rerun reuses it)
#
# Needs a Linux x86_64 host (scripts/build-image.sh builds static musl binaries on the host),
# a running Docker daemon, kind (v0.30.0, the release the node image was built for), kubectl,
# helm, jq, python3, Rust (rustup, cargo) and musl-gcc (Debian/Ubuntu: musl-tools).
#
# Environment:
#   WSLOAD_KIND_CLUSTER  cluster name (default wsload); an existing cluster of that name is
#                        reused as it is
#   WSLOAD_KIND_CONFIG   kind config for a new cluster (default examples/kind/cluster.yaml)
#   WSLOAD_KIND_IMAGE    node image for a new cluster instead of the config's (kind --image)
#   WSLOAD_KIND_LOAD     more image tarballs to `kind load image-archive`, space separated (for
#                        images the nodes cannot pull, e.g. Prometheus where no registry is
#                        reachable)
#   KIND, KUBECTL, HELM  binaries (default: on PATH; without helm, scripts/tools.sh builds the
#                        project's pinned one when Go is installed)
#   WSLOAD_E2E_VALUES    more helm values files after examples/kind/values.yaml
#   WSLOAD_E2E_OUT       where scripts/e2e/smoke.sh writes the LoadTest statuses
#   WSLOAD_E2E_PROMETHEUS  auto | install | skip, as in scripts/e2e/smoke.sh
set -euo pipefail

KIND_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$KIND_DIR/../.." && pwd)"
LOG_NAME=kind-smoke
# shellcheck source=scripts/lib/common.sh
source "$ROOT/scripts/lib/common.sh"
# The kind release the pinned node image in cluster.yaml was published with; the workflow
# installs this one and scripts/check-kind.sh keeps the two in step.
KIND_VERSION=v0.30.0
MUSL_TARGET=x86_64-unknown-linux-musl

CLUSTER="${WSLOAD_KIND_CLUSTER:-wsload}"
CONFIG="${WSLOAD_KIND_CONFIG:-$KIND_DIR/cluster.yaml}"
KIND="${KIND:-kind}"
KUBECTL="${KUBECTL:-kubectl}"
HELM="${HELM:-}"
E2E_ARGS=()
DELETE=0
PLACEMENT=0

for arg in "$@"; do
	case "$arg" in
	--faults) E2E_ARGS+=(--faults) ;;
	--placement) PLACEMENT=1 ;;
	--delete) DELETE=1 ;;
	*) usage ;; # -h and --help too
	esac
done

say() { printf '%s: %s\n' "$LOG_NAME" "$*"; }
started=$SECONDS

step "tools"
# Every missing tool is named at once, with how to get it, rather than one per run.
missing=()
need() { # command how-to-get-it
	command -v "$1" >/dev/null || missing+=("$1: $2")
}
[[ "$(uname -sm)" == "Linux x86_64" ]] ||
	fail "needs a Linux x86_64 host: scripts/build-image.sh cross-builds static x86_64 musl binaries on the host (this is $(uname -sm))"
need docker "Docker Engine (https://docs.docker.com/engine/install/)"
need "$KIND" "kind $KIND_VERSION: go install sigs.k8s.io/kind@$KIND_VERSION (or the release binary)"
need "$KUBECTL" "kubectl, ideally v1.33 like the nodes (https://kubernetes.io/docs/tasks/tools/)"
need jq "jq (apt-get install jq)"
need python3 "python3 (scripts/build-image.sh reads the Dockerfiles with it)"
need cargo "Rust: https://rustup.rs"
need rustup "rustup (https://rustup.rs): scripts/build-image.sh adds the $MUSL_TARGET target with it"
# build-image.sh installs musl-tools itself where apt-get is; elsewhere it must be there.
command -v musl-gcc >/dev/null || command -v apt-get >/dev/null ||
	missing+=("musl-gcc: the musl C toolchain (Debian/Ubuntu: musl-tools; others: the distribution's musl-gcc)")
if [[ -z "$HELM" ]]; then
	if command -v helm >/dev/null; then
		HELM=helm
	elif command -v go >/dev/null; then
		HELM="$("$ROOT/scripts/tools.sh" helm)" || fail "scripts/tools.sh helm failed (above); or install helm v3"
	else
		missing+=("helm: Helm v3 (https://helm.sh/docs/intro/install/), or Go so that scripts/tools.sh builds it")
	fi
else
	need "$HELM" "Helm v3 (https://helm.sh/docs/intro/install/)"
fi
if ((${#missing[@]})); then
	log "missing:"
	printf '  %s\n' "${missing[@]}" >&2
	exit 1
fi
timeout 20 docker info >/dev/null 2>&1 ||
	fail "the Docker daemon does not answer 'docker info' (start it, or check that this user may use it)"
kind_version="$("$KIND" version 2>/dev/null | awk '{print $2}')"
if [[ "$kind_version" != "$KIND_VERSION" ]]; then
	say "warning: $KIND is ${kind_version:-of an unknown version}; the node image in cluster.yaml was built for kind $KIND_VERSION"
fi
# Captured first: with pipefail, grep -q leaving early could fail the pipe and the test.
if ! grep -qx "$MUSL_TARGET" <<<"$(rustup target list --installed)"; then
	say "the $MUSL_TARGET Rust target is not installed; scripts/build-image.sh adds it (rustup target add)"
fi
say "docker $(docker version --format '{{.Server.Version}}'), kind ${kind_version:-?}, kubectl $("$KUBECTL" version --client -o json | jq -r .clientVersion.gitVersion), helm $("$HELM" version --template '{{.Version}}')"
timed tools

step "kind cluster $CLUSTER"
if grep -qx "$CLUSTER" <<<"$("$KIND" get clusters 2>/dev/null)"; then
	say "reusing the existing kind cluster $CLUSTER (delete it for a fresh one: $KIND delete cluster --name $CLUSTER)"
else
	create=(create cluster --name "$CLUSTER" --config "$CONFIG" --wait 3m)
	[[ -n "${WSLOAD_KIND_IMAGE:-}" ]] && create+=(--image "$WSLOAD_KIND_IMAGE")
	"$KIND" "${create[@]}" || fail "kind create cluster failed (above)"
fi
# A kubeconfig of its own: every kubectl and helm call below reaches this cluster whatever
# the user's current context is, and the user's context is left as it was.
WORK="$(mktemp -d "${TMPDIR:-/tmp}/wsload-kind.XXXXXX")"
at_exit 'if ((DELETE)); then step "deleting kind cluster $CLUSTER"; "$KIND" delete cluster --name "$CLUSTER" || true; fi'
at_exit 'rm -rf "$WORK"'
trap 'exit 130' INT
trap 'exit 143' TERM
export KUBECONFIG="$WORK/kubeconfig"
"$KIND" get kubeconfig --name "$CLUSTER" >"$KUBECONFIG" || fail "kind get kubeconfig --name $CLUSTER failed"
"$KUBECTL" wait --for=condition=Ready nodes --all --timeout=180s >/dev/null ||
	{ "$KUBECTL" get nodes -o wide || true; fail "not every node of $CLUSTER is Ready after 3 min (above)"; }
"$KUBECTL" get nodes -o wide -L wsload.dev/server-pool -L wsload.dev/loadgen-pool
# A reused cluster made from another config would leave the shards Pending for minutes; say
# why now.
loadgen_nodes="$("$KUBECTL" get nodes -l wsload.dev/loadgen-pool=true -o name | wc -l)"
server_nodes="$("$KUBECTL" get nodes -l wsload.dev/server-pool=true -o name | wc -l)"
((loadgen_nodes >= 2 && server_nodes >= 1)) ||
	fail "cluster $CLUSTER has $loadgen_nodes node(s) labelled wsload.dev/loadgen-pool=true and $server_nodes wsload.dev/server-pool=true; the smoke LoadTest needs 2 and 1 (examples/kind/cluster.yaml)"
timed cluster

step "images (scripts/build-image.sh server|loadgen|operator, cached)"
for image in server loadgen operator; do
	"$ROOT/scripts/build-image.sh" "$image" || fail "scripts/build-image.sh $image failed (above)"
done
TARGET_DIR="$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps | jq -r .target_directory)"
TAG=""
for tar in wsload-server wsload wsload-operator; do
	tar="$TARGET_DIR/images/$tar.tar"
	ref="$(tar -xOf "$tar" manifest.json | jq -r '.[0].RepoTags[0]')" || fail "$tar has no manifest.json"
	# scripts/e2e/smoke.sh takes one tag for all three, as the chart does.
	[[ -z "$TAG" || "${ref##*:}" == "$TAG" ]] || fail "$tar is $ref, the others are tagged $TAG"
	TAG="${ref##*:}"
	# build-image.sh leaves the image in the Docker daemon when it built it there (the usual
	# case: it uses docker whenever a daemon answers); a buildah-built one exists only as $tar.
	if docker image inspect "$ref" >/dev/null 2>&1; then
		step "kind load docker-image $ref"
		"$KIND" load docker-image "$ref" --name "$CLUSTER" || fail "kind load docker-image $ref failed (above)"
	else
		step "kind load image-archive $tar ($ref is not in the Docker daemon)"
		"$KIND" load image-archive "$tar" --name "$CLUSTER" || fail "kind load image-archive $tar failed (above)"
	fi
done
for tar in ${WSLOAD_KIND_LOAD:-}; do
	step "kind load image-archive $tar"
	"$KIND" load image-archive "$tar" --name "$CLUSTER" || fail "kind load image-archive $tar failed (above)"
done
timed images

step "scripts/e2e/smoke.sh${E2E_ARGS[*]/#/ } (tag $TAG, values examples/kind/values.yaml)"
rc=0
# Pod IPs are inside Docker's network, not this host's: the anonymous control probe runs on
# the node cluster (./scripts/test node), where they are on the host's bridge.
WSLOAD_E2E_CONTROL_PROBE=skip \
	KUBECTL="$KUBECTL" HELM="$HELM" WSLOAD_E2E_TAG="$TAG" \
	WSLOAD_E2E_VALUES="$KIND_DIR/values.yaml${WSLOAD_E2E_VALUES:+ $WSLOAD_E2E_VALUES}" \
	"$ROOT/scripts/e2e/smoke.sh" "${E2E_ARGS[@]}" || rc=$?
timed e2e
if ((PLACEMENT && !rc)); then
	step "scripts/e2e/placement.sh"
	KUBECTL="$KUBECTL" HELM="$HELM" WSLOAD_E2E_TAG="$TAG" "$ROOT/scripts/e2e/placement.sh" || rc=$?
	timed placement
fi

summary="$(
	IFS=,
	echo "${TIMES[*]}"
)"
if ((rc)); then
	printf '\nkind-smoke: FAILED after %ss (%s); cluster %s %s\n' "$((SECONDS - started))" "$summary" "$CLUSTER" \
		"$( ((DELETE)) && echo "to be deleted now (--delete)" || echo "kept: $KIND export logs --name $CLUSTER DIR")" >&2
	exit "$rc"
fi
printf '\nkind-smoke: PASS in %ss (%s)\n' "$((SECONDS - started))" "$summary"
