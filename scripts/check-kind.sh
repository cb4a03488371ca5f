#!/usr/bin/env bash
# Offline checks of the kind path for users (examples/kind/, .github/workflows/kind-smoke.yml),
# which cannot run here (no Docker daemon, no node image):
#   1. examples/kind/cluster.yaml through kind's own code (scripts/lib/kind-render.go, built
#      from the kind release the workflow installs): strict decoding, defaults, validation,
#      each node's kubeadm config rendered and the kubeadmConfigPatches applied
#   2. helm template charts/wsload -f examples/kind/values.yaml renders
#   3. scripts/lib/check-kind.py on those: 1 control plane and >= 3 workers, one node image
#      pinned by digest at the project's Kubernetes minor, labels reaching the kubelet, the
#      values' nodeSelectors matching enough workers (a node per shard of examples/smoke.yaml,
#      a server node, the pools apart), allowedUnsafeSysctls equal to the unsafe net.* sysctls
#      the project names for shards (spec doc comments, docs, example LoadTests) against the
#      kubelet's safe list, kind version, cluster name and kubectl version the same in the
#      script, the config and the workflow, actions pinned by commit, every script the
#      workflow runs present and executable; broken variants of each must be rejected first
#   4. actionlint on the workflow (with shellcheck on its run: blocks when shellcheck is there)
#   5. bash -n and shellcheck of the shell scripts (shellcheck from apt when root and missing)
#
# kind-render and actionlint are built from the Go module proxy into
# ${WSLOAD_CACHE:-~/.cache/wsload}/bin, like scripts/tools.sh does for helm: about 20 s together with
# an empty Go build cache, nothing once built. A warm run takes about 2 s.
#
# Environment:
#   WSLOAD_CACHE  cache root (default ~/.cache/wsload)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/common.sh
source "$ROOT/scripts/lib/common.sh"
# shellcheck source=scripts/k8s/versions.sh
source "$ROOT/scripts/k8s/versions.sh"
WSLOAD_CACHE="${WSLOAD_CACHE:-$HOME/.cache/wsload}"
BIN_DIR="$WSLOAD_CACHE/bin"
# Pinned; bump deliberately (`go list -m -versions github.com/rhysd/actionlint`).
ACTIONLINT_VERSION=v1.7.12
ACTIONLINT_PKG=github.com/rhysd/actionlint/cmd/actionlint
WORKFLOW="$ROOT/.github/workflows/kind-smoke.yml"
KIND_CONFIG="$ROOT/examples/kind/cluster.yaml"

started=$SECONDS

