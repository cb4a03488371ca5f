#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine: control-plane.sh's
# etcd + kube-apiserver, plus kube-controller-manager, kube-scheduler,
# kube-proxy, containerd (runc behind runc-wrap), a CNI bridge and a kubelet.
# Pods run as containers from image tarballs imported into containerd (no
# registry is reachable here); see README.md for what runs and why.
#
# usage: scripts/k8s/cluster.sh up DIR               start; prints `export KUBECONFIG=DIR/kubeconfig`
#        scripts/k8s/cluster.sh down DIR             stop everything `up DIR` started, unmount,
#                                                    delete the pod network (idempotent)
#        scripts/k8s/cluster.sh load DIR TARBALL...  import image tarballs into the node
#        scripts/k8s/cluster.sh env DIR              print `export KUBECONFIG=DIR/kubeconfig`
#        scripts/k8s/cluster.sh netpol DIR           make the running node enforce NetworkPolicy:
#                                                    kube-router's policy controller alone (tests
#                                                    only; `down` stops it and removes its rules)
#
# One node cluster per machine: the bridge cni0 (10.244.0.1/24), the kubelet's
# and kube-proxy's ports, the kubepods cgroups and iptables are host-wide. A
# second `up` in another DIR refuses and names the one running. Control-plane-
# only clusters (control-plane.sh, the operator tests) run beside it.
#
# DIR keeps logs (*.log), pki/, etcd/ and kubeconfig after `down` (as
# control-plane.sh does); the node's runtime state (containerd's images and
# containers, the kubelet's root dir, pod logs) is deleted, so `load` again after
# a new `up`.
#
# Environment:
#   WSLOAD_CACHE               binary and image cache root (default ~/.cache/wsload)
#   WSLOAD_NODE_NAME           the node's name (default wsload-node)
#   WSLOAD_NODE_LABELS         labels the node gets, comma separated (default
#                              wsload.dev/server-pool=true,wsload.dev/loadgen-pool=true:
#                              one node serves as both pools)
#   WSLOAD_K8S_START_TIMEOUT   seconds to wait for each daemon (default 120)
set -euo pipefail

K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOG_NAME=k8s/cluster
# shellcheck source=scripts/lib/common.sh
source "$K8S_DIR/../lib/common.sh"
# Process helpers (spawn, stop, running_pid, wait_daemon, log_tail) and the
# version and cache paths; sourcing runs no command.
# shellcheck source=scripts/k8s/control-plane.sh
source "$K8S_DIR/control-plane.sh"

NODE_NAME="${WSLOAD_NODE_NAME:-wsload-node}"
NODE_LABELS="${WSLOAD_NODE_LABELS:-wsload.dev/server-pool=true,wsload.dev/loadgen-pool=true}"
BRIDGE=cni0
NODE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
CNI_NETWORK=wsload
# Who owns the host-wide pieces: the DIR of the node cluster that runs.
OWNER_FILE=/run/wsload-k8s-node.owner
# Ports the node daemons bind, fixed (hence one node cluster per machine):
# kubelet 10250 and healthz 10248, kube-proxy metrics 10249 and healthz 10256,
# controller manager 10257, scheduler 10259.
NODE_PORTS=(10248 10249 10250 10256 10257 10259)
NODE_DAEMONS=(kubelet kube-proxy kube-scheduler kube-controller-manager containerd)
# What kube-router's policy controller (`netpol`) adds to the host: filter chains and ipsets
# under these prefixes (its pkg/controllers/netpol), none of which anything else here makes.
KUBE_ROUTER_CHAINS='KUBE-ROUTER-|KUBE-POD-FW-|KUBE-NWPLCY-'
KUBE_ROUTER_IPSETS='KUBE-SRC-|KUBE-DST-'

