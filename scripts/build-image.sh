#!/usr/bin/env bash
# Build the container image NAME (table in scripts/lib/images.sh) from a static
# musl binary into <cargo target dir>/images/<binary>.tar, tagged
# <repo>:<workspace version>, for `docker load -i`, `kind load image-archive` or
# `ctr -n k8s.io images import`.
#
# The image is the Dockerfile in NAME's directory, built as written by a real
# builder: `docker build` when a Docker daemon answers `docker info` (developers),
# else buildah (Debian's package, installed when missing), which builds a
# Dockerfile without a daemon or a registry: CI and the project's build machines.
# buildah's storage is a throwaway directory next to the tarball, so a build
# shares nothing with other users of containers/storage on the machine.
#
# The binary is cross-built on the host, not in the image build, because no Rust
# base image can be pulled here, and the host's cargo cache makes a second run
# take seconds.
#
# Environment:
#   WSLOAD_IMAGE_VERSION  image tag (default: the package's workspace version)
#   WSLOAD_IMAGE_BUILDER  auto (default) | docker | buildah
#   WSLOAD_IMAGE_KEEP_DEBUG=1  ship the binary's DWARF line tables (several times larger)
#   SOURCE_DATE_EPOCH     file times inside the layer and the image's creation time
#                         (default: last commit's time)
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/images.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/images.sh"

if [[ $# -ne 1 || "$1" == -* ]]; then
	image_usage "$0" >&2
	exit 2
fi
image_spec "$1"
cargo_facts

BUILDER="${WSLOAD_IMAGE_BUILDER:-auto}"
TMP_DIR=""
at_exit '[[ -z "$TMP_DIR" ]] || rm -rf "$TMP_DIR"'

build_binary() {
	log "building $IMAGE_BINARY for $MUSL_TARGET with the other images' binaries (scripts/cargo-build.sh static)"
	# Every image's binary in one build (scripts/cargo-build.sh static says why); --locked
	# there: an image is a release artefact, it must not quietly re-resolve dependencies that
	# the tests did not see.
	BINARY_PATH="$("$WSLOAD_ROOT/scripts/cargo-build.sh" static)/$IMAGE_BINARY"
}

# The build context is staged fresh each run so that nothing left from an
# earlier build can end up in the image.
stage_context() {
	local user uid gid rootfs
	CONTEXT_DIR="$IMAGES_DIR/context/$IMAGE_BINARY"
	rootfs="$CONTEXT_DIR/rootfs"
	rm -rf "$CONTEXT_DIR"
	mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc"
	cp "$IMAGE_DIR/Dockerfile" "$CONTEXT_DIR/Dockerfile"
	# The release profile's DWARF line tables are most of the binary (wsload-server:
	# 19 MB, 4 MB without); the image keeps the symbol table, so backtraces still
	# name functions, and the unstripped binary stays in target/ for addr2line.
	if [[ "${WSLOAD_IMAGE_KEEP_DEBUG:-0}" == 1 ]]; then
		cp "$BINARY_PATH" "$rootfs/usr/local/bin/$IMAGE_BINARY"
	else
		strip --strip-debug -o "$rootfs/usr/local/bin/$IMAGE_BINARY" "$BINARY_PATH"
	fi
	chmod 0755 "$rootfs/usr/local/bin/$IMAGE_BINARY"

	# The Dockerfile is the one place that names the user; /etc/passwd must be in
	# the context before the build, so its USER line is read here (the built
	# image's User is checked by scripts/check-image.sh).
	user="$(awk 'toupper($1) == "USER" { print $2 }' "$CONTEXT_DIR/Dockerfile")"
	[[ "$user" =~ ^([0-9]+):([0-9]+)$ ]] ||
		die "$IMAGE_DIR/Dockerfile: one USER with a numeric UID:GID expected, got '$user'"
	uid="${BASH_REMATCH[1]}"
	gid="${BASH_REMATCH[2]}"
	((uid != 0 && gid != 0)) || die "$IMAGE_DIR/Dockerfile: USER must not be root"

	# Only so that the user has a name (ps, logs, tools that look it up);
	# nothing in the image logs in.
	printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%s:%s:nonroot:/nonexistent:/sbin/nologin\n' \
		"$uid" "$gid" >"$rootfs/etc/passwd"
	printf 'root:x:0:\nnonroot:x:%s:\n' "$gid" >"$rootfs/etc/group"
	chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
	# Fixed modes and times: the umask and the clock must not change the image.
	find "$rootfs" -type d -exec chmod 0755 {} +
	find "$rootfs" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
}

# Everything that decides the image's content; equal fingerprints mean the
# tarball on disk is already this image.
fingerprint() {
	{
		printf '%s\n' "$BUILDER" "$BUILDER_VERSION" "$IMAGE_TAG" "$IMAGE_PLATFORM" "${WSLOAD_IMAGE_KEEP_DEBUG:-0}" \
			"$SOURCE_DATE_EPOCH" "${BUILD_ARGS[@]}"
		cat "${BASH_SOURCE[0]}" "$WSLOAD_ROOT/scripts/lib/images.sh" "$CONTEXT_DIR/Dockerfile"
		(cd "$CONTEXT_DIR/rootfs" && find . -printf '%p %y %m %T@\n' | LC_ALL=C sort &&
			find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
	} | sha256sum | cut -d' ' -f1
}

build_with_docker() {
	local out="$1"
	log "docker build $IMAGE_TAG"
	# No default provenance attestations: they would add a second manifest
	# that the buildah path does not make.
	BUILDX_NO_DEFAULT_ATTESTATIONS=1 docker build --platform "$IMAGE_PLATFORM" \
		"${BUILD_ARGS[@]/#/--build-arg=}" --tag "$IMAGE_TAG" \
		--file "$CONTEXT_DIR/Dockerfile" "$CONTEXT_DIR"
	docker save --output "$out" "$IMAGE_TAG"
}

# quietly LOG COMMAND...: COMMAND's output goes to LOG, and to stderr only when it fails.
quietly() {
	local log="$1"
	shift
	if ! "$@" >"$log" 2>&1; then
		cat "$log" >&2
		die "failed: $*"
	fi
}

# buildah's own storage, in the build's temporary directory: vfs, because overlay needs a
# kernel and mount options this VM (and many CI containers) may not give, and the image is one
# small layer anyway; throwaway, because the tarball is the product and the fingerprint above
# is the cache. CONTAINERS_STORAGE_CONF replaces the machine's storage.conf altogether, so
# nothing of another containers/storage user's setup applies or is touched.
buildah_storage() {
	local dir="$TMP_DIR/buildah"
	mkdir -p "$dir/root" "$dir/run" "$dir/tmp"
	printf '[storage]\ndriver = "vfs"\ngraphroot = "%s"\nrunroot = "%s"\n' "$dir/root" "$dir/run" \
		>"$dir/storage.conf"
	export CONTAINERS_STORAGE_CONF="$dir/storage.conf" TMPDIR="$dir/tmp"
}

build_with_buildah() {
	local out="$1" name="docker.io/$IMAGE_TAG"
	buildah_storage
	log "buildah build $IMAGE_TAG"
	# --isolation chroot: no OCI runtime, which a Dockerfile without RUN never starts anyway
	# (runc cannot start everywhere this runs; on the project's VM it needs a wrapper).
	# --format oci: Docker's config format would add a random Hostname and an empty Cmd;
	# docker-archive converts the config either way. --timestamp: file times and the creation
	# time from the commit, so the same binary gives the same image ID on every machine. No
	# io.buildah.version label: docker build adds none. The full name: a short one would be
	# stored as localhost/... and tagged so in the tarball.
	quietly "$TMP_DIR/build.log" buildah build --isolation chroot --format oci --identity-label=false \
		--platform "$IMAGE_PLATFORM" --timestamp "$SOURCE_DATE_EPOCH" "${BUILD_ARGS[@]/#/--build-arg=}" \
		--tag "$name" --file "$CONTEXT_DIR/Dockerfile" "$CONTEXT_DIR"
	quietly "$TMP_DIR/push.log" buildah push "$name" "docker-archive:$out:$IMAGE_TAG"
}

case "$BUILDER" in
auto)
	# `docker info` fails fast without a daemon; the timeout covers a daemon
	# that is wedged rather than absent.
	if command -v docker >/dev/null && timeout 20 docker info >/dev/null 2>&1; then
		BUILDER=docker
	else
		BUILDER=buildah
	fi
	;;
docker | buildah) ;;
*) die "WSLOAD_IMAGE_BUILDER must be auto, docker or buildah, not '$BUILDER'" ;;
esac
if [[ "$BUILDER" == buildah ]]; then
	need_packages buildah