command -v go >/dev/null || fail "go is needed to build kind-render and actionlint (e.g. /usr/local/go/bin on PATH)"
command -v jq >/dev/null || fail "jq is needed"
# actionlint runs shellcheck on the workflow's run: blocks only when it finds it, so install it
# where this can (CI runs as root); elsewhere both lints say they went without it.
if ! command -v shellcheck >/dev/null && [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
	(need_packages shellcheck) || log "could not install shellcheck; going on without it"
fi
# The kind release whose code judges the config: the one the script and workflow install.
KIND_VERSION="$(sed -n 's/^KIND_VERSION=\(v[0-9][0-9.]*\)$/\1/p' "$ROOT/examples/kind/smoke.sh")"
[[ -n "$KIND_VERSION" ]] || fail "no KIND_VERSION=vX.Y.Z line in examples/kind/smoke.sh"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/wsload-check-kind.XXXXXX")"
at_exit 'rm -rf "$WORK"'
mkdir -p "$BIN_DIR"
# Two checks on a cold cache would both build; the second waits, then finds the binaries.
exec {lock_fd}>"$BIN_DIR/.check-kind.lock"
flock "$lock_fd"

step "kind-render (kind $KIND_VERSION's config loader and kubeadm rendering) and actionlint $ACTIONLINT_VERSION"
# Keyed by kind release and by the program's source, so an edit of either rebuilds it.
RENDER="$BIN_DIR/kind-render-$KIND_VERSION-$(sha256sum "$ROOT/scripts/lib/kind-render.go" | cut -c1-12)"
if [[ ! -x "$RENDER" ]]; then
	kind_dir="$(GOFLAGS='' GOTOOLCHAIN=local go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Dir)" ||
		fail "go mod download sigs.k8s.io/kind@$KIND_VERSION failed (is the Go module proxy reachable?)"
	# kind's config code is internal to its module, so the program is built from inside a copy
	# of it; the build tag that keeps other Go tools off the file goes with the copy.
	cp -r "$kind_dir" "$WORK/kind"
	chmod -R u+w "$WORK/kind"
	mkdir -p "$WORK/kind/pkg/cluster/wsloadrender"
	grep -v '^//go:build ignore$' "$ROOT/scripts/lib/kind-render.go" >"$WORK/kind/pkg/cluster/wsloadrender/main.go"
	(cd "$WORK/kind" && GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 \
		go build -trimpath -o "$RENDER.tmp" ./pkg/cluster/wsloadrender) || fail "building kind-render failed (above)"
	mv -f "$RENDER.tmp" "$RENDER"
	rm -rf "$WORK/kind"
fi
ACTIONLINT="$BIN_DIR/actionlint"
if [[ "$("$ACTIONLINT" -version 2>/dev/null | head -n 1)" != "$ACTIONLINT_VERSION" ]]; then
	mkdir -p "$WORK/gobin"
	GOBIN="$WORK/gobin" GOTOOLCHAIN=local GOFLAGS='' CGO_ENABLED=0 go install -trimpath "$ACTIONLINT_PKG@$ACTIONLINT_VERSION" ||
		fail "go install $ACTIONLINT_PKG@$ACTIONLINT_VERSION failed (above)"
	mv -f "$WORK/gobin/actionlint" "$ACTIONLINT"
	[[ "$("$ACTIONLINT" -version | head -n 1)" == "$ACTIONLINT_VERSION" ]] ||
		fail "$ACTIONLINT does not report $ACTIONLINT_VERSION"
fi
HELM="$("$ROOT/scripts/tools.sh" helm)" || fail "scripts/tools.sh helm failed (above)"
exec {lock_fd}>&-

step "examples/kind/cluster.yaml as kind $KIND_VERSION loads and renders it"
"$RENDER" yaml2json "$KIND_CONFIG" >"$WORK/cluster-raw.json" || fail "examples/kind/cluster.yaml does not parse (above)"
image="$(jq -r '.[0].nodes[0].image // empty' "$WORK/cluster-raw.json")"
node_version="$(sed -n 's/^kindest\/node:\(v[0-9]*\.[0-9]*\.[0-9]*\)@.*/\1/p' <<<"$image")"
[[ -n "$node_version" ]] || fail "examples/kind/cluster.yaml: the first node's image '$image' is not kindest/node:vX.Y.Z@sha256:..."
"$RENDER" cluster "$KIND_CONFIG" "$node_version" >"$WORK/cluster.json" ||
	fail "kind $KIND_VERSION rejects examples/kind/cluster.yaml (above)"
jq -r '.nodes[] | "  \(.role)\t\(.labels // {} | to_entries | map("\(.key)=\(.value)") | join(","))"' "$WORK/cluster.json"

step "helm template charts/wsload -f examples/kind/values.yaml"
"$HELM" template wsload "$ROOT/charts/wsload" --namespace wsload-system -f "$ROOT/examples/kind/values.yaml" \
	>"$WORK/chart.yaml" || fail "the chart does not render with examples/kind/values.yaml (above)"
"$RENDER" yaml2json "$WORK/chart.yaml" >"$WORK/chart.json" || fail "helm's output does not parse (above)"
echo "  $(jq -r 'map(.kind) | group_by(.) | map("\(length) \(.[0])") | join(", ")' "$WORK/chart.json")"
"$RENDER" yaml2json "$WORKFLOW" >"$WORK/workflow.json" || fail "$WORKFLOW does not parse (above)"
mkdir -p "$WORK/loadtests"
n=0
while IFS= read -r -d '' f; do
	n=$((n + 1))
	"$RENDER" yaml2json "$f" >"$WORK/loadtests/$n.json" || fail "$f does not parse (above)"
	printf '%s\n' "${f#"$ROOT"/}" >"$WORK/loadtests/$n.json.path"
done < <(find "$ROOT/examples" -name '*.yaml' -print0 | sort -z)

step "the kind path against the chart, the LoadTests and the workflow (scripts/lib/check-kind.py)"
safe_go="$(GOFLAGS='' go env GOMODCACHE)/k8s.io/kubernetes@$K8S_VERSION/pkg/kubelet/sysctl/safe_sysctls.go"
[[ -f "$safe_go" ]] || safe_go=""
python3 "$ROOT/scripts/lib/check-kind.py" --self-test "$ROOT" "$WORK" "$K8S_VERSION" "$safe_go"

step "actionlint $ACTIONLINT_VERSION .github/workflows/kind-smoke.yml"
if command -v shellcheck >/dev/null; then
	echo "  (with $(shellcheck --version | sed -n 's/^version: /shellcheck /p') on the run: blocks)"
else
	echo "  (shellcheck not installed: the run: blocks are not linted)"
fi
(cd "$ROOT" && "$ACTIONLINT" -no-color .github/workflows/kind-smoke.yml) || fail "actionlint (above)"
echo "  ok"

step "shell scripts: bash -n, shellcheck"
scripts=("$ROOT/examples/kind/smoke.sh" "$ROOT/scripts/check-kind.sh")
for s in "${scripts[@]}"; do
	bash -n "$s" || fail "bash -n ${s#"$ROOT"/}"
done
if command -v shellcheck >/dev/null; then
	(cd "$ROOT" && shellcheck -x "${scripts[@]#"$ROOT"/}") || fail "shellcheck (above)"
	echo "  ok (bash -n, shellcheck)"
else
	echo "  ok (bash -n; shellcheck not installed, skipped: apt-get install shellcheck)"
fi

printf '\ncheck-kind: PASS in %ss\n' "$((SECONDS - started))"
