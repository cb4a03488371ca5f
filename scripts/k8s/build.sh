#!/usr/bin/env bash
# Build Kubernetes binaries from the Go module proxy into the version-keyed
# cache (versions.sh: K8S_BIN_DIR), skipping those already there.
#
# usage: scripts/k8s/build.sh [component...]
#   components: kube-apiserver kubectl (the default), kube-controller-manager,
#               kube-scheduler, kubelet, kube-proxy, kubeadm (the kind node image)
#
# Why from source: no container image can be pulled on the project machines
# and no release tarball can be downloaded, but the Go module proxy serves
# k8s.io/kubernetes and its staging modules. gomod/ is a wrapper module that
# makes k8s.io/kubernetes buildable as a dependency (see its go.mod); its
# go.sum pins every module's hash, so the proxy cannot change what we build.
#
# Measured on 2 cores shared with other builds: cold (empty Go build cache)
# kube-apiserver 4.5-7 min, then kubectl ~30 s; with that build cache,
# kube-controller-manager ~2.5 min and kube-scheduler, kube-proxy, kubelet
# 10-35 s each. A cached component costs nothing (0.05 s for the default pair).
#
# Environment:
#   WSLOAD_CACHE          cache root (default ~/.cache/wsload)
#   WSLOAD_K8S_REBUILD=1  rebuild even when the binary is cached
#   WSLOAD_BUILD_NICE     niceness of the go build (default 19)
set -euo pipefail

K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/k8s/versions.sh
source "$K8S_DIR/versions.sh"
LOG_NAME=k8s/build
# shellcheck source=scripts/lib/common.sh
source "$K8S_DIR/../lib/common.sh"
# Its stdout stays empty, whatever it runs: callers capture it (scripts/check-dashboards.py) or
# hand their own stdout to theirs (control-plane.sh up). go build and progress go to stderr.
stdout_is_data
GOMOD_DIR="$K8S_DIR/gomod"

ALL_COMPONENTS=(kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet kube-proxy kubeadm)
DEFAULT_COMPONENTS=(kube-apiserver kubectl)

# gomod/go.mod carries the version a second time (Go cannot read versions.sh);
# a half-done bump would otherwise build one release into the other's cache.
check_gomod_versions() {
	local bad
	grep -Eq "^require k8s\.io/kubernetes ${K8S_VERSION//./\\.}\$" "$GOMOD_DIR/go.mod" ||
		die "gomod/go.mod does not require k8s.io/kubernetes $K8S_VERSION (versions.sh)"
	bad="$(grep -E '=> k8s\.io/' "$GOMOD_DIR/go.mod" | grep -v " $K8S_STAGING_VERSION\$" || true)"
	[[ -z "$bad" ]] || die "gomod/go.mod replaces staging modules at other versions than $K8S_STAGING_VERSION:
$bad"
}

# Without these, binaries report v0.0.0-master and kubectl cannot parse the
# server version. kubectl reads client-go's copy, the servers component-base's.
version_ldflags() {
	local build_date minor="${K8S_VERSION#v1.}" flags=() pkg
	minor="${minor%%.*}"
	# The release's own publication time, not now: rebuilds are then identical.
	build_date="$(cd "$GOMOD_DIR" && GOFLAGS=-mod=readonly go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)"
	for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
		flags+=("-X $pkg.gitVersion=$K8S_VERSION" "-X $pkg.gitMajor=1" "-X $pkg.gitMinor=$minor"
			"-X $pkg.buildDate=$build_date")
	done
	# -s -w: upstream release builds strip symbols and DWARF too; it also
	# shortens the link, the slowest single step.
	printf '%s ' -s -w "${flags[@]}"
}

TMP_BIN=""
at_exit '[[ -z "$TMP_BIN" ]] || rm -f "$TMP_BIN"'
# Turned into exits so that the EXIT trap also runs on Ctrl-C and kill.
trap 'exit 130' INT
trap 'exit 143' TERM

build_one() {
	local c="$1" target="$K8S_BIN_DIR/$1" started got
	if [[ -x "$target" && "${WSLOAD_K8S_REBUILD:-0}" != 1 ]]; then
		log "$c $K8S_VERSION: cached ($target)"
		return
	fi
	log "$c $K8S_VERSION: building"
	started=$SECONDS
	# A temporary name in the same directory, then a rename: an interrupted or
	# failed build never leaves a partial binary under the real name.
	TMP_BIN="$(mktemp "$K8S_BIN_DIR/.$c.XXXXXX")"
	# -mod=readonly: go.mod and go.sum are reviewed files, a build must not
	# rewrite them. -buildvcs=false: the wrapper sits inside this repository,
	# whose git state says nothing about the Kubernetes source. Tags as
	# upstream's hack/lib/golang.sh sets them.
	# CGO_ENABLED=0 for all, the kubelet too (upstream keeps cgo there): its
	# only cgo users are the standard library's net and os/user, whose pure
	# Go versions read the same /etc files; and a cgo kubelet shares no
	# compiled package with the others, which costs ~5 more minutes cold.
	# nice: a cold build takes minutes of both cores on machines where others
	# benchmark; WSLOAD_BUILD_NICE=0 gives it the usual priority.
	(cd "$GOMOD_DIR" && GOTOOLCHAIN=local CGO_ENABLED=0 nice -n "${WSLOAD_BUILD_NICE:-19}" go build \
		-mod=readonly -buildvcs=false -trimpath -tags=selinux,notest \
		-ldflags="$LDFLAGS" -o "$TMP_BIN" "k8s.io/kubernetes/cmd/$c")
	# What the binary says about itself proves the ldflags took.
	if [[ "$c" == kubectl ]]; then
		got="$(reported_version "$TMP_BIN" version --client)"
	elif [[ "$c" == kubeadm ]]; then
		got="$(reported_version "$TMP_BIN" version -o short)"
	else
		got="$(reported_version "$TMP_BIN" --version)"
	fi
	[[ "$got" == "${K8S_VERSION#v}" ]] || die "$c reports version '$got', not $K8S_VERSION"
	chmod 0755 "$TMP_BIN"
	mv -f "$TMP_BIN" "$target"
	TMP_BIN=""
	log "$c $K8S_VERSION: built in $((SECONDS - started))s -> $target"
}

main() {
	local c ok known components=()
	for c in "$@"; do
		known=0
		for ok in "${ALL_COMPONENTS[@]}"; do [[ "$c" == "$ok" ]] && known=1; done
		# Anything else, -h and --help included: the usage, exit 2.
		((known)) || usage
		components+=("$c")
	done
	((${#components[@]})) || components=("${DEFAULT_COMPONENTS[@]}")

	require_go 24 "Kubernetes $K8S_VERSION"
	check_gomod_versions
	mkdir -p "$K8S_BIN_DIR"
	LDFLAGS="$(version_ldflags)"
	for c in "${components[@]}"; do
		# Two concurrent runs (the prepare lane and a part on a cold cache) would both spend
		# the full build; the second waits and then finds the binary. One lock per component:
		# a part asking for a cached kube-apiserver never waits while the lane builds kubelet.
		exec {lock_fd}>"$K8S_CACHE_DIR/.build-$c.lock"
		flock "$lock_fd"
		build_one "$c"
		exec {lock_fd}>&-
	done
}

main "$@"
