#!/usr/bin/env bash
# Installs pinned Go tools from the Go module proxy into ${WSLOAD_CACHE:-~/.cache/wsload}/bin
# and prints the path of each, one a line, in the order asked. A tool already there that
# reports the pinned version costs nothing; any other (older pin, half-built) is replaced.
# The same pattern as crane in scripts/lib/images.sh: `go install MODULE@VERSION`, static
# (CGO off), version ldflags so the binary says what it is.
#
# usage: scripts/tools.sh TOOL...      TOOL: helm | kubeconform | helm-values-schema-json | kind |
#                                            coredns | kube-router | nats-server
#   e.g. helm="$(scripts/tools.sh helm)"
#
# Why from source: no release tarball can be downloaded on the project machines, but the Go
# module proxy serves these modules (it is an allow-list: check a new version is served with
# `go list -m MODULE@VERSION` before bumping; for helm-values-schema-json it refuses the version
# list itself, hence build_in_module). Cold: helm ~5 min, kubeconform ~30 s,
# helm-values-schema-json ~10 s, kind ~1 min, coredns ~2 min (its plugins trimmed: build_coredns),
# nats-server ~35 s on 2 busy cores;
# warm: milliseconds.
#
# Environment:
#   WSLOAD_CACHE  cache root (default ~/.cache/wsload)
set -euo pipefail
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# The paths are this script's stdout; go's output and the messages go to stderr.
stdout_is_data

WSLOAD_CACHE="${WSLOAD_CACHE:-$HOME/.cache/wsload}"
BIN_DIR="$WSLOAD_CACHE/bin"

# Pinned; bump deliberately.
HELM_VERSION="v3.22.0"
HELM_MODULE="helm.sh/helm/v3"
KUBECONFORM_VERSION="v0.8.0"
KUBECONFORM_MODULE="github.com/yannh/kubeconform"
# values.schema.json of the chart from its annotated values.yaml (scripts/generate.sh).
SCHEMA_VERSION="v2.2.1"
SCHEMA_MODULE="github.com/losisin/helm-values-schema-json/v2"
# examples/kind/smoke.sh's cluster provider (its KIND_VERSION must be the same: check-kind.sh).
KIND_VERSION="v0.30.0"
KIND_MODULE="sigs.k8s.io/kind"
# The cluster DNS of the kind node image (scripts/k8s/kind-image.sh), under the name kubeadm
# asks for; static (CGO off) so that it runs in a scratch image.
COREDNS_VERSION="v1.14.7"
COREDNS_MODULE="github.com/coredns/coredns"
# A NetworkPolicy controller for the test clusters only (scripts/e2e/netpol.sh): its firewall
# alone (--run-firewall, no router, no service proxy) makes a CNI that does not enforce
# policies enforce them. The Go vulnerability database lists advisories against v2.1.0: never
# ship it, never run it outside a throwaway test cluster.
KUBE_ROUTER_VERSION="v2.1.0"
KUBE_ROUTER_MODULE="github.com/cloudnativelabs/kube-router/v2"
# The NATS corpus server of the real-server tests (scripts/test-servers/nats.sh), with its
# WebSocket listener; the version it reports is compiled in (server.VERSION).
NATS_SERVER_VERSION="v2.15.2"
NATS_SERVER_MODULE="github.com/nats-io/nats-server/v2"

# The Kubernetes minor helm's own client-go modules implement. helm's Makefile passes it as
# ldflags (lint's deprecation check and `.Capabilities.KubeVersion` of `helm template` use it);
# without them a `go install` helm believes the cluster is Kubernetes 1.20.
helm_k8s_minor() {
	local gomod client_go
	gomod="$(GOTOOLCHAIN=local go mod download -json "$HELM_MODULE@$HELM_VERSION" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])')" ||
		die "go mod download $HELM_MODULE@$HELM_VERSION failed (is the Go module proxy reachable?)"
	client_go="$(awk '$1 == "k8s.io/client-go" {print $2; exit}' "$gomod")"
	[[ "$client_go" =~ ^v0\.([0-9]+)\. ]] || die "no k8s.io/client-go v0.N.x in $gomod"
	printf '%s\n' "${BASH_REMATCH[1]}"
}

# build_in_module MODULE VERSION LDFLAGS OUT: `go build` inside the downloaded module, with its
# own go.sum. For modules whose version list the proxy refuses: `go install pkg@version` reads
# that list (for deprecations) and fails, though the pinned version itself is served.
build_in_module() {
	local module="$1" version="$2" ldflags="$3" out="$4" dir
	dir="$(GOTOOLCHAIN=local GOFLAGS='' go mod download -json "$module@$version" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')" || return 1
	(cd "$dir" && GOTOOLCHAIN=local GOFLAGS='' CGO_ENABLED=0 \
		go build -trimpath -ldflags="$ldflags" -o "$out" . >&2)
}

