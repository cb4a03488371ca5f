#!/usr/bin/env bash
# Builds upstream Prometheus 3.9.1 (prometheus and promtool) from the Go module proxy into a
# version-keyed cache and makes the image quay.io/prometheus/prometheus:v3.9.1 from it, laid
# out like upstream's (/bin/prometheus, /bin/promtool, /etc/prometheus/prometheus.yml, user
# nobody, WORKDIR /prometheus), so the chart's `prometheus.install` runs unchanged here, with
# the same image name and tag it defaults to elsewhere. Prints the path asked for on stdout
# (its only line); progress and the tools' output go to stderr.
#
# usage: scripts/k8s/prometheus.sh [--no-build] [image|prometheus|promtool]
#   image       the image tarball, for `cluster.sh load` or `ctr -n k8s.io images import`
#               (the default)
#   prometheus  the static binary
#   promtool    the static promtool (`promtool check config` understands kubernetes_sd_configs,
#               Debian's 2.42 does not)
#   --no-build  print the path only when it is already cached; exit 3 otherwise (for checks
#               that must not start a minutes-long build)
#
# Why from source: no image can be pulled here and Debian's prometheus 2.42 is built without
# kubernetes_sd_configs. prometheus/ is a wrapper module requiring the release (`go install
# pkg@version` is refused: prometheus' go.mod has exclude directives); its go.sum pins every
# module's hash. The module has no web UI assets (they are built with npm upstream), so UI pages
# answer 500; the HTTP API, which everything here uses, is complete.
#
# Service discovery: Kubernetes, file and http only. Upstream's way to build with fewer is its
# generated plugins/plugins.go (`make plugins` from a shorter plugins.yml); Go refuses to
# overlay a file of the module cache, so the build compiles a copy of the release's module
# (verified against go.sum when downloaded) with prometheus/plugins.go.in as that file, through
# a `replace` in a copy of go.mod. The cloud providers' SDKs and xDS' gRPC left out, the build
# took 170 s instead of 345 s cold on 2 cores and the binaries are 71 + 61 MB instead of
# 131 + 127. A config naming another mechanism is refused ("field ec2_sd_configs not found").
#
# Cache: ${WSLOAD_CACHE:-~/.cache/wsload}/prometheus/v3.9.1/{prometheus,promtool,image.tar}.
# Measured on 2 cores shared with other builds, niced: modules ~50 s (~1.2 GB under
# ~/go/pkg/mod), both binaries ~3 min cold (71 + 61 MB, static; the Go build cache shares
# most packages with a build of all the plugins), the image 5 s (45 MB tarball); a cached rerun
# 0.1 s (the image's inputs are fingerprinted, not rebuilt).
#
# Environment:
#   WSLOAD_CACHE                 cache root (default ~/.cache/wsload)
#   WSLOAD_PROMETHEUS_REBUILD=1  rebuild the binaries and the image even when cached
#   WSLOAD_BUILD_NICE            niceness of the go build (default 19)
set -euo pipefail

K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# CRANE_VERSION, CRANE_MODULE, IMAGE_PLATFORM, assert_static: the image tooling every image
# script here shares.
# shellcheck source=scripts/lib/images.sh
source "$K8S_DIR/../lib/images.sh"
LOG_NAME=k8s/prometheus
# shellcheck source=scripts/lib/common.sh
source "$K8S_DIR/../lib/common.sh"
# The path is this script's stdout; go, crane and the rest report on stderr.
stdout_is_data

# Upstream numbers the Go module v0.3MM.P for Prometheus v3.MM.P; both are pinned here and the
# module's version again in prometheus/go.mod (checked below).
PROM_VERSION=3.9.1
PROM_MODULE=github.com/prometheus/prometheus
PROM_MODULE_VERSION=v0.309.1
PROM_TAG="quay.io/prometheus/prometheus:v$PROM_VERSION"
GOMOD_DIR="$K8S_DIR/prometheus"
OUT_DIR="$WSLOAD_CACHE/prometheus/v$PROM_VERSION"
# Upstream's image runs as busybox's nobody.
NOBODY=65534

