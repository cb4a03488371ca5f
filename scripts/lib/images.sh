# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables set here are for the scripts that source this
# Shared by scripts/build-image.sh and scripts/check-image.sh, and by the node
# cluster's image scripts (scripts/k8s/pause.sh, prometheus.sh); sourced, never run.
# The scripts must agree on the image table, the tag and the tarball path, so
# they live here once. Brings scripts/lib/common.sh (log, die, at_exit) along
# when the script has not sourced it yet.

WSLOAD_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# Not sourced twice: a second sourcing would drop the clean-ups already registered.
if ! declare -F at_exit >/dev/null; then
	# shellcheck source=scripts/lib/common.sh
	source "$WSLOAD_ROOT/scripts/lib/common.sh"
fi
WSLOAD_CACHE="${WSLOAD_CACHE:-$HOME/.cache/wsload}"
MUSL_TARGET="x86_64-unknown-linux-musl"
IMAGE_PLATFORM="linux/amd64"
# Pinned so that every machine builds with the same crane; bump deliberately
# (`go list -m -versions github.com/google/go-containerregistry` lists them).
CRANE_VERSION="v0.22.1"
CRANE_MODULE="github.com/google/go-containerregistry/cmd/crane"

# ensure_crane: sets CRANE to the pinned crane, installing it into the cache first when it is
# missing or another version. The node cluster's own images have no Dockerfile (pause.sh,
# prometheus.sh assemble a layer and set its config with crane); ours are built by
# build-image.sh from their Dockerfiles with docker or buildah.
ensure_crane() {
	CRANE="$WSLOAD_CACHE/bin/crane"
	if [[ -x "$CRANE" && "$("$CRANE" version 2>/dev/null || true)" == "$CRANE_VERSION" ]]; then
		return
	fi
	command -v go >/dev/null || die "go is needed to install crane $CRANE_VERSION"
	log "installing crane $CRANE_VERSION into $WSLOAD_CACHE/bin"
	mkdir -p "$WSLOAD_CACHE/bin"
	# CGO off keeps crane static, so a later change of the C toolchain can't break it. go's
	# output on stderr: a script whose stdout is data (stdout_is_data) may call this.
	GOBIN="$WSLOAD_CACHE/bin" CGO_ENABLED=0 nice -n "${WSLOAD_BUILD_NICE:-19}" \
		go install "$CRANE_MODULE@$CRANE_VERSION" >&2
	[[ "$("$CRANE" version)" == "$CRANE_VERSION" ]] || die "$CRANE does not report version $CRANE_VERSION"
}

# crane_stage LAYER NAME DIR: an image of the one layer tarball LAYER on an empty base, pushed as
# NAME to a throwaway in-memory crane registry on loopback; sets STAGING to its reference and
# REGISTRY_PID (stopped at exit, or earlier by stop_registry; one registry at a time). `crane
# mutate` works on registry images only, so pause.sh and prometheus.sh stage their images this
# way before setting their config. Logs go to DIR.
crane_stage() {
	local layer="$1" name="$2" dir="$3" port=""
	stop_registry
	# Its stdout on stderr: nothing it prints may reach a stdout that a caller reads.
	"$CRANE" registry serve --address 127.0.0.1:0 >&2 2>"$dir/registry.log" &
	REGISTRY_PID=$!
	at_exit stop_registry
	local rc=0
	WAIT_INTERVAL=0.1 wait_until 10 --pid "$REGISTRY_PID" registry_port "$dir/registry.log" || rc=$?
	((rc != 1)) || die "crane registry exited: $(cat "$dir/registry.log")"
	((rc != 2)) || die "crane registry did not start in 10s: $(cat "$dir/registry.log")"
	port="$REGISTRY_PORT"
	STAGING="127.0.0.1:$port/$name"
	"$CRANE" append --insecure --oci-empty-base --new_layer "$layer" --new_tag "$STAGING" \
		>"$dir/crane.log" 2>&1 || die "crane append failed: $(cat "$dir/crane.log")"
}

# registry_port LOG: sets REGISTRY_PORT once the registry logging to LOG says where it serves.
registry_port() {
	REGISTRY_PORT="$(sed -n 's/.*serving on port \([0-9][0-9]*\).*/\1/p' "$1")"
	[[ -n "$REGISTRY_PORT" ]]
}

# stop_registry: stops crane_stage's registry if it runs (REGISTRY_PID); a no-op otherwise.
stop_registry() {
	stop_process "${REGISTRY_PID:-}"
	REGISTRY_PID=""
}