# build_coredns LDFLAGS OUT: CoreDNS with the plugins of k8s/coredns/zplugin.go.in (its header
# says which and why), built in a copy of the module (verified against go.sum when downloaded)
# with that file as core/plugin/zplugin.go: Go refuses to overlay a file of the module cache.
# Half the packages of a build with every plugin; it took ~5 min cold on 2 busy cores.
build_coredns() {
	local ldflags="$1" out="$2" dir work rc=0
	dir="$(GOTOOLCHAIN=local GOFLAGS='' go mod download -json "$COREDNS_MODULE@$COREDNS_VERSION" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')" || return 1
	[[ -f "$dir/core/plugin/zplugin.go" ]] ||
		die "$dir/core/plugin/zplugin.go is missing: upstream moved its plugin list; make scripts/k8s/coredns/zplugin.go.in replace the new one"
	work="$(mktemp -d)"
	cp -r "$dir" "$work/src" && chmod -R u+w "$work/src" &&
		cp "$(dirname "${BASH_SOURCE[0]}")/k8s/coredns/zplugin.go.in" "$work/src/core/plugin/zplugin.go" &&
		(cd "$work/src" && GOTOOLCHAIN=local GOFLAGS='' CGO_ENABLED=0 \
			go build -trimpath -ldflags="$ldflags" -o "$out" . >&2) || rc=$?
	rm -rf "$work"
	return "$rc"
}

install_tool() { # tool
	local tool="$1" module pkg version ldflags minor tmp started
	# How the installed binary reports its version (reported_version: empty when it is missing
	# or broken).
	local -a version_args
	case "$tool" in
	helm)
		module="$HELM_MODULE" pkg="$HELM_MODULE/cmd/helm" version="$HELM_VERSION"
		version_args=(version --template '{{.Version}}')
		minor="$(helm_k8s_minor)"
		ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
		ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
		ldflags+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor"
		ldflags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor"
		;;
	kubeconform)
		module="$KUBECONFORM_MODULE" pkg="$KUBECONFORM_MODULE/cmd/kubeconform" version="$KUBECONFORM_VERSION"
		version_args=(-v)
		ldflags="-s -w -X main.version=$version"
		;;
	helm-values-schema-json)
		module="$SCHEMA_MODULE" pkg="$SCHEMA_MODULE" version="$SCHEMA_VERSION"
		version_args=(--version)
		ldflags="-s -w -X main.Version=$version"
		;;
	kind)
		module="$KIND_MODULE" pkg="$KIND_MODULE" version="$KIND_VERSION"
		version_args=(version)
		ldflags="-s -w"
		;;
	coredns)
		module="$COREDNS_MODULE" pkg="$COREDNS_MODULE" version="$COREDNS_VERSION"
		version_args=(-version)
		ldflags="-s -w"
		;;
	kube-router)
		module="$KUBE_ROUTER_MODULE" pkg="$KUBE_ROUTER_MODULE/cmd/kube-router" version="$KUBE_ROUTER_VERSION"
		version_args=(--version)
		ldflags="-s -w -X $KUBE_ROUTER_MODULE/pkg/version.Version=$version"
		;;
	nats-server)
		module="$NATS_SERVER_MODULE" pkg="$NATS_SERVER_MODULE" version="$NATS_SERVER_VERSION"
		version_args=(--version)
		ldflags="-s -w"
		;;
	*) usage ;;
	esac
	if [[ "$(reported_version "$BIN_DIR/$tool" "${version_args[@]}")" == "${version#v}" ]]; then
		return
	fi
	command -v go >/dev/null || die "go is needed to install $tool $version (Go >= 1.26, e.g. /usr/local/go/bin on PATH)"
	log "installing $tool $version into $BIN_DIR (from the Go module proxy; helm takes ~5 min cold)"
	started=$SECONDS
	# Built into a private directory, then renamed: an interrupted build never leaves a
	# half-written binary under the real name.
	tmp="$(mktemp -d "$BIN_DIR/.$tool.XXXXXX")"
	# GOTOOLCHAIN=local: a go.mod asking for a newer Go must fail here with its message, not
	# download a toolchain the proxy may refuse. GOFLAGS cleared: -mod settings of the caller
	# do not apply to `go install pkg@version`.
	if [[ "$tool" == helm-values-schema-json ]]; then
		build_in_module "$module" "$version" "$ldflags" "$tmp/$tool" ||
			die "building $module $version failed (see above); it must be served by the Go module proxy"
	elif [[ "$tool" == coredns ]]; then
		build_coredns "$ldflags" "$tmp/$tool" ||
			die "building $module $version failed (see above); it must be served by the Go module proxy"
	elif ! GOBIN="$tmp" GOTOOLCHAIN=local GOFLAGS='' CGO_ENABLED=0 \
		go install -trimpath -ldflags="$ldflags" "$pkg@$version" >&2; then
		rm -rf "$tmp"
		die "go install $pkg@$version failed (see above); $module $version must be served by the Go module proxy"
	fi
	mv -f "$tmp/$tool" "$BIN_DIR/$tool"
	rm -rf "$tmp"
	[[ "$(reported_version "$BIN_DIR/$tool" "${version_args[@]}")" == "${version#v}" ]] ||
		die "$BIN_DIR/$tool reports version '$(reported_version "$BIN_DIR/$tool" "${version_args[@]}")', not $version"
	log "$tool $version installed in $((SECONDS - started))s"
}

main() {
	local tool
	(($#)) || usage
	for tool in "$@"; do
		case "$tool" in
		helm | kubeconform | helm-values-schema-json | kind | coredns | kube-router | nats-server) ;;
		*) usage ;;
		esac
	done
	mkdir -p "$BIN_DIR"
	for tool in "$@"; do
		# Two runs on a cold cache (the prepare lane and a part) would both spend the build; the
		# second waits and then finds the binary. One lock per tool: a part asking for a cached
		# helm never waits while the lane builds kind.
		exec {lock_fd}>"$BIN_DIR/.$tool.lock"
		flock "$lock_fd"
		install_tool "$tool"
		exec {lock_fd}>&-
		emit "$BIN_DIR/$tool"
	done
}

main "$@"
