#!/usr/bin/env bash
# Build a kind node image for Kubernetes $K8S_VERSION (versions.sh) with no container registry,
# into the local Docker daemon, and print its reference on stdout (progress on stderr).
#
# usage: scripts/k8s/kind-image.sh     e.g. WSLOAD_KIND_IMAGE="$(scripts/k8s/kind-image.sh)"
#
# What the image holds, all built on this machine:
#   - a Debian root filesystem (mmdebstrap) with systemd, containerd, runc, the CNI plugins and
#     iptables; our entrypoint and units (kind-node/rootfs): containerd behind runc-wrap with
#     restrict_oom_score_adj, the kubelet on cgroup v1 with the cgroupfs driver, limits that fit
#     a machine without CAP_SYS_RESOURCE
#   - kubelet, kubeadm, kubectl (build.sh, from the Go module proxy)
#   - the images kubeadm asks for (`kubeadm config images list`), under the names it asks for,
#     imported into each node's containerd at boot (wsload-images.service): the control plane
#     binaries in scratch images, kube-proxy on a Debian base (iptables), etcd (built from the
#     Go module proxy, etcd/go.mod: Debian's 3.4 has no /livez, /readyz, which kubeadm's probes
#     ask for), CoreDNS (scripts/tools.sh coredns), pause (pause.sh)
#   - kind's default CNI manifest: wsload-cni (kind-node/images/wsload-cni), a bridge per node
#     and a route to every other node's pods
#
# Cached: the image is tagged with a hash of every input (versions, these files, the binaries);
# a rerun finds it in the Docker daemon and costs the hashing, a few seconds. Its pieces are
# cached under $WSLOAD_CACHE/kind-node, each keyed by its own inputs: the two Debian root
# filesystems (rootfs-*.tar) and the images the node imports (images-KEY/), so an edit of the
# node's files or a wiped Docker daemon costs a docker build, not mmdebstrap.
# Measured on 2 cores shared with other builds (load ~8): cold ~25 min, almost all of it the two
# mmdebstrap runs (node 17 min, base 7 min; 4 min for the node with the machine less busy);
# with the root filesystems cached 87 s (images 30 s, node 48 s); cached 6 s. ~1.2 GB in Docker.
#
# Needs root (mmdebstrap, dockerd), Go (build.sh, tools.sh), Debian's apt.
# Environment: WSLOAD_CACHE (default ~/.cache/wsload), WSLOAD_BUILD_NICE (default 5).
set -euo pipefail

K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/k8s/versions.sh
source "$K8S_DIR/versions.sh"
# shellcheck source=scripts/lib/images.sh
source "$K8S_DIR/../lib/images.sh"
LOG_NAME=k8s/kind-image
stdout_is_data

NODE_DIR="$K8S_DIR/kind-node"
REPO=wsload.local/kind-node
SUITE=bookworm
# The node: systemd as PID 1 and what the kubelet, kubeadm and kube-proxy's host side call.
NODE_PACKAGES=systemd,systemd-sysv,dbus,containerd,runc,containernetworking-plugins,iptables,iproute2,procps,jq,ca-certificates,conntrack,ethtool,socat,util-linux,mount,kmod,libseccomp2
# The base of the images that need more than one static binary: kube-proxy (iptables) and
# wsload-cni (ip, kubectl).
BASE_PACKAGES=iptables,iproute2,conntrack,ca-certificates
# 5, not 19 as for the Go builds: at 19, mmdebstrap's unpacking starved for 15 min behind cargo builds.
NICE=(nice -n "${WSLOAD_BUILD_NICE:-5}")

started=$SECONDS
[[ $EUID -eq 0 ]] || die "needs root (mmdebstrap, dockerd)"
need_packages mmdebstrap docker.io jq
"$K8S_DIR/dockerd.sh" up
"$K8S_DIR/build.sh" kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubeadm kubectl
PAUSE_TAR="$("$K8S_DIR/pause.sh")"
COREDNS="$("$K8S_DIR/../tools.sh" coredns)"
B="$K8S_BIN_DIR"
ETCD_DIR="$K8S_DIR/etcd"
ETCD_VERSION="$(awk '$1 == "require" && $2 == "go.etcd.io/etcd/server/v3" {print $3}' "$ETCD_DIR/go.mod")"
ETCD="$WSLOAD_CACHE/k8s/etcd-$ETCD_VERSION/etcd"

# The names and tags kubeadm will ask containerd for.
mapfile -t WANT < <("$B/kubeadm" config images list --kubernetes-version "$K8S_VERSION" 2>/dev/null)
image_named() { # NAME-PREFIX: the reference kubeadm asks for whose repository ends with it
	local ref
	for ref in "${WANT[@]}"; do
		[[ "${ref%:*}" == */"$1" ]] && {
			printf '%s\n' "$ref"
			return
		}
	done
	die "kubeadm config images list names no image */$1: ${WANT[*]}"
}