check_gomod_version() {
	grep -Eq "^require ${PROM_MODULE//./\\.} ${PROM_MODULE_VERSION//./\\.}\$" "$GOMOD_DIR/go.mod" ||
		die "scripts/k8s/prometheus/go.mod does not require $PROM_MODULE $PROM_MODULE_VERSION (PROM_MODULE_VERSION here): edit it, then run GOFLAGS=-mod=mod go mod tidy there"
}

# What a binary says its version is proves the version ldflags took. -x first: for a missing
# binary, reported_version would find the version in bash's error message, which names OUT_DIR.
cached_binaries() {
	[[ "${WSLOAD_PROMETHEUS_REBUILD:-0}" != 1 && -x "$OUT_DIR/prometheus" && -x "$OUT_DIR/promtool" &&
		"$(reported_version "$OUT_DIR/prometheus" --version)" == "$PROM_VERSION" &&
		"$(reported_version "$OUT_DIR/promtool" --version)" == "$PROM_VERSION" ]]
}

TMP=""
REGISTRY_PID=""
at_exit '[[ -z "$TMP" ]] || rm -rf "$TMP"'
at_exit 'if [[ -n "$REGISTRY_PID" ]]; then kill "$REGISTRY_PID" 2>/dev/null || true; wait "$REGISTRY_PID" 2>/dev/null || true; fi'
# Turned into exits so that the EXIT trap also runs on Ctrl-C and kill.
trap 'exit 130' INT
trap 'exit 143' TERM

build_binaries() {
	local started module_time build_date ldflags v bin
	require_go 24 "Prometheus $PROM_VERSION"
	check_gomod_version
	started=$SECONDS
	log "building prometheus and promtool $PROM_VERSION ($PROM_MODULE $PROM_MODULE_VERSION) from the Go module proxy; ~3 min cold, niced"
	# The release's publication time, not now: rebuilds are then identical.
	module_time="$(cd "$GOMOD_DIR" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go list -m -f '{{.Time.UTC.Format "20060102-15:04:05"}}' "$PROM_MODULE")" ||
		die "go list -m $PROM_MODULE failed (is the Go module proxy reachable?)"
	build_date="$module_time"
	# Upstream's .promu.yml sets these. The module carries no git revision, so the revision
	# names the module version it was built from.
	ldflags="-s -w"
	for v in "Version=$PROM_VERSION" "Revision=$PROM_MODULE_VERSION" "Branch=HEAD" \
		"BuildUser=wsload@go-module-proxy" "BuildDate=$build_date"; do
		ldflags+=" -X github.com/prometheus/common/version.$v"
	done
	TMP="$(mktemp -d "$OUT_DIR/.build.XXXXXX")"
	local src
	src="$(cd "$GOMOD_DIR" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go mod download -json "$PROM_MODULE" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')" ||
		die "go mod download $PROM_MODULE failed (is the Go module proxy reachable?)"
	[[ -f "$src/plugins/plugins.go" ]] ||
		die "$src/plugins/plugins.go is missing: upstream moved its plugin list; make prometheus/plugins.go.in replace the new one"
	cp -r "$src" "$TMP/src"
	chmod -R u+w "$TMP/src"
	cp "$GOMOD_DIR/plugins.go.in" "$TMP/src/plugins/plugins.go"
	cp "$GOMOD_DIR/go.mod" "$TMP/go.mod"
	cp "$GOMOD_DIR/go.sum" "$TMP/go.sum"
	printf '\nreplace %s => %s\n' "$PROM_MODULE" "$TMP/src" >>"$TMP/go.mod"
	# -mod=readonly: go.mod and go.sum are reviewed files, a build must not rewrite them (the
	# copies in TMP neither: every other module is checked against go.sum as before).
	# -buildvcs=false: the wrapper sits in this repository, whose git state says nothing about
	# Prometheus. netgo as upstream (builtinassets is not possible: no assets in the module).
	# CGO off: a static binary that runs in an image without libc. -s -w: ~35% smaller image,
	# and Go keeps its own symbol table, so panics still name functions.
	# One go build for both commands: they share most packages.
	(cd "$GOMOD_DIR" && GOTOOLCHAIN=local CGO_ENABLED=0 nice -n "${WSLOAD_BUILD_NICE:-19}" go build \
		-modfile "$TMP/go.mod" -mod=readonly -buildvcs=false -trimpath -tags=netgo -ldflags="$ldflags" -o "$TMP/bin/" \
		"$PROM_MODULE/cmd/prometheus" "$PROM_MODULE/cmd/promtool") ||
		die "go build of $PROM_MODULE $PROM_MODULE_VERSION failed (above); every module in scripts/k8s/prometheus/go.sum must be served by the Go module proxy"
	for bin in prometheus promtool; do
		assert_static "$TMP/bin/$bin"
		[[ "$(reported_version "$TMP/bin/$bin" --version)" == "$PROM_VERSION" ]] ||
			die "$bin reports version '$(reported_version "$TMP/bin/$bin" --version)', not $PROM_VERSION"
		chmod 0755 "$TMP/bin/$bin"
	done
	# Renamed into place only once both are good: an interrupted build leaves no half binary.
	mv -f "$TMP/bin/promtool" "$OUT_DIR/promtool"
	mv -f "$TMP/bin/prometheus" "$OUT_DIR/prometheus"
	rm -rf "$TMP"
	TMP=""
	log "built prometheus and promtool $PROM_VERSION in $((SECONDS - started))s -> $OUT_DIR ($(du -sh "$OUT_DIR/prometheus" | cut -f1), $(du -sh "$OUT_DIR/promtool" | cut -f1))"
}