ctr_() { ctr --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"; }

set_paths() {
	CONTAINERD_SOCK="$DIR/containerd/containerd.sock"
	NODE_DIR="$DIR/node"
	# For kubectl (common.sh's: the pinned one, K8S_BIN_DIR).
	export KUBECONFIG="$DIR/kubeconfig" KUBECACHEDIR="$DIR/kube-cache"
}

# --- checks ------------------------------------------------------------------

preflight() {
	local owner p used free_mib
	[[ $EUID -eq 0 ]] || die "a node needs root (containerd, the kubelet, network namespaces)"
	# containerd also listens on SOCK.ttrpc; unix socket paths end at 107 bytes.
	((${#CONTAINERD_SOCK} + 6 <= 107)) ||
		die "$DIR is too long for containerd's socket path ($CONTAINERD_SOCK.ttrpc > 107 bytes); use a shorter DIR"
	if [[ -f "$OWNER_FILE" ]]; then
		owner="$(<"$OWNER_FILE")"
		if [[ "$owner" != "$DIR" ]] && [[ -d "$owner" ]] && (DIR="$owner" running_pid kubelet >/dev/null ||
			DIR="$owner" running_pid containerd >/dev/null); then
			die "a node cluster already runs in $owner (one per machine); run \`$0 down $owner\` first"
		fi
	fi
	used="$(awk 'FNR > 1 && $4 == "0A" {print $2}' /proc/net/tcp /proc/net/tcp6 2>/dev/null || true)"
	for p in "${NODE_PORTS[@]}"; do
		if grep -q ":$(printf '%04X' "$p")\$" <<<"$used"; then
			die "port $p is in use (a kubelet, kube-proxy or controller of another cluster?); \`ss -ltnp | grep :$p\` names it"
		fi
	done
	# Under 256 MiB free the kubelet evicts every pod (evictionHard below); say so before a test
	# meets it as a pod that vanished.
	free_mib="$(df -Pm "$DIR" | awk 'NR == 2 {print $4}')"
	if [[ "$free_mib" =~ ^[0-9]+$ ]] && ((free_mib < 2048)); then
		log "warning: ${free_mib} MiB free on the disk of $DIR; under 256 MiB the kubelet evicts pods (free space: \`df -h $DIR\`)"
	fi
}

ensure_node_binaries() {
	local t=$SECONDS
	"$K8S_DIR/install-deps.sh" --node
	"$K8S_DIR/build.sh" kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet kube-proxy
	PAUSE_TAR="$("$K8S_DIR/pause.sh")"
	log "packages, binaries and pause image ready in $((SECONDS - t))s"
}

# --- network -----------------------------------------------------------------

setup_network() {
	if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
		ip link add "$BRIDGE" type bridge || die "cannot create bridge $BRIDGE"
	fi
	if ! ip -4 addr show dev "$BRIDGE" | grep -qF "inet $NODE_IP/24"; then
		ip addr add "$NODE_IP/24" dev "$BRIDGE" || die "cannot give $BRIDGE the address $NODE_IP/24"
	fi
	ip link set "$BRIDGE" up
	# Pod-to-Service traffic between pods of the same bridge must cross
	# iptables to be un-DNATed on the way back; forwarding for pod traffic.
	[[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]] || modprobe br_netfilter 2>/dev/null || true
	if [[ -w /proc/sys/net/bridge/bridge-nf-call-iptables ]]; then
		echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables
	else
		log "warning: no /proc/sys/net/bridge/bridge-nf-call-iptables; pod to ClusterIP traffic on the bridge may fail"
	fi
	echo 1 >/proc/sys/net/ipv4/ip_forward
	mkdir -p "$DIR/cni/net.d" "$DIR/cni/ipam"
	# ipMasq false: pod traffic stays on this machine. The address pool's
	# state lives in DIR, so `down` forgets every lease.
	cat >"$DIR/cni/net.d/10-wsload.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    { "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": { "type": "host-local", "dataDir": "$DIR/cni/ipam",
                "ranges": [[{ "subnet": "$POD_CIDR", "gateway": "$NODE_IP" }]], "routes": [{ "dst": "0.0.0.0/0" }] } },
    { "type": "portmap", "capabilities": { "portMappings": true } },
    { "type": "loopback" }
  ]
}
EOF
}

