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
# Cached: the image is tagged with a hash of every input (versions, these files, the binaries),
# and saved under $WSLOAD_CACHE/kind-node/KEY/node.tar; a rerun finds it in the daemon (or
# loads the tarball) and costs the hashing, a few seconds. Measured on 2 busy cores with the
# Kubernetes binaries cached: cold ~4 min (two mmdebstrap runs, docker builds, the save).
#
# Needs root (mmdebstrap, dockerd), Go (build.sh, tools.sh), Debian's apt.
# Environment: WSLOAD_CACHE (default ~/.cache/wsload), WSLOAD_BUILD_NICE (default 19).
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
NICE=(nice -n "${WSLOAD_BUILD_NICE:-19}")

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

key="$({
	printf '%s %s %s %s\n' "$K8S_VERSION" "$SUITE" "$NODE_PACKAGES" "$BASE_PACKAGES"
	printf '%s\n' "${WANT[@]}"
	cat "${BASH_SOURCE[0]}" "$K8S_DIR/runc-wrap"
	(cd "$NODE_DIR" && find . -type f | LC_ALL=C sort | xargs sha256sum)
	sha256sum "$B"/kube-apiserver "$B"/kube-controller-manager "$B"/kube-scheduler "$B"/kube-proxy \
		"$B"/kubelet "$B"/kubeadm "$B"/kubectl "$PAUSE_TAR" "$COREDNS" "$ETCD" | cut -d' ' -f1
} | sha256sum | cut -c1-16)"
REF="$REPO:$K8S_VERSION-$key"
OUT_DIR="$WSLOAD_CACHE/kind-node/$key"

if docker image inspect "$REF" >/dev/null 2>&1; then
	log "$REF: cached in the Docker daemon ($((SECONDS - started))s)"
	emit "$REF"
	exit 0
fi
if [[ -f "$OUT_DIR/node.tar" ]]; then
	docker load -i "$OUT_DIR/node.tar" >&2 || die "docker load -i $OUT_DIR/node.tar failed"
	log "$REF: loaded from $OUT_DIR/node.tar in $((SECONDS - started))s"
	emit "$REF"
	exit 0
fi

log "building $REF (kubeadm asks for: ${WANT[*]})"
mkdir -p "$OUT_DIR"
WORK="$(mktemp -d "$OUT_DIR/.build.XXXXXX")"
at_exit 'rm -rf "$WORK"'
trap 'exit 130' INT
trap 'exit 143' TERM

# rootfs NAME PACKAGES: a Debian minbase tarball with PACKAGES, imported as the docker image
# wsload.local/kind-build-NAME:KEY (removed again at exit).
rootfs() {
	local name="$1" packages="$2" t=$SECONDS
	# --skip=output/dev: docker import refuses device nodes it cannot create; the runtime makes
	# /dev anyway.
	"${NICE[@]}" mmdebstrap --quiet --variant=minbase --include="$packages" \
		--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' --skip=output/dev \
		"$SUITE" "$WORK/$name.tar" >&2 || die "mmdebstrap $name failed (above)"
	docker import "$WORK/$name.tar" "wsload.local/kind-build-$name:$key" >/dev/null ||
		die "docker import of the $name root filesystem failed"
	at_exit "docker rmi -f wsload.local/kind-build-$name:$key >/dev/null 2>&1 || true"
	rm -f "$WORK/$name.tar"
	log "$name root filesystem ($packages) in $((SECONDS - t))s"
}

# build_image REF CONTEXT: docker build of CONTEXT/Dockerfile, tagged REF.
build_image() {
	docker build --quiet --tag "$1" "$2" >/dev/null || die "docker build of $1 failed"
	at_exit "docker rmi -f $1 >/dev/null 2>&1 || true"
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
	cat >"$ctx/Dockerfile" <<EOF
FROM scratch
COPY $name $path
ENV PATH=/usr/local/bin:/usr/bin:/bin
ENTRYPOINT ["$path"]
EOF
	build_image "$ref" "$ctx"
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
	build_image "$ref" "$ctx"
}

step_images() {
	local t=$SECONDS base="wsload.local/kind-build-base:$key" refs=()
	rootfs base "$BASE_PACKAGES"
	scratch_image "$(image_named kube-apiserver)" "$B/kube-apiserver"
	scratch_image "$(image_named kube-controller-manager)" "$B/kube-controller-manager"
	scratch_image "$(image_named kube-scheduler)" "$B/kube-scheduler"
	base_image "$(image_named kube-proxy)" "$base" "$B/kube-proxy"
	scratch_image "$(image_named etcd)" "$ETCD"
	# Where upstream's image has it: the Deployment kubeadm writes gives only arguments.
	scratch_image "$(image_named coredns)" "$COREDNS" /coredns
	base_image wsload.local/wsload-cni:v1 "$base" "$B/kubectl" "$NODE_DIR/images/wsload-cni"
	refs=("$(image_named kube-apiserver)" "$(image_named kube-controller-manager)"
		"$(image_named kube-scheduler)" "$(image_named kube-proxy)" "$(image_named etcd)"
		"$(image_named coredns)" wsload.local/wsload-cni:v1)
	mkdir -p "$WORK/node/kind/images"
	# One archive: the Debian base layer of kube-proxy, etcd and wsload-cni is stored once.
	docker save -o "$WORK/node/kind/images/images.tar" "${refs[@]}" || die "docker save of the node's images failed"
	cp "$PAUSE_TAR" "$WORK/node/kind/images/pause.tar"
	log "the node's images (${refs[*]} $(image_named pause)) in $((SECONDS - t))s"
}

step_node() {
	local t=$SECONDS ctx="$WORK/node"
	rootfs node "$NODE_PACKAGES"
	cp -a "$NODE_DIR/rootfs/." "$ctx/"
	install -m 0755 "$K8S_DIR/runc-wrap" "$ctx/usr/local/bin/runc-wrap"
	mkdir -p "$ctx/usr/bin"
	cp "$B/kubelet" "$B/kubeadm" "$B/kubectl" "$ctx/usr/bin/"
	printf '%s\n' "$K8S_VERSION" >"$ctx/kind/version"
	mkdir -p "$ctx/etc/systemd/system/multi-user.target.wants"
	ln -sf /etc/systemd/system/kubelet.service "$ctx/etc/systemd/system/multi-user.target.wants/kubelet.service"
	ln -sf /etc/systemd/system/wsload-images.service "$ctx/etc/systemd/system/multi-user.target.wants/wsload-images.service"
	(cd "$ctx" && tar --create --file ../node-files.tar --owner=0 --group=0 --numeric-owner .)
	cat >"$WORK/Dockerfile.node" <<EOF
FROM wsload.local/kind-build-node:$key
ADD node-files.tar /
ENV container=docker
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# systemd stops cleanly on SIGRTMIN+3 (docker stop).
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/wsload-node-entrypoint"]
CMD ["/sbin/init"]
EOF
	docker build --quiet --tag "$REF" -f "$WORK/Dockerfile.node" "$WORK" >/dev/null || die "docker build of $REF failed"
	log "node image in $((SECONDS - t))s"
}

step_images
step_node
docker save -o "$WORK/node.tar" "$REF" || die "docker save $REF failed"
mv -f "$WORK/node.tar" "$OUT_DIR/node.tar"
log "built $REF in $((SECONDS - started))s ($(du -h "$OUT_DIR/node.tar" | cut -f1), $OUT_DIR/node.tar)"
emit "$REF"