# The image table. Each image is one static binary of one workspace package,
# staged into a FROM-scratch image by the Dockerfile in its directory; that
# Dockerfile declares ARG VERSION and ARG REVISION, which build-image.sh passes
# and check-image.sh finds in the labels. features: the cargo
# features the binary is built with, `default` for the package's own defaults;
# anything else is built with --no-default-features. The load generator's image
# leaves out `plot` (shard pods never draw; `wsload run` in a pod needs no plot).
#   name      cargo package     binary            Dockerfile dir   repository        features
IMAGE_TABLE="
server    wsload-server     wsload-server     server-image     wsload/server     default
loadgen   wsload            wsload            loadgen-image    wsload/loadgen    mimalloc
operator  wsload-operator   wsload-operator   operator         wsload/operator   default
"

# image_spec NAME: sets IMAGE_NAME, IMAGE_PACKAGE, IMAGE_BINARY, IMAGE_DIR and IMAGE_REPO (the
# features column is read by scripts/cargo-build.sh static, which builds every image's binary).
image_spec() {
	local want="$1" name package binary dir repo
	while read -r name package binary dir repo _; do
		[[ -n "$name" && "$name" == "$want" ]] || continue
		IMAGE_NAME="$name"
		IMAGE_PACKAGE="$package"
		IMAGE_BINARY="$binary"
		IMAGE_DIR="$WSLOAD_ROOT/$dir"
		IMAGE_REPO="$repo"
		[[ -f "$IMAGE_DIR/Dockerfile" ]] || die "image '$want': $dir/Dockerfile does not exist yet"
		return 0
	done <<<"$IMAGE_TABLE"
	die "unknown image '$want'; known: $(awk 'NF {printf "%s ", $1}' <<<"$IMAGE_TABLE")"
}

# image_usage PROG: the usage line, with the names from the table.
image_usage() {
	printf 'usage: %s NAME    (NAME: %s)\n' "$1" "$(awk 'NF {printf "%s%s", sep, $1; sep="|"}' <<<"$IMAGE_TABLE")"
}

# cargo_facts: sets IMAGE_VERSION (WSLOAD_IMAGE_VERSION overrides the package's
# own, which is the workspace version), TARGET_DIR (honours CARGO_TARGET_DIR),
# IMAGE_TAG, IMAGES_DIR and IMAGE_TAR. Needs image_spec first.
cargo_facts() {
	local facts
	# --no-deps keeps this offline and fast; the package check catches a table
	# row whose crate has not been added to the workspace yet.
	facts="$(cd "$WSLOAD_ROOT" && cargo metadata --format-version 1 --no-deps |
		python3 -c '
import json, sys
meta = json.load(sys.stdin)
pkg = [p for p in meta["packages"] if p["name"] == sys.argv[1]]
if not pkg:
    sys.exit("package %s is not a member of the cargo workspace" % sys.argv[1])
print(pkg[0]["version"])
print(meta["target_directory"])
' "$IMAGE_PACKAGE")" || die "cargo metadata failed for package $IMAGE_PACKAGE"
	{
		read -r IMAGE_VERSION
		read -r TARGET_DIR
	} <<<"$facts"
	IMAGE_VERSION="${WSLOAD_IMAGE_VERSION:-$IMAGE_VERSION}"
	[[ "$IMAGE_VERSION" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] ||
		die "'$IMAGE_VERSION' is not a valid image tag (WSLOAD_IMAGE_VERSION?)"
	IMAGE_TAG="$IMAGE_REPO:$IMAGE_VERSION"
	IMAGES_DIR="$TARGET_DIR/images"
	IMAGE_TAR="$IMAGES_DIR/$IMAGE_BINARY.tar"
}

# ensure_musl_toolchain: the Rust standard library for $MUSL_TARGET and musl-gcc.
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

# assert_static FILE: a static binary has no program interpreter and needs no
# shared library; anything else would not start in a FROM-scratch image.
assert_static() {
	local bin="$1" headers dynamic
	[[ -f "$bin" ]] || die "$bin does not exist"
	headers="$(readelf -lW "$bin" 2>&1)" || die "$bin is not an ELF file: $headers"
	if grep -q 'Requesting program interpreter' <<<"$headers"; then
		die "$bin is dynamically linked ($(grep -o 'interpreter: [^]]*' <<<"$headers")); it cannot run FROM scratch"
	fi
	# A static-pie binary still has a dynamic section, but no NEEDED entry.
	dynamic="$(readelf -dW "$bin" 2>&1)" || true
	if grep -q '(NEEDED)' <<<"$dynamic"; then
		die "$bin needs shared libraries: $(grep '(NEEDED)' <<<"$dynamic" | grep -o '\[.*\]' | tr '\n' ' ')"
	fi
}
