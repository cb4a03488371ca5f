#!/usr/bin/env bash
# Build the container image NAME (table in scripts/lib/images.sh) from a static
# musl binary into <cargo target dir>/images/<binary>.tar, tagged
# <repo>:<workspace version>, for `docker load -i` or `ctr -n k8s.io images import`.
#
# Why two builders: developers have Docker, so when a daemon answers `docker
# info` the Dockerfile is built by `docker build` exactly as written. CI and the
# project's build machines have the docker client but no daemon, and no base
# image could be pulled there anyway; there the same image is assembled with
# crane (a single static Go binary from the Go module proxy): the staged
# rootfs/ becomes the one layer on an empty base, and the Dockerfile's config,
# read by scripts/lib/dockerfile.py, is applied with `crane mutate`.
# scripts/check-image.sh checks either result against the same Dockerfile.
#
# The binary is cross-built on the host, not in Docker, for the same reason: no
# Rust base image can be pulled here, and the host's cargo cache makes a second
# run take seconds.
#
# Environment:
#   WSLOAD_IMAGE_VERSION  image tag (default: the package's workspace version)
#   WSLOAD_IMAGE_BUILDER  auto (default) | docker | crane
#   WSLOAD_CACHE          tool cache, crane goes to its bin/ (default ~/.cache/wsload)
#   WSLOAD_IMAGE_KEEP_DEBUG=1  ship the binary's DWARF line tables (several times larger)
#   SOURCE_DATE_EPOCH     file times inside the layer (default: last commit's time)
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

DOCKERFILE_PY="$WSLOAD_ROOT/scripts/lib/dockerfile.py"
BUILDER="${WSLOAD_IMAGE_BUILDER:-auto}"
TMP_DIR=""
at_exit '[[ -z "$TMP_DIR" ]] || rm -rf "$TMP_DIR"'

ensure_musl_toolchain() {
	local installed
	command -v rustup >/dev/null || die "rustup not found; it provides the $MUSL_TARGET standard library"
	installed="$(rustup target list --installed)"
	if ! grep -qx "$MUSL_TARGET" <<<"$installed"; then
		log "adding rust target $MUSL_TARGET"
		rustup target add "$MUSL_TARGET"
	fi
	# C in the dependency tree (mimalloc, ring) must be compiled against musl's
	# headers; cc-rs looks for musl-gcc for this target.
	if ! command -v musl-gcc >/dev/null; then
		need_packages musl-tools
	fi
}

build_binary() {
	log "building $IMAGE_PACKAGE for $MUSL_TARGET${IMAGE_CARGO_FEATURES[*]:+ (${IMAGE_CARGO_FEATURES[*]})}"
	# --locked: an image is a release artefact; it must not quietly re-resolve
	# dependencies that the tests did not see.
	(cd "$WSLOAD_ROOT" && CC_x86_64_unknown_linux_musl="${CC_x86_64_unknown_linux_musl:-musl-gcc}" \
		cargo build --locked --release --target "$MUSL_TARGET" -p "$IMAGE_PACKAGE" --bin "$IMAGE_BINARY" \
			"${IMAGE_CARGO_FEATURES[@]}")
	BINARY_PATH="$TARGET_DIR/$MUSL_TARGET/release/$IMAGE_BINARY"
	assert_static "$BINARY_PATH"
}