# Everything the image is made of; equal fingerprints mean image.tar is already this image.
image_fingerprint() {
	{
		printf '%s\n' "$PROM_TAG" "$IMAGE_PLATFORM" "$CRANE_VERSION"
		cat "${BASH_SOURCE[0]}" "$GOMOD_DIR/go.sum" "$GOMOD_DIR/plugins.go.in"
		# The binaries are only ever replaced by rename, so size and time identify them.
		stat -c '%n %s %Y' "$OUT_DIR/prometheus" "$OUT_DIR/promtool"
	} | sha256sum | cut -d' ' -f1
}

# The one layer: upstream's files, with upstream's owners (nobody owns the config and data
# directories), fixed times and sorted names so the digest depends on the content only.
write_layer() { # out.tar module-dir mtime
	python3 - "$1" "$2" "$3" "$OUT_DIR" "$NOBODY" <<'PY'
import io, os, sys, tarfile
out, moddir, mtime, bindir, nobody = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
passwd = b"root:x:0:0:root:/root:/sbin/nologin\nnobody:x:%d:%d:nobody:/home:/sbin/nologin\n" % (nobody, nobody)
group = b"root:x:0:\nnobody:x:%d:\n" % nobody
entries = [  # (name, mode, uid, source path | bytes | None for a directory)
    ("LICENSE", 0o644, 0, os.path.join(moddir, "LICENSE")),
    ("NOTICE", 0o644, 0, os.path.join(moddir, "NOTICE")),
    ("bin", 0o755, 0, None),
    ("bin/prometheus", 0o755, 0, os.path.join(bindir, "prometheus")),
    ("bin/promtool", 0o755, 0, os.path.join(bindir, "promtool")),
    ("etc", 0o755, 0, None),
    ("etc/group", 0o644, 0, group),
    ("etc/passwd", 0o644, 0, passwd),
    ("etc/prometheus", 0o755, nobody, None),
    ("etc/prometheus/prometheus.yml", 0o644, nobody, os.path.join(moddir, "documentation/examples/prometheus.yml")),
    ("prometheus", 0o775, nobody, None),
]
with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as tar:
    for name, mode, uid, src in sorted(entries):
        info = tarfile.TarInfo(name)
        info.mode, info.uid, info.gid, info.mtime = mode, uid, uid, mtime
        info.uname = info.gname = "nobody" if uid else "root"
        if src is None:
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
            continue
        data = src if isinstance(src, bytes) else None
        if data is None:
            with open(src, "rb") as f:
                info.size = os.fstat(f.fileno()).st_size
                tar.addfile(info, f)
        else:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
PY
}

