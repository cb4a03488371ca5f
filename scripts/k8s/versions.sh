# shellcheck shell=bash disable=SC2034  # sourced: the variables are used by the sourcing scripts
# The one place that pins the Kubernetes release the harness builds and runs.
# Sourced by build.sh, control-plane.sh (so cluster.sh) and the smoke scripts,
# whose kubectl (scripts/lib/common.sh) is K8S_BIN_DIR's; gomod/go.mod must name
# the same release (build.sh refuses to build when they disagree).
#
# Why v1.33.13: it is the release the Go module proxy serves here together with
# all its staging modules (v0.33.13); v1.32 is not served. To move on, change
# K8S_VERSION, edit the versions in gomod/go.mod, then in gomod/ run
# `GOFLAGS=-mod=mod go mod tidy` and keep the new go.sum.
K8S_VERSION=v1.33.13

# Staging modules (k8s.io/api, client-go, ...) are published as v0.MINOR.PATCH
# of the same release.
K8S_STAGING_VERSION="v0.${K8S_VERSION#v1.}"

# Where built binaries live, keyed by version so that a bump never runs a stale
# binary; outside the repository so `git clean` does not cost a 15-minute build.
K8S_CACHE_DIR="${WSLOAD_CACHE:-$HOME/.cache/wsload}/k8s/$K8S_VERSION"
K8S_BIN_DIR="$K8S_CACHE_DIR/bin"
