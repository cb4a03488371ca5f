#!/usr/bin/env bash
# Install the Debian packages the local control plane needs, only those missing:
#   etcd-server  etcd, the API server's store. Debian's 3.4 serves Kubernetes 1.33
#                fine, and no etcd image or release tarball can be fetched here.
#   openssl      the cluster PKI (control-plane.sh)
#   curl         readiness probes against etcd and the API server, before any
#                kubeconfig client is known to work
# and, with --node, what cluster.sh needs to run pods on this machine:
#   containerd   the container runtime the kubelet talks to (CRI), plus `ctr`
#                to import image tarballs (no registry can be reached here)
#   runc         the OCI runtime containerd starts, behind cluster.sh's runc-wrap
#   containernetworking-plugins  bridge, host-local, portmap, loopback CNI plugins
#   jq           runc-wrap edits OCI specs with it
#   iptables     the bridge plugin and the kubelet program it
#   musl-tools   musl-gcc: the pause image's static binary
# Kubernetes itself comes from build.sh (Go module proxy), not from apt.
#
# usage: install-deps.sh [--node]
set -euo pipefail

PACKAGES=(etcd-server openssl curl)
NODE_PACKAGES=(containerd runc containernetworking-plugins jq iptables musl-tools)
case "${1:-}" in
"") ;;
--node) PACKAGES+=("${NODE_PACKAGES[@]}") ;;
*)
	printf 'usage: %s [--node]\n' "$0" >&2
	exit 2
	;;
esac

log() { printf 'k8s/install-deps: %s\n' "$*" >&2; }

missing=()
for p in "${PACKAGES[@]}"; do
	# dpkg-query, not `command -v`: a binary of the same name elsewhere on
	# PATH is not the package this harness was proven with.
	if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" != installed ]]; then
		missing+=("$p")
	fi
done
if ((${#missing[@]} == 0)); then
	exit 0
fi

sudo=()
if [[ $EUID -ne 0 ]]; then
	command -v sudo >/dev/null || {
		log "needs root: apt-get install -y ${missing[*]}"
		exit 1
	}
	sudo=(sudo)
fi

log "installing ${missing[*]}"
# Package lists may be absent (fresh machine) or stale (a superseded version is
# no longer downloadable); refresh only when the plain install fails, so the
# common case costs no network round trip.
if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
	"${sudo[@]}" apt-get update -qq
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