# build_etcd: etcd $ETCD_VERSION into the cache (~3 min cold), unless it is there.
build_etcd() {
	local t=$SECONDS
	[[ -x "$ETCD" ]] && return
	log "etcd $ETCD_VERSION: building"
	mkdir -p "${ETCD%/*}"
	(cd "$ETCD_DIR" && GOTOOLCHAIN=local CGO_ENABLED=0 "${NICE[@]}" go build -mod=readonly -buildvcs=false \
		-trimpath -ldflags='-s -w' -o "$ETCD.tmp" go.etcd.io/etcd/server/v3) || die "building etcd failed (above)"
	mv -f "$ETCD.tmp" "$ETCD"
	log "etcd $ETCD_VERSION: built in $((SECONDS - t))s -> $ETCD"
}
etcd_ref="$(image_named etcd)"
[[ "${etcd_ref##*:}" == "${ETCD_VERSION#v}-"* ]] ||
	die "kubeadm asks for $etcd_ref, scripts/k8s/etcd/go.mod builds etcd $ETCD_VERSION: make them agree"
build_etcd

# Each piece is cached on its own, keyed by what makes it, so that an edit of the node's files
# costs the last docker build, not the Debian root filesystems (minutes each).
hash_of() { sha256sum | cut -c1-16; }
CACHE="$WSLOAD_CACHE/kind-node"
MMDEBSTRAP_OPTS=(--variant=minbase --dpkgopt='path-exclude=/usr/share/doc/*'
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*'
	--dpkgopt=force-unsafe-io --skip=output/dev)
images_key="$({
	printf '%s %s %s\n' "$SUITE" "$BASE_PACKAGES" "${MMDEBSTRAP_OPTS[*]}"
	printf '%s\n' "${WANT[@]}"
	sed -n '/^[a-z_]*_image() {/,/^}/p; /^kind_build() {/,/^}/p; /^step_images() {/,/^}/p' "${BASH_SOURCE[0]}"
	sha256sum "$NODE_DIR/images/wsload-cni" "$B"/kube-apiserver "$B"/kube-controller-manager \
		"$B"/kube-scheduler "$B"/kube-proxy "$B"/kubectl "$PAUSE_TAR" "$COREDNS" "$ETCD" | cut -d' ' -f1
} | hash_of)"
IMAGES_DIR="$CACHE/images-$images_key"
key="$({
	printf '%s %s %s %s\n' "$K8S_VERSION" "$images_key" "$NODE_PACKAGES" "${MMDEBSTRAP_OPTS[*]}"
	sed -n '/^step_node() {/,/^}/p' "${BASH_SOURCE[0]}"
	cat "$K8S_DIR/runc-wrap"
	(cd "$NODE_DIR/rootfs" && find . -type f | LC_ALL=C sort | xargs sha256sum)
	sha256sum "$B"/kubelet "$B"/kubeadm "$B"/kubectl | cut -d' ' -f1
} | hash_of)"
REF="$REPO:$K8S_VERSION-$key"

if docker image inspect "$REF" >/dev/null 2>&1; then
	log "$REF: cached in the Docker daemon ($((SECONDS - started))s)"
	emit "$REF"
	exit 0
fi

log "building $REF (kubeadm asks for: ${WANT[*]})"
mkdir -p "$CACHE"
WORK="$(mktemp -d "$CACHE/.build.XXXXXX")"
at_exit 'rm -rf "$WORK"'
trap 'exit 130' INT
trap 'exit 143' TERM

# rootfs NAME PACKAGES: a Debian minbase of PACKAGES as the docker image
# wsload.local/kind-build-NAME:HASH (sets ROOTFS_IMAGE), its tarball cached.
rootfs() {
	local name="$1" packages="$2" t=$SECONDS hash tar
	hash="$(printf '%s %s %s\n' "$SUITE" "$packages" "${MMDEBSTRAP_OPTS[*]}" | hash_of)"
	ROOTFS_IMAGE="wsload.local/kind-build-$name:$hash"
	docker image inspect "$ROOTFS_IMAGE" >/dev/null 2>&1 && return
	tar="$CACHE/rootfs-$name-$hash.tar"
	if [[ ! -f "$tar" ]]; then
		# --skip=output/dev: docker import refuses device nodes; the runtime makes /dev anyway.
		# force-unsafe-io: no fsync per file, a throwaway tree (minutes saved on a busy disk).
		"${NICE[@]}" mmdebstrap --quiet "${MMDEBSTRAP_OPTS[@]}" --include="$packages" \
			"$SUITE" "$WORK/$name.tar" >&2 || die "mmdebstrap $name failed (above)"
		mv -f "$WORK/$name.tar" "$tar"
		log "$name root filesystem ($packages) in $((SECONDS - t))s"
	fi
	docker import "$tar" "$ROOTFS_IMAGE" >/dev/null || die "docker import of $tar failed"
}

# kind_build REF CONTEXT: docker build of CONTEXT/Dockerfile, tagged REF. The legacy builder
# (Debian's docker.io has no buildx): its deprecation notice is dropped.
kind_build() {
	docker build --quiet --tag "$1" "$2" 2>&1 >/dev/null | grep -v -e DEPRECATED \
		-e 'legacy builder' -e buildx -e '^ *$' >&2 || true
	docker image inspect "$1" >/dev/null 2>&1 || die "docker build of $1 failed (above)"
}