# --- PKI and kubeconfigs -----------------------------------------------------

# The API server's serving certificate must name NODE_IP: pods reach it there
# through the `kubernetes` Service. A DIR whose PKI predates node mode lacks it.
check_apiserver_san() {
	openssl x509 -in "$DIR/pki/apiserver.crt" -noout -ext subjectAltName 2>/dev/null | grep -qF "IP Address:$NODE_IP" ||
		die "$DIR/pki/apiserver.crt has no SAN $NODE_IP (made by control-plane.sh without node mode); use a new DIR or delete $DIR/pki"
}

make_node_pki() {
	local pki="$DIR/pki"
	[[ -f "$pki/kubelet.crt" && -f "$pki/kubelet.key" ]] && return
	(
		umask 077
		cd "$pki"
		# The Node authorizer knows a kubelet by this name and group.
		export WSLOAD_APISERVER_SANS="DNS:$NODE_NAME"
		openssl req -new -nodes -newkey rsa:2048 -keyout kubelet.key \
			-subj "/O=system:nodes/CN=system:node:$NODE_NAME" -config "$K8S_DIR/openssl.cnf" 2>/dev/null |
			openssl x509 -req -sha256 -days 365 -CA ca.crt -CAkey ca.key \
				-set_serial "0x$(openssl rand -hex 16)" \
				-extfile "$K8S_DIR/openssl.cnf" -extensions v3_cli -out kubelet.crt 2>/dev/null
		chmod 0644 kubelet.crt
	) || die "openssl failed making the kubelet's certificate in $pki"
}

write_kubelet_kubeconfig() {
	local url
	url="$(sed -n 's/^APISERVER_URL=//p' "$DIR/cluster.env")"
	cat >"$NODE_DIR/kubelet.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: wsload
  cluster:
    server: $url
    certificate-authority: $DIR/pki/ca.crt
users:
- name: kubelet
  user:
    client-certificate: $DIR/pki/kubelet.crt
    client-key: $DIR/pki/kubelet.key
contexts:
- name: wsload
  context: {cluster: wsload, user: kubelet}
current-context: wsload
EOF
	chmod 0600 "$NODE_DIR/kubelet.kubeconfig"
}

# --- daemons -----------------------------------------------------------------

# wait_started NAME WHAT COMMAND...: until COMMAND succeeds; dies naming NAME's log
# if NAME exits or the timeout passes.
wait_started() {
	local name="$1" what="$2" rc=0
	shift 2
	wait_daemon "$name" "$START_TIMEOUT" "$@" || rc=$?
	((rc == 0)) && return 0
	log_tail "$name" 40
	if ((rc == 2)); then
		die "$name: not $what after ${START_TIMEOUT}s (see $DIR/$name.log)"
	fi
	die "$name exited during start (see $DIR/$name.log)"
}

start_containerd() {
	mkdir -p "$DIR/containerd"
	# Proven on this VM (reference containerd-config.toml): runc through
	# runc-wrap (no CAP_SYS_RESOURCE here), restrict_oom_score_adj, cgroupfs.
	cat >"$DIR/containerd/config.toml" <<EOF
version = 2
root = "$DIR/containerd/root"
state = "$DIR/containerd/state"
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$K8S_DIR/runc-wrap"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$DIR/cni/net.d"
EOF
	spawn containerd containerd --config "$DIR/containerd/config.toml"
	wait_started containerd "serving on $CONTAINERD_SOCK" ctr_ version
}

# import_images TARBALL...: into containerd's k8s.io namespace, where the
# kubelet's CRI looks; unpacked for overlayfs so a pod starts at once.
import_images() {
	local tar out
	for tar in "$@"; do
		[[ -f "$tar" ]] || die "image tarball $tar does not exist"
		out="$(ctr_ images import --all-platforms "$tar" 2>&1)" ||
			die "ctr images import $tar failed: $out"
		log "imported $tar: $(tr '\n' ' ' <<<"$out" | sed 's/  */ /g')"
	done
}

