#!/usr/bin/env bash
# Install the Debian packages the local control plane needs, only those missing:
#   etcd-server  etcd, the API server's store. Debian's 3.4 serves Kubernetes 1.33
#                fine, and no etcd image or release tarball can be fetched here.
#   openssl      the cluster PKI (control-plane.sh)
#   curl         readiness probes against etcd and the API server, before any
#                kubeconfig client is known to work
# Kubernetes itself comes from build.sh (Go module proxy), not from apt.
set -euo pipefail

PACKAGES=(etcd-server openssl curl)

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
