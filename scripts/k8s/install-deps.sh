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

LOG_NAME=k8s/install-deps
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

PACKAGES=(etcd-server openssl curl)
NODE_PACKAGES=(containerd runc containernetworking-plugins jq iptables musl-tools)
case "${1:-}" in
"") ;;
--node) PACKAGES+=("${NODE_PACKAGES[@]}") ;;
*) usage ;;
esac
# Only those missing; apt-get's output on stderr (callers such as `control-plane.sh up` and
# `cluster.sh up` hand a value to theirs on stdout).
need_packages "${PACKAGES[@]}"