start_control_plane_daemons() {
	local pki="$DIR/pki"
	# Admin credentials (system:masters) for the controllers: a single-user
	# test cluster. --use-service-account-credentials still gives each
	# controller its own identity for what it does. nodeipam is off: the CNI
	# config assigns pod addresses, not node.spec.podCIDR. No leader election:
	# one of each, and electing costs seconds at start.
	spawn kube-controller-manager "$K8S_BIN_DIR/kube-controller-manager" \
		--kubeconfig "$DIR/kubeconfig" --bind-address 127.0.0.1 \
		--controllers '*,-nodeipam' --leader-elect=false \
		--service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
		--cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
		--use-service-account-credentials
	spawn kube-scheduler "$K8S_BIN_DIR/kube-scheduler" \
		--kubeconfig "$DIR/kubeconfig" --bind-address 127.0.0.1 --leader-elect=false
	# ClusterIP Services, the `kubernetes` one above all: in-cluster clients
	# (the operator) reach the API server through 10.96.0.1.
	spawn kube-proxy "$K8S_BIN_DIR/kube-proxy" \
		--kubeconfig "$DIR/kubeconfig" --hostname-override "$NODE_NAME" \
		--proxy-mode iptables --cluster-cidr "$POD_CIDR" --conntrack-max-per-core 0 \
		--metrics-bind-address 127.0.0.1:10249 --healthz-bind-address 127.0.0.1:10256
}

