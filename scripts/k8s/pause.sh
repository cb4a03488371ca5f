#!/usr/bin/env bash
# Build the pod sandbox image registry.k8s.io/pause:3.10 from pause/pause.c
# (static, musl-gcc) into the cache and print the tarball's path. Nothing can
# be pulled here, and containerd needs this image before any pod starts.
#
# The tarball is keyed by a hash of everything that makes it (the C source,
# this script, the compiler's and crane's versions), so a rerun costs a hash.
#
# usage: scripts/k8s/pause.sh        prints the tarball path on stdout
set -euo pipefail

K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/k8s/versions.sh
source "$K8S_DIR/versions.sh"
# crane, pinned and cached as scripts/build-image.sh keeps it.
# shellcheck source=scripts/lib/images.sh
source "$K8S_DIR/../lib/images.sh"
LOG_NAME=k8s/pause
# shellcheck source=scripts/lib/common.sh
source "$K8S_DIR/../lib/common.sh"
# The path is this script's stdout; apt, go and crane report on stderr.
stdout_is_data

PAUSE_TAG=registry.k8s.io/pause:3.10
SRC="$K8S_DIR/pause/pause.c"

command -v musl-gcc >/dev/null || "$K8S_DIR/install-deps.sh" --node
ensure_crane
key="$({
	cat "$SRC" "${BASH_SOURCE[0]}"
	musl-gcc --version 2>&1 | head -n1
	printf '%s %s\n' "$CRANE_VERSION" "$PAUSE_TAG"
} | sha256sum | cut -c1-16)"
OUT_DIR="$WSLOAD_CACHE/k8s/pause-3.10/$key"
OUT="$OUT_DIR/pause.tar"
if [[ -f "$OUT" ]]; then
	emit "$OUT"
	exit 0
fi

started=$SECONDS
mkdir -p "$OUT_DIR"
TMP="$(mktemp -d "$OUT_DIR/.build.XXXXXX")"
REGISTRY_PID=""
at_exit 'rm -rf "$TMP"'
at_exit 'if [[ -n "$REGISTRY_PID" ]]; then kill "$REGISTRY_PID" 2>/dev/null || true; wait "$REGISTRY_PID" 2>/dev/null || true; fi'

mkdir -p "$TMP/rootfs"
musl-gcc -static -Os -s -o "$TMP/rootfs/pause" "$SRC" >"$TMP/cc.log" 2>&1 ||
	die "musl-gcc failed on $SRC: $(cat "$TMP/cc.log")"
chmod 0755 "$TMP/rootfs/pause"
tar --create --file "$TMP/layer.tar" --directory "$TMP/rootfs" --format=gnu --sort=name \
	--owner=0 --group=0 --numeric-owner --mtime=@0 pause

crane_stage "$TMP/layer.tar" pause:3.10 "$TMP"
"$CRANE" mutate --insecure "$STAGING" --entrypoint /pause --user 65535:65535 \
	--set-platform "$IMAGE_PLATFORM" --tag "$PAUSE_TAG" --output "$TMP/pause.tar" \
	>>"$TMP/crane.log" 2>&1 || die "crane mutate failed: $(cat "$TMP/crane.log")"
mv -f "$TMP/pause.tar" "$OUT"
log "built $PAUSE_TAG in $((SECONDS - started))s: $OUT"
emit "$OUT"
