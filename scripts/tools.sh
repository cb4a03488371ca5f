#!/usr/bin/env bash
# Installs pinned Go tools from the Go module proxy into ${WSLOAD_CACHE:-~/.cache/wsload}/bin
# and prints the path of each, one a line, in the order asked. A tool already there that
# reports the pinned version costs nothing; any other (older pin, half-built) is replaced.
# The same pattern as crane in scripts/lib/images.sh: `go install MODULE@VERSION`, static
# (CGO off), version ldflags so the binary says what it is.
#
# usage: scripts/tools.sh TOOL...      TOOL: helm | kubeconform
#   e.g. helm="$(scripts/tools.sh helm)"
#
# Why from source: no release tarball can be downloaded on the project machines, but the Go
# module proxy serves both modules (it is an allow-list: check a new version is served with
# `go list -m -versions MODULE` before bumping). Cold: helm ~5 min, kubeconform ~30 s on 2
# busy cores; warm: milliseconds.
#
# Environment:
#   WSLOAD_CACHE  cache root (default ~/.cache/wsload)
set -euo pipefail

WSLOAD_CACHE="${WSLOAD_CACHE:-$HOME/.cache/wsload}"
BIN_DIR="$WSLOAD_CACHE/bin"

# Pinned; bump deliberately.
HELM_VERSION="v3.22.0"
HELM_MODULE="helm.sh/helm/v3"
KUBECONFORM_VERSION="v0.8.0"
KUBECONFORM_MODULE="github.com/yannh/kubeconform"

log() { printf 'tools: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

usage() {
	printf 'usage: %s TOOL...    (TOOL: helm | kubeconform)\n' "$0"
}

# What an installed binary says its version is; empty when it is missing or broken.
reported_version() { # tool path
	[[ -x "$2" ]] || return 0
	case "$1" in
	helm) "$2" version --template '{{.Version}}' 2>/dev/null || true ;;
	kubeconform) "$2" -v 2>/dev/null || true ;;
	esac
}

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

install_tool() { # tool
	local tool="$1" module pkg version ldflags minor tmp started
	case "$tool" in
	helm)
		module="$HELM_MODULE" pkg="$HELM_MODULE/cmd/helm" version="$HELM_VERSION"
		minor="$(helm_k8s_minor)"
		ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
		ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
		ldflags+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor"
		ldflags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor"
		;;
	kubeconform)
		module="$KUBECONFORM_MODULE" pkg="$KUBECONFORM_MODULE/cmd/kubeconform" version="$KUBECONFORM_VERSION"
		ldflags="-s -w -X main.version=$version"
		;;
	*)
		usage >&2
		exit 2
		;;
	esac
	if [[ "$(reported_version "$tool" "$BIN_DIR/$tool")" == "$version" ]]; then
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
	if ! GOBIN="$tmp" GOTOOLCHAIN=local GOFLAGS='' CGO_ENABLED=0 \
		go install -trimpath -ldflags="$ldflags" "$pkg@$version"; then
		rm -rf "$tmp"
		die "go install $pkg@$version failed (see above); $module $version must be served by the Go module proxy"
	fi
	mv -f "$tmp/$tool" "$BIN_DIR/$tool"
	rm -rf "$tmp"
	[[ "$(reported_version "$tool" "$BIN_DIR/$tool")" == "$version" ]] ||
		die "$BIN_DIR/$tool reports version '$(reported_version "$tool" "$BIN_DIR/$tool")', not $version"
	log "$tool $version installed in $((SECONDS - started))s"
}

main() {
	local tool
	if (($# == 0)); then
		usage >&2
		exit 2
	fi
	for tool in "$@"; do
		case "$tool" in
		-h | --help)
			usage
			exit 0
			;;
		helm | kubeconform) ;;
		*)
			usage >&2
			exit 2
			;;
		esac
	done
	mkdir -p "$BIN_DIR"
	# Two runs on a cold cache (parallel jobs) would both spend the build; the second waits and
	# then finds the binary.
	exec {lock_fd}>"$BIN_DIR/.tools.lock"
	flock "$lock_fd"
	for tool in "$@"; do
		install_tool "$tool"
		printf '%s\n' "$BIN_DIR/$tool"
	done
}

main "$@"
