#!/usr/bin/env bash
# Check the image tarball that scripts/build-image.sh NAME wrote, without a
# container runtime (none runs on CI): read it as `docker load` and `ctr images
# import` do (manifest.json, the config it names, layers that match the config's
# diff_ids), check the config a pod runs with (user, entrypoint, environment,
# labels naming this checkout), unpack the layers, and run the entrypoint from
# them.
#
# Where this runs as root, the binary runs inside the unpacked image (chroot)
# as the image's user, with only the image's Env, and as PID 1 of its own PID
# namespace for the signal test, which is how a pod runs it. Elsewhere it runs
# directly on the host as the calling user, which still proves it is static.
#
# usage: scripts/check-image.sh NAME [TARBALL]
# env:   WSLOAD_IMAGE_MAX_MB (size bound, default 30), WSLOAD_IMAGE_VERSION (tag)
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/images.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/images.sh"

if [[ $# -lt 1 || $# -gt 2 || "$1" == -* ]]; then
	{
		image_usage "$0"
		echo "       optional second argument: the tarball (default <target>/images/<binary>.tar)"
	} >&2
	exit 2
fi
image_spec "$1"
cargo_facts
TARBALL="${2:-$IMAGE_TAR}"
[[ -f "$TARBALL" ]] || die "$TARBALL not found; build it with scripts/build-image.sh $IMAGE_NAME"
MAX_MB="${WSLOAD_IMAGE_MAX_MB:-30}"
[[ "$MAX_MB" =~ ^[0-9]+$ ]] || die "WSLOAD_IMAGE_MAX_MB must be a whole number of MiB"
ENTRY="/usr/local/bin/$IMAGE_BINARY"

WORK=""
SERVER_PID=""
at_exit '[[ -z "$WORK" ]] || rm -rf "$WORK"'
at_exit 'if [[ -n "$SERVER_PID" ]]; then kill -KILL "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; fi'
WORK="$(mktemp -d)"

# ok / not_ok: one check's outcome, counted; not_ok does not stop the other checks.
PASSED=0
FAILED=0
ok() {
	PASSED=$((PASSED + 1))
	printf 'ok: %s\n' "$*"
}
not_ok() {
	FAILED=$((FAILED + 1))
	printf 'FAIL: %s\n' "$*"
}

echo "checking $TARBALL as $IMAGE_TAG"

need_packages jq
# What `docker inspect` and `skopeo inspect --config` show, read from the tarball itself.
IMAGE="$WORK/image"
ROOTFS="$WORK/rootfs"
mkdir -p "$IMAGE" "$ROOTFS"
tar -xf "$TARBALL" -C "$IMAGE" || die "$TARBALL is not a tar archive"
[[ -f "$IMAGE/manifest.json" ]] || die "$TARBALL has no manifest.json: not a docker-archive image tarball"
MANIFEST="$(jq -c . "$IMAGE/manifest.json")" || die "$TARBALL: manifest.json is not JSON"
CONFIG_FILE="$IMAGE/$(jq -r '.[0].Config' <<<"$MANIFEST")"
[[ -f "$CONFIG_FILE" ]] || die "$TARBALL: the config manifest.json names is missing"
CONFIG="$(jq -c . "$CONFIG_FILE")" || die "$TARBALL: the image config is not JSON"
# cfg FILTER: FILTER (jq) applied to the image's runtime config, one compact JSON value.
cfg() { jq -c ".config | $1" <<<"$CONFIG"; }

# expect_eq ACTUAL EXPECTED WHAT: the check WHAT passes when ACTUAL is EXPECTED.
expect_eq() {
	if [[ "$1" == "$2" ]]; then
		ok "$3"
	else
		not_ok "$3: $1, expected $2"
	fi
}

expect_eq "$(jq length <<<"$MANIFEST")" 1 "tarball holds one image"
# docker save writes the short name, buildah the one it implies (docker.io/...); docker, ctr
# and the kubelet take both as the same image.
TAGS="$(jq -r '.[0].RepoTags // [] | map(sub("^(index\\.)?docker\\.io/"; "")) | join(", ")' <<<"$MANIFEST")"
expect_eq "$TAGS" "$IMAGE_TAG" "tagged $IMAGE_TAG"
expect_eq "$(jq -r '"\(.os)/\(.architecture)"' <<<"$CONFIG")" "$IMAGE_PLATFORM" "platform is $IMAGE_PLATFORM"
IMAGE_USER="$(cfg '.User // ""' | jq -r .)"
# Numeric so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
expect_eq "$IMAGE_USER" 65532:65532 "user is the numeric non-root 65532:65532"
expect_eq "$(cfg '.Entrypoint')" "[\"$ENTRY\"]" "entrypoint is [$ENTRY]"
expect_eq "$(cfg '.WorkingDir // "/"' | jq -r .)" / "working directory is /"
expect_eq "$(cfg '.Env // [] | map(select(startswith("PATH="))) | length')" 1 "Env sets PATH"
# Kubernetes' ports and the chart's Services name them; an image that exposes none lost its EXPOSE.
PORTS="$(cfg '.ExposedPorts // {} | keys | join(" ")' | jq -r .)"
if [[ -n "$PORTS" ]]; then ok "exposes $PORTS"; else not_ok "exposes no port"; fi
# The version and revision labels come from the build args: another revision means a stale image.
label() { cfg ".Labels[\"org.opencontainers.image.$1\"] // \"\"" | jq -r .; }
expect_eq "$(label title)" "$IMAGE_BINARY" "label org.opencontainers.image.title is $IMAGE_BINARY"
expect_eq "$(label version)" "$IMAGE_VERSION" "label org.opencontainers.image.version is $IMAGE_VERSION"
REVISION="$(git -C "$WSLOAD_ROOT" rev-parse --verify -q HEAD 2>/dev/null || echo unknown)"
if [[ "$(label revision)" == "$REVISION" ]]; then
	ok "label org.opencontainers.image.revision is this checkout's HEAD"
else
	not_ok "label org.opencontainers.image.revision is $(label revision), HEAD is $REVISION (stale image: rebuild it)"
fi
echo "config: entrypoint $(cfg .Entrypoint), cmd $(cfg '.Cmd // []'), env $(cfg '.Env // []')"

# Every layer as the config's diff_ids say (what an import verifies), unpacked in order. Each
# image is one COPY on scratch, so one layer and no whiteouts to apply.
mapfile -t LAYERS < <(jq -r '.[0].Layers[]' <<<"$MANIFEST")
mapfile -t DIFF_IDS < <(jq -r '.rootfs.diff_ids[]' <<<"$CONFIG")
expect_eq "${#LAYERS[@]} layer(s), ${#DIFF_IDS[@]} diff_id(s)" "1 layer(s), 1 diff_id(s)" "one layer, one diff_id"
INTACT=1
for i in "${!LAYERS[@]}"; do
	layer="$IMAGE/${LAYERS[i]}"
	# docker save and buildah write layers uncompressed; a gzip one (crane writes those) is read
	# through zcat: the diff_id is the digest of the uncompressed layer.
	if [[ "$(head -c 2 "$layer" | od -An -tx1 | tr -d ' ')" == 1f8b ]]; then
		zcat "$layer" >"$WORK/layer.tar"
		layer="$WORK/layer.tar"
	fi
	[[ "sha256:$(sha256sum "$layer" | cut -d' ' -f1)" == "${DIFF_IDS[i]:-}" ]] || INTACT=0
	# As the image says, whoever runs this: numeric owners, modes kept.
	tar -xf "$layer" -C "$ROOTFS" --numeric-owner --same-permissions 2>"$WORK/untar.err" ||
		not_ok "layer $i does not unpack: $(head -c 400 "$WORK/untar.err")"
	tar -tvf "$layer" --numeric-owner >>"$WORK/listing"
done
if ((INTACT)); then ok "layer contents match the config's diff_ids"; else not_ok "a layer does not match its diff_id"; fi

CONTENT="$(awk '$1 ~ /^-/ { n += $3 } END { print n + 0 }' "$WORK/listing")"
SIZES="$(awk -v c="$CONTENT" -v t="$(stat -c %s "$TARBALL")" 'BEGIN { printf "%.1f MiB (tarball %.1f MiB)", c / 2^20, t / 2^20 }')"
if ((CONTENT < MAX_MB * 1024 * 1024)); then
	ok "image content $SIZES < $MAX_MB MiB"
else
	not_ok "image content $SIZES >= $MAX_MB MiB (WSLOAD_IMAGE_MAX_MB)"
fi
# The binary root-owned and not writable by the run-time user, so a compromised process
# cannot replace its own binary; everyone may execute it.
read -r MODE OWNER < <(awk -v f="${ENTRY#/}" '$6 == f || $6 == "./" f { print $1, $2 }' "$WORK/listing") || true
if [[ "${MODE:-}" =~ ^-r[w-]xr-xr-x$ && "${OWNER:-}" == 0/0 ]]; then
	ok "$ENTRY is a root-owned file everyone may run and only root may write ($MODE $OWNER)"
else
	not_ok "$ENTRY: ${MODE:-not in the image} ${OWNER:-}, expected a root-owned, executable, not group/other-writable file"
fi
# db_names FILE ID: the passwd/group FILE in the image has an entry with numeric id ID.
db_names() { [[ -f "$ROOTFS/$1" ]] && awk -F: -v id="$2" '$3 == id { found = 1 } END { exit !found }' "$ROOTFS/$1"; }
if [[ "$IMAGE_USER" =~ ^([0-9]+):([0-9]+)$ ]]; then
	if db_names etc/passwd "${BASH_REMATCH[1]}"; then ok "/etc/passwd names UID ${BASH_REMATCH[1]}"; else not_ok "/etc/passwd does not name UID ${BASH_REMATCH[1]}"; fi
	if db_names etc/group "${BASH_REMATCH[2]}"; then ok "/etc/group names GID ${BASH_REMATCH[2]}"; else not_ok "/etc/group does not name GID ${BASH_REMATCH[2]}"; fi
fi

BIN="$ROOTFS$ENTRY"
if [[ ! -f "$BIN" ]]; then
	not_ok "nothing to run: $ENTRY is not in the image"
	echo "check-image: $PASSED passed, $FAILED failed"
	exit 1
fi

if msg="$( (assert_static "$BIN") 2>&1)"; then
	ok "$ENTRY is statically linked ($(file -b "$BIN" 2>/dev/null | cut -d, -f1-5 || echo 'no interpreter, no NEEDED'))"
else
	msg="${msg#"$LOG_NAME: error: "}"
	not_ok "${msg//"$BIN"/"$ENTRY"}"
fi

mapfile -t IMAGE_ENV < <(cfg '.Env // [] | .[]' | jq -r .)
# chroot into the unpacked image as its user; the directory mktemp made is
# 0700, which that user could not even enter.
chmod 0755 "$ROOTFS"
IN_IMAGE=0
if [[ $EUID -eq 0 ]] && command -v chroot >/dev/null && chroot / true 2>/dev/null; then
	IN_IMAGE=1
fi
PIDNS=()
if ((IN_IMAGE)) && unshare --pid --fork --kill-child true 2>/dev/null; then
	PIDNS=(unshare --pid --fork --kill-child --)
fi
if ((IN_IMAGE)); then
	WHERE="inside the image as $IMAGE_USER"
else
	WHERE="on the host as uid $(id -u), outside the image (chroot needs root)"
fi

# Environment a smoke test adds to the image's own (NAME=VALUE words).
EXTRA_ENV=()

# image_cmd [--pid1] ARGS...: sets CMD to the entrypoint with ARGS, run as the
# container would run it, with the image's Env plus EXTRA_ENV.
image_cmd() {
	local -a prefix=()
	if [[ "${1:-}" == --pid1 ]]; then
		shift
		prefix=("${PIDNS[@]}")
	fi
	if ((IN_IMAGE)); then
		CMD=(env -i "${IMAGE_ENV[@]}" "${EXTRA_ENV[@]}" "${prefix[@]}" chroot --userspec="$IMAGE_USER" "$ROOTFS" "$ENTRY" "$@")
	else
		CMD=(env -i "${IMAGE_ENV[@]}" "${EXTRA_ENV[@]}" "$BIN" "$@")
	fi
}

image_cmd --help
set +e
timeout 20 "${CMD[@]}" >"$WORK/help.out" 2>&1
rc=$?
set -e
HELP_OK=0
if [[ $rc -eq 0 && -s "$WORK/help.out" ]]; then
	HELP_OK=1
	ok "$ENTRY --help exits 0 $WHERE: \"$(head -n1 "$WORK/help.out")\""
else
	not_ok "$ENTRY --help $WHERE: exit $rc, output: $(head -c 600 "$WORK/help.out")"
fi

# http_status URL [TOKEN]: the status URL answers with once it answers at all
# (polled for up to 15 s while the process starts), else "no answer"; with TOKEN,
# sent as a bearer token.
http_status() {
	python3 - "$1" "${2:-}" <<'EOF'
import sys, time, urllib.request, urllib.error
deadline = time.monotonic() + 15
code = "no answer"
request = urllib.request.Request(sys.argv[1])
if sys.argv[2]:
    request.add_header("Authorization", "Bearer " + sys.argv[2])
while time.monotonic() < deadline:
    try:
        with urllib.request.urlopen(request, timeout=2) as r:
            code = str(r.status)
            break
    except urllib.error.HTTPError as e:  # an answer, just not a 2xx
        code = str(e.code)
        break
    except Exception:  # not listening yet
        time.sleep(0.2)
print(code)
EOF
}

# The process an `image_cmd --pid1` command started as $SERVER_PID: with a PID
# namespace that is unshare, and the entrypoint is its child.
entry_pid() {
	if ((${#PIDNS[@]})) && ((IN_IMAGE)); then
		ps -o pid= --ppid "$SERVER_PID" | tr -d ' ' | head -n1 || true
	else
		echo "$SERVER_PID"
	fi
}

# The server must serve in an otherwise empty filesystem as a non-root user,
# and, as PID 1 (where signals without a handler are ignored), stop on SIGTERM:
# otherwise every pod deletion waits out the grace period and is killed.
smoke_server() {
	local ws metrics code child deadline rc
	read -r ws metrics < <(free_ports 2)
	image_cmd --pid1 --listen "127.0.0.1:$ws" --metrics-listen "127.0.0.1:$metrics" --drain-timeout 2s
	"${CMD[@]}" >"$WORK/server.log" 2>&1 &
	SERVER_PID=$!
	code="$(http_status "http://127.0.0.1:$metrics/healthz")"
	if [[ "$code" == 200 ]]; then
		ok "server answers /healthz 200 $WHERE"
	else
		not_ok "server /healthz: $code; log: $(head -c 800 "$WORK/server.log")"
	fi

	child="$(entry_pid)"
	if [[ -z "$child" ]]; then
		not_ok "server exited before SIGTERM; log: $(head -c 800 "$WORK/server.log")"
		return
	fi
	kill -TERM "$child" 2>/dev/null || true
	if ! WAIT_INTERVAL=0.2 wait_until 15 process_gone "$SERVER_PID"; then
		not_ok "server still running 15 s after SIGTERM$( ((${#PIDNS[@]})) && echo ' as PID 1')"
		return
	fi
	set +e
	wait "$SERVER_PID"
	rc=$?
	set -e
	SERVER_PID=""
	if [[ $rc -eq 0 ]]; then
		ok "server exits 0 on SIGTERM$( ((${#PIDNS[@]})) && echo ' as PID 1 of its PID namespace')"
	else
		not_ok "server exit status $rc after SIGTERM; log: $(tail -c 800 "$WORK/server.log")"
	fi
}

# The load generator must read a LoadTest in the image (validate); a shard must
# get ready on its control endpoint from the environment alone, as a pod runs
# it, and, as PID 1, end on SIGTERM while it waits for its start.
smoke_loadgen() {
	local spec in_image_spec port code child out deadline rc
	mkdir -p "$ROOTFS/tmp"
	cp "$WSLOAD_ROOT/examples/quickstart.yaml" "$ROOTFS/tmp/quickstart.yaml"
	chmod 0755 "$ROOTFS/tmp"
	chmod 0644 "$ROOTFS/tmp/quickstart.yaml"
	in_image_spec="/tmp/quickstart.yaml"
	((IN_IMAGE)) || in_image_spec="$ROOTFS/tmp/quickstart.yaml"
	image_cmd validate "$in_image_spec"
	if out="$(timeout 20 "${CMD[@]}" 2>&1)" && [[ "$out" == *"valid LoadTest"* ]]; then
		ok "wsload validate examples/quickstart.yaml $WHERE: \"$out\""
	else
		not_ok "wsload validate examples/quickstart.yaml $WHERE: $out"
	fi

	# Nothing listens on port 9: the shard only has to get ready, not to connect.
	spec="$(printf '%s\n' 'apiVersion: wsload.dev/v1alpha1' 'kind: LoadTest' 'metadata: {name: smoke}' \
		'spec:' '  target: {url: "ws://127.0.0.1:9/"}' '  scenario: connectionStorm' '  connections: [10]')"
	port="$(free_ports)"
	# The control token as a pod gets it: a file the image's user can read.
	token="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
	printf '%s' "$token" >"$ROOTFS/tmp/control-token"
	chmod 0644 "$ROOTFS/tmp/control-token"
	in_image_token="/tmp/control-token"
	((IN_IMAGE)) || in_image_token="$ROOTFS/tmp/control-token"
	EXTRA_ENV=("WSLOAD_LOADTEST=$spec" WSLOAD_SHARD_INDEX=0 WSLOAD_SHARD_COUNT=1
		WSLOAD_AWAIT_START=true "WSLOAD_METRICS_LISTEN=127.0.0.1:$port"
		"WSLOAD_CONTROL_TOKEN_FILE=$in_image_token")
	image_cmd --pid1 shard
	EXTRA_ENV=()
	"${CMD[@]}" >"$WORK/shard.log" 2>&1 &
	SERVER_PID=$!
	code="$(http_status "http://127.0.0.1:$port/readyz")"
	if [[ "$code" == 200 ]]; then
		ok "shard --await-start configured by env answers /readyz 200 $WHERE"
	else
		not_ok "shard /readyz: $code; log: $(head -c 800 "$WORK/shard.log")"
	fi
	code="$(http_status "http://127.0.0.1:$port/control/result")"
	if [[ "$code" == 401 ]]; then
		ok "shard answers /control/result without its token 401"
	else
		not_ok "shard /control/result without the token: $code"
	fi
	code="$(http_status "http://127.0.0.1:$port/control/result" "$token")"
	if [[ "$code" == 409 ]]; then
		ok "shard answers /control/result with its token 409 before its start"
	else
		not_ok "shard /control/result before the start: $code"
	fi

	child="$(entry_pid)"
	if [[ -z "$child" ]]; then
		not_ok "shard exited before SIGTERM; log: $(head -c 800 "$WORK/shard.log")"
		return
	fi
	kill -TERM "$child" 2>/dev/null || true
	if ! WAIT_INTERVAL=0.2 wait_until 15 process_gone "$SERVER_PID"; then
		not_ok "shard still running 15 s after SIGTERM$( ((${#PIDNS[@]})) && echo ' as PID 1')"
		return
	fi
	set +e
	wait "$SERVER_PID"
	rc=$?
	set -e
	SERVER_PID=""
	# 128 + SIGTERM: told to stop before it ran, it did not finish.
	if [[ $rc -eq 143 ]]; then
		ok "a waiting shard exits 143 on SIGTERM$( ((${#PIDNS[@]})) && echo ' as PID 1 of its PID namespace')"
	else
		not_ok "shard exit status $rc after SIGTERM; log: $(tail -c 800 "$WORK/shard.log")"
	fi
}

# The operator needs a cluster to run; in the image it must at least print the
# CRD it reconciles, the same as crds/loadtest.yaml (what the chart installs).
# scripts/k8s/node-smoke.sh runs it in a pod against a real API server.
smoke_operator() {
	local out
	image_cmd crd
	if out="$(timeout 20 "${CMD[@]}" 2>&1)" && grep -q '^kind: CustomResourceDefinition$' <<<"$out" &&
		grep -q 'name: loadtests.wsload.dev' <<<"$out"; then
		ok "wsload-operator crd prints the LoadTest CRD $WHERE"
	else
		not_ok "wsload-operator crd $WHERE: $(head -c 600 <<<"$out")"
		return
	fi
	if cmp -s <(printf '%s\n' "$out") "$WSLOAD_ROOT/crds/loadtest.yaml"; then
		ok "the image's CRD is crds/loadtest.yaml"
	else
		not_ok "the image's CRD differs from crds/loadtest.yaml (stale image? rebuild it)"
	fi
}

if ! declare -F "smoke_$IMAGE_NAME" >/dev/null; then
	: # no run-time smoke test for this image yet
elif ((HELP_OK)); then
	"smoke_$IMAGE_NAME"
else
	not_ok "smoke test not run: the binary does not start"
fi

echo "check-image: $PASSED passed, $FAILED failed"
((FAILED == 0))