build_image() {
	local started moddir mtime
	started=$SECONDS
	ensure_crane
	moddir="$(cd "$GOMOD_DIR" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' "$PROM_MODULE")"
	[[ -f "$moddir/documentation/examples/prometheus.yml" ]] ||
		die "$PROM_MODULE $PROM_MODULE_VERSION is not in the module cache (go mod download in scripts/k8s/prometheus)"
	mtime="$(cd "$GOMOD_DIR" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go list -m -f '{{.Time.Unix}}' "$PROM_MODULE")"
	TMP="$(mktemp -d "$OUT_DIR/.image.XXXXXX")"
	write_layer "$TMP/layer.tar" "$moddir" "$mtime"

	crane_stage "$TMP/layer.tar" "prometheus:v$PROM_VERSION" "$TMP"
	# Upstream's config (its Dockerfile), but for VOLUME, which crane cannot set and pods
	# ignore; the labels say where this one came from.
	"$CRANE" mutate --insecure "$STAGING" \
		--entrypoint=/bin/prometheus \
		--cmd=--config.file=/etc/prometheus/prometheus.yml,--storage.tsdb.path=/prometheus \
		--user=nobody --workdir=/prometheus --exposed-ports=9090/tcp \
		--env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		--label=org.opencontainers.image.title=Prometheus \
		--label=org.opencontainers.image.version="$PROM_VERSION" \
		--label=org.opencontainers.image.source=https://github.com/prometheus/prometheus \
		--label=org.opencontainers.image.licenses="Apache-2.0" \
		--label=org.opencontainers.image.description="Prometheus $PROM_VERSION built by wsload's scripts/k8s/prometheus.sh from $PROM_MODULE $PROM_MODULE_VERSION (no web UI assets)" \
		--set-platform "$IMAGE_PLATFORM" --tag "$PROM_TAG" --output "$TMP/image.tar" \
		>>"$TMP/crane.log" 2>&1 || die "crane mutate failed: $(cat "$TMP/crane.log")"
	kill "$REGISTRY_PID" 2>/dev/null || true
	wait "$REGISTRY_PID" 2>/dev/null || true
	REGISTRY_PID=""
	rm -f "$OUT_DIR/image.inputs"
	mv -f "$TMP/image.tar" "$OUT_DIR/image.tar"
	image_fingerprint >"$OUT_DIR/image.inputs"
	rm -rf "$TMP"
	TMP=""
	log "built $PROM_TAG in $((SECONDS - started))s: $OUT_DIR/image.tar ($(du -h "$OUT_DIR/image.tar" | cut -f1))"
}

cached_image() {
	[[ "${WSLOAD_PROMETHEUS_REBUILD:-0}" != 1 && -f "$OUT_DIR/image.tar" && -f "$OUT_DIR/image.inputs" &&
		"$(cat "$OUT_DIR/image.inputs")" == "$(image_fingerprint)" ]]
}

main() {
	local what=image no_build=0 arg path
	for arg in "$@"; do
		case "$arg" in
		--no-build) no_build=1 ;;
		image | prometheus | promtool) what="$arg" ;;
		*) usage ;; # -h and --help too
		esac
	done
	path="$OUT_DIR/$what"
	[[ "$what" != image ]] || path="$OUT_DIR/image.tar"

	if ((no_build)); then
		if cached_binaries && { [[ "$what" != image ]] || cached_image; }; then
			emit "$path"
			exit 0
		fi
		log "$what $PROM_VERSION is not cached in $OUT_DIR; build it with scripts/k8s/prometheus.sh $what (~3 min cold)"
		exit 3
	fi

	mkdir -p "$OUT_DIR"
	# Two concurrent runs on a cold cache would both spend the build; the second waits and
	# then finds the binaries.
	exec {lock_fd}>"$OUT_DIR/.build.lock"
	if ! flock -n "$lock_fd"; then
		log "another build of Prometheus $PROM_VERSION is running; waiting for it"
		flock "$lock_fd"
	fi
	if cached_binaries; then
		log "prometheus, promtool $PROM_VERSION: cached ($OUT_DIR)"
	else
		build_binaries
	fi
	if [[ "$what" == image ]]; then
		if cached_image; then
			log "$PROM_TAG: cached ($path)"
		else
			build_image
		fi
	fi
	emit "$path"
}

main "$@"