# The build context is staged fresh each run so that nothing left from an
# earlier build can end up in the image.
stage_context() {
	local config user uid gid entry0 rootfs
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

	# The Dockerfile is the one place that names the user and entrypoint; read
	# them rather than repeat them here.
	config="$(python3 "$DOCKERFILE_PY" config "$CONTEXT_DIR/Dockerfile" "${BUILD_ARGS[@]/#/--build-arg=}")" ||
		die "cannot use $IMAGE_DIR/Dockerfile (above)"
	user="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["User"])' <<<"$config")"
	entry0="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["Entrypoint"][0])' <<<"$config")"
	[[ "$entry0" == "/usr/local/bin/$IMAGE_BINARY" ]] ||
		die "$IMAGE_DIR/Dockerfile: ENTRYPOINT is $entry0, expected /usr/local/bin/$IMAGE_BINARY"
	[[ "$user" =~ ^([0-9]+):([0-9]+)$ ]] || die "$IMAGE_DIR/Dockerfile: USER must be numeric UID:GID, got '$user'"
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
		printf '%s\n' "$BUILDER" "$IMAGE_TAG" "$IMAGE_PLATFORM" "$CRANE_VERSION" "${WSLOAD_IMAGE_KEEP_DEBUG:-0}" "${BUILD_ARGS[@]}"
		cat "${BASH_SOURCE[0]}" "$WSLOAD_ROOT/scripts/lib/images.sh" "$DOCKERFILE_PY" "$CONTEXT_DIR/Dockerfile"
		(cd "$CONTEXT_DIR/rootfs" && find . -printf '%p %y %m %T@\n' | LC_ALL=C sort &&
			find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
	} | sha256sum | cut -d' ' -f1
}

build_with_docker() {
	local out="$1"
	log "docker build $IMAGE_TAG"
	# No default provenance attestations: they would add a second manifest
	# that the crane path does not make.
	BUILDX_NO_DEFAULT_ATTESTATIONS=1 docker build --platform "$IMAGE_PLATFORM" \
		"${BUILD_ARGS[@]/#/--build-arg=}" --tag "$IMAGE_TAG" \
		--file "$CONTEXT_DIR/Dockerfile" "$CONTEXT_DIR"
	docker save --output "$out" "$IMAGE_TAG"
}

# crane logs every blob it pushes; show that only when something went wrong.
quietly() {
	if ! "$@" >"$TMP_DIR/quiet.log" 2>&1; then
		cat "$TMP_DIR/quiet.log" >&2
		die "failed: $*"
	fi
}

build_with_crane() {
	local out="$1" layer args_file
	local -a entries mutate_args
	ensure_crane
	layer="$TMP_DIR/layer.tar"
	# Sorted names, numeric root ownership and fixed times make the layer, and
	# so the image digest, the same on every machine for the same binary.
	mapfile -t entries < <(cd "$CONTEXT_DIR/rootfs" && find . -mindepth 1 -maxdepth 1 -printf '%P\n' | LC_ALL=C sort)
	tar --create --file "$layer" --directory "$CONTEXT_DIR/rootfs" --format=gnu --sort=name \
		--owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" "${entries[@]}"

	log "crane append + mutate $IMAGE_TAG"
	crane_stage "$layer" "$IMAGE_REPO:$IMAGE_VERSION" "$TMP_DIR"
	args_file="$TMP_DIR/mutate.args"
	python3 "$DOCKERFILE_PY" crane-args "$CONTEXT_DIR/Dockerfile" --rootfs "$CONTEXT_DIR/rootfs" \
		"${BUILD_ARGS[@]/#/--build-arg=}" >"$args_file"
	mapfile -d '' mutate_args <"$args_file"
	quietly "$CRANE" mutate --insecure "$STAGING" "${mutate_args[@]}" --set-platform "$IMAGE_PLATFORM" \
		--tag "$IMAGE_TAG" --output "$out"
}

case "$BUILDER" in
auto)
	# `docker info` fails fast without a daemon; the timeout covers a daemon
	# that is wedged rather than absent.
	if command -v docker >/dev/null && timeout 20 docker info >/dev/null 2>&1; then
		BUILDER=docker
	else
		BUILDER=crane
	fi
	;;
docker | crane) ;;
*) die "WSLOAD_IMAGE_BUILDER must be auto, docker or crane, not '$BUILDER'" ;;
esac

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

ensure_musl_toolchain
build_binary
stage_context

mkdir -p "$IMAGES_DIR"
STAMP="$IMAGE_TAR.inputs"
FINGERPRINT="$(fingerprint)"
if [[ -f "$IMAGE_TAR" && -f "$STAMP" && "$(cat "$STAMP")" == "$FINGERPRINT" ]] &&
	{ [[ "$BUILDER" == crane ]] || docker image inspect "$IMAGE_TAG" >/dev/null 2>&1; }; then
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