start_kubelet() {
	mkdir -p "$NODE_DIR/manifests" "$NODE_DIR/podlogs" "$NODE_DIR/root"
	# The reference kubelet-config.yaml, proven on this VM: cgroupfs (no
	# systemd), cgroup v1 allowed, image GC that never collects imported
	# images (nothing could pull them back). Disk eviction only when the
	# disk is really full: this node shares its disk with builds, and a
	# percentage of a big disk is gigabytes (1% of 252 GB evicted a CI run's
	# pod while a fresh clone's build was filling the disk).
	cat >"$NODE_DIR/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $DIR/pki/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failCgroupV1: false
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
clusterDomain: cluster.local
clusterDNS: [10.96.0.10]
failSwapOn: false
staticPodPath: $NODE_DIR/manifests
resolvConf: /etc/resolv.conf
healthzBindAddress: 127.0.0.1
evictionHard: {memory.available: "100Mi", nodefs.available: "256Mi", imagefs.available: "256Mi", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
protectKernelDefaults: false
localStorageCapacityIsolation: true
podLogsDir: $NODE_DIR/podlogs
allowedUnsafeSysctls: ["net.*"]
EOF
	write_kubelet_kubeconfig
	spawn kubelet "$K8S_BIN_DIR/kubelet" \
		--config "$NODE_DIR/kubelet-config.yaml" --kubeconfig "$NODE_DIR/kubelet.kubeconfig" \
		--root-dir "$NODE_DIR/root" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" \
		--node-labels "$NODE_LABELS"
}

node_ready() {
	[[ "$(kubectl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

# What a pod of a new namespace needs before it can start: the controllers
# have made default ServiceAccounts and published the cluster CA.
controllers_ready() {
	kubectl -n default get serviceaccount default && kubectl -n default get configmap kube-root-ca.crt
}

# --- NetworkPolicy ---------------------------------------------------------------

# The bridge plugin enforces no NetworkPolicy. kube-router's firewall, without its router and
# service proxy (the bridge and kube-proxy stay in charge), turns each policy into filter rules
# on the pod's address, matching bridged pod-to-pod traffic through br_netfilter
# (setup_network's bridge-nf-call-iptables) and the kubelet's probes as the node's own address.
# It finds the node's pods by the node's InternalIP (the kubelet's --node-ip).
cluster_netpol() {
	local kube_router
	set_paths
	running_pid kubelet >/dev/null || die "no node runs for $DIR; run \`$0 up $DIR\` first"
	! running_pid kube-router >/dev/null || die "kube-router already runs for $DIR"
	[[ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null)" == 1 ]] ||
		die "net.bridge.bridge-nf-call-iptables is not 1: policies would not see pod-to-pod traffic on $BRIDGE"
	# It programs ipsets with Debian's ipset command.
	need_packages ipset
	kube_router="$("$K8S_DIR/../tools.sh" kube-router)" || die "scripts/tools.sh kube-router failed (above)"
	# No health or metrics port: nothing reads them, and they would bind every interface.
	spawn kube-router "$kube_router" --kubeconfig "$DIR/kubeconfig" --hostname-override "$NODE_NAME" \
		--run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false \
		--service-cluster-ip-range "$SERVICE_CIDR" --health-port 0 --metrics-port 0
	# Its first sync hooks its chains into FORWARD; undone at once when it never gets there.
	if ! wait_daemon kube-router "$START_TIMEOUT" kube_router_hooked; then
		log_tail kube-router 40
		stop kube-router
		remove_kube_router_rules
		die "kube-router did not hook its chains into FORWARD (see $DIR/kube-router.log)"
	fi
	log "kube-router's policy controller runs for node $NODE_NAME (log $DIR/kube-router.log)"
}

kube_router_hooked() { iptables -t filter -S FORWARD 2>/dev/null | grep -q -- '-j KUBE-ROUTER-FORWARD'; }

# After kube-router has stopped: its chains (and the jumps to them) out of the filter table,
# then its ipsets, which the kernel frees only once no rule names them. Not its own
# `--cleanup-config`: v2.1.0's panics (a nil pointer in the service proxy's clean-up) and leaves
# both, and would flush every IPVS service of the host first. Any node cluster's: one per machine.
remove_kube_router_rules() {
	local rules set
	if command -v iptables-save >/dev/null; then
		# Into a variable first, as teardown_network does (SIGPIPE under pipefail).
		rules="$(iptables-save -t filter 2>/dev/null)" || rules=""
		if grep -Eq -- "$KUBE_ROUTER_CHAINS" <<<"$rules"; then
			grep -Ev -- "$KUBE_ROUTER_CHAINS" <<<"$rules" | iptables-restore -T filter ||
				log "warning: could not remove kube-router's chains from the filter table"
		fi
	fi
	command -v ipset >/dev/null || return 0
	for set in $(ipset list -n 2>/dev/null | grep -E -- "^($KUBE_ROUTER_IPSETS)" || true); do
		ipset destroy "$set" 2>/dev/null || log "warning: could not destroy ipset $set"
	done
}

# --- teardown ----------------------------------------------------------------

# Mount points under $1, deepest first (mountinfo escapes spaces as \040).
mounts_under() {
	awk -v d="$1/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sed 's/\\040/ /g' | sort -r
}

# Every process in the kubelet's pod cgroups (kubepods under each v1
# controller, or the unified tree).
pod_cgroup_pids() {
	find /sys/fs/cgroup -path '*/kubepods*' -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u
}

teardown_pods() {
	local ids id netns=() ns pids i
	if running_pid containerd >/dev/null; then
		# Network namespaces first, from the sandboxes' specs, while containerd
		# can still say which are ours.
		mapfile -t ids < <(ctr_ containers list -q 2>/dev/null || true)
		for id in "${ids[@]}"; do
			ns="$(ctr_ containers info "$id" 2>/dev/null |
				jq -r '.Spec.linux.namespaces[]? | select(.type == "network") | .path // empty' 2>/dev/null || true)"
			[[ -n "$ns" ]] && netns+=("$ns")
		done
		mapfile -t ids < <(ctr_ tasks list -q 2>/dev/null || true)
		for id in "${ids[@]}"; do
			ctr_ tasks delete --force "$id" >/dev/null 2>&1 || true
		done
	fi
	stop containerd
	# Shims outlive containerd by design; ours name our socket.
	for i in /proc/[0-9]*; do
		if tr '\0' ' ' 2>/dev/null <"$i/cmdline" | grep -qF -- "-address $CONTAINERD_SOCK"; then
			kill -KILL "${i#/proc/}" 2>/dev/null || true
		fi
	done
	# Anything left in the pod cgroups (a container whose shim died first).
	# They are this node's: one node cluster per machine.
	pids="$(pod_cgroup_pids)"
	if [[ -n "$pids" ]]; then
		# shellcheck disable=SC2086 # one pid per word
		kill -KILL $pids 2>/dev/null || true
		sleep 0.5
	fi
	find /sys/fs/cgroup -depth -type d -path '*/kubepods*' -exec rmdir {} + 2>/dev/null || true
	for ns in "${netns[@]}"; do
		umount "$ns" 2>/dev/null || true
		rm -f "$ns"
	done
	# Pod namespaces whose sandbox containerd no longer knew: CNI's names, no process left.
	for ns in /run/netns/cni-*; do
		[[ -e "$ns" ]] || continue
		if [[ -z "$(ip netns pids "${ns##*/}" 2>/dev/null)" ]]; then
			umount "$ns" 2>/dev/null || true
			rm -f "$ns"
		fi
	done
}

teardown_network() {
	local veth
	if ip link show "$BRIDGE" >/dev/null 2>&1; then
		# A veth dies with its pod's namespace; any still on the bridge is stale.
		for veth in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
			ip link delete "$veth" 2>/dev/null || true
		done
		ip link delete "$BRIDGE" 2>/dev/null || log "warning: could not delete bridge $BRIDGE"
	fi
	# The KUBE-* chains of kube-proxy and the kubelet (KUBE-FIREWALL hooks
	# INPUT and OUTPUT), IPv4 and IPv6. `kube-proxy --cleanup` leaves the
	# kubelet's and fails on the missing ipset and nft binaries, so each
	# table is rewritten without them (one node cluster per machine: they
	# are ours).
	# The rules are read into a variable first: `save | grep -q` under pipefail fails whenever
	# grep's early exit makes iptables-save die of SIGPIPE mid-write, and a big nat table then
	# looked clean and kept its chains (seen once in CI).
	local save table rules
	for save in iptables-save ip6tables-save; do
		command -v "$save" >/dev/null || continue
		for table in filter nat mangle; do
			rules="$("$save" -t "$table" 2>/dev/null)" || continue
			if grep -q -- 'KUBE-' <<<"$rules"; then
				grep -v -- 'KUBE-' <<<"$rules" | "${save%-save}-restore" -T "$table" ||
					log "warning: could not remove the KUBE-* chains from $table (${save%-save})"
			fi
		done
	done
}

cluster_down() {
	local name m
	set_paths
	for name in kube-router kubelet kube-proxy kube-scheduler kube-controller-manager; do stop "$name"; done
	remove_kube_router_rules
	teardown_pods
	mounts_under "$DIR" | while IFS= read -r m; do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "warning: could not unmount $m"
	done
	if [[ ! -f "$OWNER_FILE" || "$(<"$OWNER_FILE")" == "$DIR" ]]; then
		teardown_network
		rm -f "$OWNER_FILE"
	fi
	"$K8S_DIR/control-plane.sh" down "$DIR"
	# The kubelet's symlinks to our pod logs.
	find /var/log/containers -maxdepth 1 -type l -lname "$NODE_DIR/*" -delete 2>/dev/null || true
	rm -rf "$DIR/containerd" "$NODE_DIR" "$DIR/cni" "$DIR/kube-cache"
}

# --- up ----------------------------------------------------------------------

on_cluster_up_exit() {
	if ((!UP_DONE)); then
		log "start failed; stopping what started (logs stay in $DIR)"
		cluster_down || true
	fi
}

cluster_up() {
	local started=$SECONDS t name cp_out
	set_paths
	for name in "${NODE_DAEMONS[@]}"; do
		if running_pid "$name" >/dev/null; then
			die "$name already runs for $DIR; run \`$0 down $DIR\` first"
		fi
	done
	preflight
	ensure_node_binaries
	UP_DONE=0
	at_exit on_cluster_up_exit
	trap 'exit 130' INT
	trap 'exit 143' TERM
	printf '%s\n' "$DIR" >"$OWNER_FILE"
	t=$SECONDS
	setup_network
	# Our lock and our caller's stdout closed for it: etcd and the API server
	# would inherit them and hold them for their lifetime; the next `down` would
	# wait forever, and so would our caller's $(...).
	cp_out="$(WSLOAD_K8S_EXTRA_SANS="IP:$NODE_IP${WSLOAD_K8S_EXTRA_SANS:+,$WSLOAD_K8S_EXTRA_SANS}" \
		WSLOAD_K8S_ADVERTISE_ADDRESS="$NODE_IP" WSLOAD_K8S_BIND_ADDRESS=0.0.0.0 \
		"$K8S_DIR/control-plane.sh" up "$DIR" {LOCK_FD}>&- {DATA_FD}>&-)" || die "control-plane.sh up $DIR failed (above; logs $DIR/etcd.log, $DIR/kube-apiserver.log)"
	[[ "$cp_out" == *KUBECONFIG* ]] || die "control-plane.sh up printed no KUBECONFIG: $cp_out"
	check_apiserver_san
	make_node_pki
	log "control plane up in $((SECONDS - t))s"
	t=$SECONDS
	start_containerd
	import_images "$PAUSE_TAR"
	start_control_plane_daemons
	start_kubelet
	wait_started kubelet "Ready (node $NODE_NAME)" node_ready
	for name in kube-controller-manager kube-scheduler kube-proxy; do
		running_pid "$name" >/dev/null || {
			log_tail "$name" 40
			die "$name exited (see $DIR/$name.log)"
		}
	done
	wait_started kube-controller-manager "making default ServiceAccounts" controllers_ready
	log "node $NODE_NAME Ready in $((SECONDS - t))s (labels $NODE_LABELS)"
	UP_DONE=1
	log "up in $((SECONDS - started))s; logs in $DIR/*.log; \`$0 load $DIR TARBALL\` imports images"
	cmd_env
}

cluster_load() {
	set_paths
	running_pid containerd >/dev/null || die "no containerd runs for $DIR; run \`$0 up $DIR\` first"
	import_images "$@"
}

cluster_main() {
	[[ $# -ge 2 && -n "$2" ]] || usage
	local cmd="$1"
	case "$cmd" in
	up) mkdir -p "$2" ;;
	down | env | load | netpol) [[ -d "$2" ]] || {
		[[ "$cmd" == down ]] && exit 0
		die "$2: no such directory"
	} ;;
	*) usage ;;
	esac
	[[ "$cmd" == load ]] || [[ $# -eq 2 ]] || usage
	[[ "$cmd" != load ]] || [[ $# -ge 3 ]] || usage
	DIR="$(cd "$2" && pwd -P)"
	shift 2
	START_TIMEOUT="${WSLOAD_K8S_START_TIMEOUT:-120}"
	# up and env print the export line for the caller's eval, and nothing else: what up
	# installs and builds (apt, go, crane) on a cold machine reports on stderr.
	if [[ "$cmd" == up || "$cmd" == env ]]; then
		stdout_is_data
	fi
	if [[ "$cmd" == env ]]; then
		cmd_env
		return
	fi
	# One up/down/load at a time per DIR. A lock of its own: control-plane.sh,
	# which up and down run, takes DIR/.lock.
	exec {LOCK_FD}>"$DIR/.cluster.lock"
	flock "$LOCK_FD"
	"cluster_$cmd" "$@"
}

cluster_main "$@"