# scratch_image REF BINARY [PATH]: BINARY as PATH (default /usr/local/bin/NAME) in an empty
# image, its entrypoint.
scratch_image() {
	local ref="$1" bin="$2" ctx name
	name="$(basename "$bin")"
	local path="${3:-/usr/local/bin/$name}"
	ctx="$WORK/ctx-$name"
	mkdir -p "$ctx"
	cp "$bin" "$ctx/"
	printf 'FROM scratch\nCOPY %s %s\nENV PATH=/usr/local/bin:/usr/bin:/bin\nENTRYPOINT ["%s"]\n' \
		"$name" "$path" "$path" >"$ctx/Dockerfile"
	kind_build "$ref" "$ctx"
}

# base_image REF BASE FILE...: FILEs (binaries, scripts) in /usr/local/bin on BASE.
base_image() {
	local ref="$1" base="$2" ctx f
	shift 2
	ctx="$WORK/ctx-${ref//[\/:]/-}"
	mkdir -p "$ctx"
	{
		echo "FROM $base"
		echo "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
		for f; do
			cp "$f" "$ctx/"
			echo "COPY $(basename "$f") /usr/local/bin/$(basename "$f")"
		done
	} >"$ctx/Dockerfile"
	kind_build "$ref" "$ctx"
}

# step_images: the archives the node imports at boot, in IMAGES_DIR (images.tar, pause.tar).
step_images() {
	local t=$SECONDS refs=()
	[[ -f "$IMAGES_DIR/images.tar" ]] && return
	rootfs base "$BASE_PACKAGES"
	scratch_image "$(image_named kube-apiserver)" "$B/kube-apiserver"
	scratch_image "$(image_named kube-controller-manager)" "$B/kube-controller-manager"
	scratch_image "$(image_named kube-scheduler)" "$B/kube-scheduler"
	base_image "$(image_named kube-proxy)" "$ROOTFS_IMAGE" "$B/kube-proxy"
	scratch_image "$(image_named etcd)" "$ETCD"
	# Where upstream's image has it: the Deployment kubeadm writes gives only arguments.
	scratch_image "$(image_named coredns)" "$COREDNS" /coredns
	base_image wsload.local/wsload-cni:v1 "$ROOTFS_IMAGE" "$B/kubectl" "$NODE_DIR/images/wsload-cni"
	refs=("$(image_named kube-apiserver)" "$(image_named kube-controller-manager)"
		"$(image_named kube-scheduler)" "$(image_named kube-proxy)" "$(image_named etcd)"
		"$(image_named coredns)" wsload.local/wsload-cni:v1)
	mkdir -p "$WORK/images"
	# One archive: the Debian base layer of kube-proxy and wsload-cni is stored once.
	docker save -o "$WORK/images/images.tar" "${refs[@]}" || die "docker save of the node's images failed"
	cp "$PAUSE_TAR" "$WORK/images/pause.tar"
	docker rmi "${refs[@]}" >/dev/null || true
	rm -rf "$IMAGES_DIR"
	mv "$WORK/images" "$IMAGES_DIR"
	log "the node's images (${refs[*]} $(image_named pause)) in $((SECONDS - t))s: $IMAGES_DIR"
}

# step_node: the node image REF, on the node's root filesystem.
step_node() {
	local t=$SECONDS ctx="$WORK/node" timers=etc/systemd/system/timers.target.wants
	rootfs node "$NODE_PACKAGES"
	mkdir -p "$ctx/files/kind/images" "$ctx/files/usr/bin" "$ctx/files/$timers"
	cp -a "$NODE_DIR/rootfs/." "$ctx/files/"
	install -m 0755 "$K8S_DIR/runc-wrap" "$ctx/files/usr/local/bin/runc-wrap"
	cp "$B/kubelet" "$B/kubeadm" "$B/kubectl" "$ctx/files/usr/bin/"
	cp "$IMAGES_DIR"/*.tar "$ctx/files/kind/images/"
	printf '%s\n' "$K8S_VERSION" >"$ctx/files/kind/version"
	ln -sf /etc/systemd/system/wsload-images.timer "$ctx/files/$timers/"
	tar --create --file "$ctx/files.tar" --directory "$ctx/files" --owner=0 --group=0 --numeric-owner .
	rm -rf "$ctx/files"
	# STOPSIGNAL: systemd stops cleanly on SIGRTMIN+3 (docker stop, kind delete).
	printf '%s\n' "FROM $ROOTFS_IMAGE" "ADD files.tar /" "ENV container=docker" \
		"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
		"STOPSIGNAL SIGRTMIN+3" 'ENTRYPOINT ["/usr/local/bin/wsload-node-entrypoint"]' \
		'CMD ["/sbin/init"]' >"$ctx/Dockerfile"
	kind_build "$REF" "$ctx"
	log "node image in $((SECONDS - t))s"
}

step_images
step_node
log "built $REF in $((SECONDS - started))s ($(docker image inspect -f '{{.Size}}' "$REF" | awk '{printf "%d MB", $1 / 1e6}'))"
emit "$REF"