fi
BUILDER_VERSION="$("$BUILDER" --version)"

if [[ -z "${SOURCE_DATE_EPOCH:-}" ]]; then
	SOURCE_DATE_EPOCH="$(git -C "$WSLOAD_ROOT" log -1 --format=%ct 2>/dev/null || echo 0)"
fi
REVISION="$(git -C "$WSLOAD_ROOT" rev-parse --verify -q HEAD 2>/dev/null || echo unknown)"
BUILD_ARGS=("VERSION=$IMAGE_VERSION" "REVISION=$REVISION")

# One build of an image at a time per target directory: two would share the staged context
# (stage_context empties it) and race on the tarball. A second build waits its turn.
mkdir -p "$IMAGES_DIR"
exec {lock_fd}>"$IMAGES_DIR/.lock-$IMAGE_BINARY"
if ! flock -n "$lock_fd"; then
	log "another build of $IMAGE_TAG is running in $IMAGES_DIR; waiting for it"
	flock "$lock_fd"
fi

build_binary
stage_context

mkdir -p "$IMAGES_DIR"
STAMP="$IMAGE_TAR.inputs"
FINGERPRINT="$(fingerprint)"
if [[ -f "$IMAGE_TAR" && -f "$STAMP" && "$(cat "$STAMP")" == "$FINGERPRINT" ]] &&
	{ [[ "$BUILDER" == buildah ]] || docker image inspect "$IMAGE_TAG" >/dev/null 2>&1; }; then
	log "$IMAGE_TAR is up to date ($IMAGE_TAG, $BUILDER)"
	exit 0
fi

TMP_DIR="$(mktemp -d "$IMAGES_DIR/.build.XXXXXX")"
rm -f "$STAMP"
"build_with_$BUILDER" "$TMP_DIR/image.tar"
mv -f "$TMP_DIR/image.tar" "$IMAGE_TAR"
printf '%s\n' "$FINGERPRINT" >"$STAMP"

log "built $IMAGE_TAG with $BUILDER: $IMAGE_TAR ($(du -h "$IMAGE_TAR" | cut -f1))"
log "load it with: docker load -i $IMAGE_TAR"
log "          or: ctr -n k8s.io images import $IMAGE_TAR"
log "check it with: scripts/check-image.sh $IMAGE_NAME"
