#!/usr/bin/env bash
# A real Kubernetes control plane (etcd + kube-apiserver) on loopback, for
# operator integration tests: CRDs, CEL validation, the status subresource,
# RBAC and watches behave exactly as in any cluster. No kubelet: pods are
# stored but never run.
#
# usage: scripts/k8s/control-plane.sh up DIR    start; prints `export KUBECONFIG=DIR/kubeconfig`
#        scripts/k8s/control-plane.sh down DIR  stop what `up DIR` started (idempotent)
#        scripts/k8s/control-plane.sh env DIR   print `export KUBECONFIG=DIR/kubeconfig`
#
# Everything lives in DIR: pki/ (made once per DIR, reused by a later `up`),
# etcd/ (the data; also reused, so objects survive down + up), *.log, *.pid,
# kubeconfig (admin, certificates embedded) and cluster.env (the endpoints as
# shell variables). Ports are picked free at run time, so any number of
# clusters can run side by side with different DIRs. ~/.kube/config is never
# read or written.
#
# Environment:
#   WSLOAD_CACHE                 binary cache root (see versions.sh)
#   WSLOAD_K8S_START_TIMEOUT     seconds to wait for /readyz (default 120)
#   WSLOAD_K8S_EXTRA_SANS        more serving-cert SANs, openssl syntax
#                                ("IP:10.244.0.1,DNS:node"); read when pki/ is made
#   WSLOAD_K8S_ADVERTISE_ADDRESS the API server's --advertise-address (default:
#                                its own choice, the host's main address)
#   WSLOAD_K8S_BIND_ADDRESS      the API server's --bind-address (default 127.0.0.1;
#                                cluster.sh sets 0.0.0.0 so pods reach it through
#                                the `kubernetes` Service); clients still use 127.0.0.1
set -euo pipefail

K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/k8s/versions.sh
source "$K8S_DIR/versions.sh"
# Sourced by cluster.sh, its messages keep cluster.sh's name.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then LOG_NAME=k8s/control-plane; fi
# shellcheck source=scripts/lib/common.sh
source "$K8S_DIR/../lib/common.sh"

SERVICE_CIDR=10.96.0.0/16
# The first address of SERVICE_CIDR: the `kubernetes` Service, which in-cluster
# clients reach the API server through, so it must be in the serving cert.
SERVICE_API_IP=10.96.0.1
SA_ISSUER=https://kubernetes.default.svc.cluster.local
START_TIMEOUT="${WSLOAD_K8S_START_TIMEOUT:-120}"
# How often a start is retried with new ports when one was taken between our
# pick and the daemon's bind (another cluster starting at the same moment).
PORT_ATTEMPTS=5

# --- processes ---------------------------------------------------------------

# The pid in DIR/NAME.pid if that process is alive and is the one we started:
# its command line names DIR, so a pid reused by an unrelated process after a
# reboot or crash is never signalled. Zombies count as gone.
running_pid() {
	local name="$1" pid stat
	[[ -f "$DIR/$name.pid" ]] || return 1
	pid="$(<"$DIR/$name.pid")"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || return 1
	# The state follows the command name, which is in parentheses; the parent pid follows it.
	stat="${stat##*) }"
	[[ "${stat%% *}" != Z ]] || return 1
	if ! tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$DIR/"; then
		# Just spawned, the child may not have exec'd yet and still carries this script's
		# command line: on a loaded machine that window made a starting daemon look dead
		# ("exited during start" with an empty log). Our own child is ours all the same.
		local ppid="${stat#* }"
		[[ "${ppid%% *}" == "$$" ]] || return 1
	fi
	printf '%s\n' "$pid"
}

stopped() { ! running_pid "$1" >/dev/null; }

stop() {
	local name="$1" pid
	if pid="$(running_pid "$name")"; then
		kill -TERM "$pid" 2>/dev/null || true
		# Not our child (up has exited), so poll instead of `wait`.
		if ! wait_until 20 stopped "$name"; then
			log "$name (pid $pid) ignored SIGTERM for 20s; killing it"
			kill -KILL "$pid" 2>/dev/null || true
			wait_until 5 stopped "$name" || true
		fi
	fi
	rm -f "$DIR/$name.pid"
}

# Start a daemon detached from this script: output to DIR/NAME.log, stdin from
# /dev/null, and the DIR lock's descriptor and the caller's stdout (DATA_FD, when
# stdout_is_data kept it) closed, so neither a caller reading our stdout (eval
# "$(... up DIR)", a test harness capturing output) nor the next `up` waits for it.
spawn() {
	local name="$1"
	shift
	printf '\n==== %s: %s\n' "$(date -u +%FT%TZ)" "$*" >>"$DIR/$name.log"
	(
		# Closed here, not by a redirection below: `{DATA_FD}>&-` is an error while DATA_FD is
		# unset (down, or cluster.sh's down and load, do not call stdout_is_data).
		[[ -z "${DATA_FD:-}" ]] || exec {DATA_FD}>&-
		exec "$@"
	) </dev/null >>"$DIR/$name.log" 2>&1 {LOCK_FD}>&- &
	printf '%s\n' "$!" >"$DIR/$name.pid"
}

# wait_daemon NAME SECONDS COMMAND...: wait_until COMMAND succeeds while NAME, which this
# script spawned, runs: 0, 1 when NAME exited first, 2 when SECONDS passed.
wait_daemon() {
	local name="$1" seconds="$2" pid
	shift 2
	pid="$(running_pid "$name")" || return 1
	wait_until "$seconds" --pid "$pid" "$@"
}

log_tail() {
	local name="$1"
	log "last lines of $DIR/$name.log:"
	tail -n "${2:-30}" "$DIR/$name.log" | sed 's/^/    /' >&2
}

# --- ports -------------------------------------------------------------------

# Sets PORT to a random port no socket uses now, outside the kernel's
# ephemeral range so an outgoing connection cannot take it before the daemon
# binds. Races with other processes choosing at the same moment are caught by
# the daemon's bind error and retried (start_etcd, start_apiserver). Not
# $(pick_port): PICKED_PORTS must survive between calls.
pick_port() {
	local eph_lo eph_hi lo hi used
	read -r eph_lo eph_hi </proc/sys/net/ipv4/ip_local_port_range
	if ((eph_lo > 11000)); then
		lo=10000 hi=$((eph_lo - 1))
	else
		lo=$((eph_hi + 1)) hi=65535
	fi
	# Local addresses as ADDR:PORT, port in 4 upper-case hex digits. awk,
	# not a `read` loop: bash reads /proc byte by byte, and each read makes
	# the kernel render the table again, minutes with 10K sockets open.
	used="$(awk 'FNR > 1 {print $2}' /proc/net/tcp /proc/net/tcp6 2>/dev/null || true)"
	used=$'\n'"$used"$'\n'
	while :; do
		PORT=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo + 1)))
		[[ "$used" == *":$(printf '%04X' "$PORT")"$'\n'* || " ${PICKED_PORTS[*]} " == *" $PORT "* ]] || break
	done
	PICKED_PORTS+=("$PORT")
}

# True once NAME's log, since its last start, says a port was taken.
bind_conflict() {
	awk '/^==== /{hit=0} /address already in use/{hit=1} END{exit !hit}' "$DIR/$1.log"
}

# --- PKI ---------------------------------------------------------------------

make_pki() {
	local pki="$DIR/pki" cnf="$K8S_DIR/openssl.cnf" started=$SECONDS
	[[ -f "$pki/.complete" ]] && return
	log "making PKI in $pki"
	rm -rf "$pki"
	mkdir -p "$pki"
	export WSLOAD_APISERVER_SANS="DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:::1,IP:$SERVICE_API_IP${WSLOAD_K8S_EXTRA_SANS:+,$WSLOAD_K8S_EXTRA_SANS}"
	(
		umask 077
		cd "$pki"
		# RSA everywhere: every client library (kube-rs with rustls or
		# OpenSSL, client-go, curl) verifies it, and 2048 bits cost
		# milliseconds to make.
		openssl req -x509 -new -nodes -newkey rsa:2048 -sha256 -days 3650 \
			-keyout ca.key -out ca.crt -subj "/CN=wsload-k8s-ca" \
			-config "$cnf" -extensions v3_ca 2>/dev/null
		issue() { # name subject extensions
			openssl req -new -nodes -newkey rsa:2048 -keyout "$1.key" -subj "$2" \
				-config "$cnf" 2>/dev/null |
				openssl x509 -req -sha256 -days 365 -CA ca.crt -CAkey ca.key \
					-set_serial "0x$(openssl rand -hex 16)" \
					-extfile "$cnf" -extensions "$3" -out "$1.crt" 2>/dev/null
		}
		issue apiserver "/CN=kube-apiserver" v3_srv
		# system:masters is bound to cluster-admin and bypasses RBAC, as a
		# kubeadm admin.conf does.
		issue admin "/O=system:masters/CN=wsload-admin" v3_cli
		# The API server's identity towards kubelets (logs, exec) once a node
		# joins; kubelets authorize it through the API, hence the group.
		issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" v3_cli
		# Service account tokens: the API server signs with the private key
		# and verifies with the public one (the controller manager signs too).
		openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
		openssl pkey -in sa.key -pubout -out sa.pub
		# Certificates and public keys are not secret; clients read them.
		chmod 0644 ca.crt apiserver.crt admin.crt apiserver-kubelet-client.crt sa.pub
		touch .complete
	) || die "openssl failed making the PKI in $pki"
	log "PKI made in $((SECONDS - started))s"
}

b64() { base64 -w0 <"$1"; }

write_kubeconfig() {
	local tmp="$DIR/.kubeconfig.tmp"
	# Certificates embedded, so the file can be copied or mounted elsewhere.
	cat >"$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: wsload
  cluster:
    server: $APISERVER_URL
    certificate-authority-data: $(b64 "$DIR/pki/ca.crt")
users:
- name: wsload-admin
  user:
    client-certificate-data: $(b64 "$DIR/pki/admin.crt")
    client-key-data: $(b64 "$DIR/pki/admin.key")
contexts:
- name: wsload
  context:
    cluster: wsload
    user: wsload-admin
current-context: wsload
EOF
	chmod 0600 "$tmp"
	mv -f "$tmp" "$DIR/kubeconfig"
	cat >"$DIR/cluster.env" <<EOF
KUBECONFIG=$DIR/kubeconfig
K8S_VERSION=$K8S_VERSION
APISERVER_URL=$APISERVER_URL
ETCD_URL=$ETCD_URL
EOF
}

# --- daemons -----------------------------------------------------------------

start_etcd() {
	local attempt client peer rc
	for ((attempt = 1; attempt <= PORT_ATTEMPTS; attempt++)); do
		pick_port
		client=$PORT
		pick_port
		peer=$PORT
		ETCD_URL="http://127.0.0.1:$client"
		# Plain HTTP: loopback only, and the API server is its only client.
		# The initial-cluster flags only matter for a new data dir; a
		# reused one keeps its single-member cluster.
		spawn etcd "$ETCD_BIN" --name wsload --data-dir "$DIR/etcd" \
			--listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
			--listen-peer-urls "http://127.0.0.1:$peer" \
			--initial-advertise-peer-urls "http://127.0.0.1:$peer" \
			--initial-cluster "wsload=http://127.0.0.1:$peer" \
			--initial-cluster-state new --logger zap --log-outputs stderr
		rc=0
		wait_daemon etcd "$START_TIMEOUT" curl -fsS "$ETCD_URL/health" || rc=$?
		((rc == 0)) && return 0
		if ((rc == 1)) && bind_conflict etcd; then
			log "etcd: port $client or $peer was taken meanwhile; retrying"
			continue
		fi
		log_tail etcd
		die "etcd did not become healthy (see $DIR/etcd.log)"
	done
	die "etcd: no free port pair after $PORT_ATTEMPTS attempts"
}

# The API server's own test (utilnet.ChooseHostInterface): a default route
# through an interface other than lo, where the kernel keeps an unreachable one.
has_default_route() {
	awk 'NR > 1 && $1 != "lo" && $2 == "00000000" {found = 1} END {exit !found}' /proc/net/route 2>/dev/null ||
		awk '$1 == "00000000000000000000000000000000" && $2 == "00" && $10 != "lo" {found = 1} END {exit !found}' /proc/net/ipv6_route 2>/dev/null
}

apiserver_ready() {
	curl -fsS --max-time 5 --cacert "$DIR/pki/ca.crt" \
		--cert "$DIR/pki/admin.crt" --key "$DIR/pki/admin.key" "$APISERVER_URL/readyz"
}

start_apiserver() {
	local attempt port rc pki="$DIR/pki" advertise=()
	if [[ -n "${WSLOAD_K8S_ADVERTISE_ADDRESS:-}" ]]; then
		advertise=(--advertise-address "$WSLOAD_K8S_ADVERTISE_ADDRESS")
	elif ! has_default_route; then
		# Left to itself the API server takes the address of the default
		# route's interface and refuses to start without one (a sandbox with
		# loopback only). Loopback works, at the price of a logged error
		# each time it writes the `kubernetes` Service's endpoints.
		advertise=(--advertise-address 127.0.0.1)
	fi
	for ((attempt = 1; attempt <= PORT_ATTEMPTS; attempt++)); do
		pick_port
		port=$PORT
		APISERVER_URL="https://127.0.0.1:$port"
		write_kubeconfig
		# Secure port only, loopback only unless WSLOAD_K8S_BIND_ADDRESS says
		# otherwise. --cert-dir is never written to
		# (the certificates are given), but it defaults to a shared
		# relative path, so keep it in DIR. No --enable/--disable-admission-plugins: the
		# default set includes PodSecurity, which the restricted-namespace tests rely on
		# (operator/tests/lifecycle.rs, scripts/e2e/smoke.sh check that it refuses).
		spawn kube-apiserver "$APISERVER_BIN" \
			--bind-address "${WSLOAD_K8S_BIND_ADDRESS:-127.0.0.1}" --secure-port "$port" "${advertise[@]}" \
			--cert-dir "$pki" \
			--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
			--client-ca-file "$pki/ca.crt" \
			--etcd-servers "$ETCD_URL" \
			--service-cluster-ip-range "$SERVICE_CIDR" \
			--service-account-issuer "$SA_ISSUER" \
			--service-account-key-file "$pki/sa.pub" \
			--service-account-signing-key-file "$pki/sa.key" \
			--authorization-mode Node,RBAC \
			--allow-privileged=true \
			--kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
			--kubelet-client-key "$pki/apiserver-kubelet-client.key" \
			--kubelet-preferred-address-types InternalIP,Hostname
		rc=0
		wait_daemon kube-apiserver "$START_TIMEOUT" apiserver_ready || rc=$?
		((rc == 0)) && return 0
		if ((rc == 1)) && bind_conflict kube-apiserver; then
			log "kube-apiserver: port $port was taken meanwhile; retrying"
			continue
		fi
		log_tail kube-apiserver 40
		if ((rc == 2)); then
			# The checks still failing name what it waits for.
			log "/readyz?verbose now says:"
			curl -sS --max-time 5 --cacert "$DIR/pki/ca.crt" --cert "$DIR/pki/admin.crt" \
				--key "$DIR/pki/admin.key" "$APISERVER_URL/readyz?verbose" 2>&1 |
				grep -v '^\[+\]' | sed 's/^/    /' >&2 || true
			die "kube-apiserver not ready after ${START_TIMEOUT}s (see $DIR/kube-apiserver.log)"
		fi
		die "kube-apiserver exited during start (see $DIR/kube-apiserver.log)"
	done
	die "kube-apiserver: no free port after $PORT_ATTEMPTS attempts"
}

ensure_binaries() {
	ETCD_BIN="$(command -v etcd || true)"
	if [[ -z "$ETCD_BIN" ]] || ! command -v openssl >/dev/null || ! command -v curl >/dev/null; then
		"$K8S_DIR/install-deps.sh"
		ETCD_BIN="$(command -v etcd)" || die "etcd not found after installing etcd-server"
	fi
	APISERVER_BIN="$K8S_BIN_DIR/kube-apiserver"
	# Cached: a no-op costing a fraction of a second.
	[[ -x "$APISERVER_BIN" ]] || "$K8S_DIR/build.sh" kube-apiserver
}

# --- commands ----------------------------------------------------------------

# A failed or interrupted start leaves nothing running behind.
on_up_exit() {
	if ((!UP_DONE)); then cmd_down; fi
}

cmd_up() {
	local started=$SECONDS name
	# Checked before the trap below is set: refusing to start must not stop
	# the cluster that already runs.
	for name in kube-apiserver etcd; do
		if running_pid "$name" >/dev/null; then
			die "$name already runs for $DIR; run \`$0 down $DIR\` first"
		fi
	done
	UP_DONE=0
	at_exit on_up_exit
	trap 'exit 130' INT
	trap 'exit 143' TERM
	ensure_binaries
	make_pki
	PICKED_PORTS=()
	start_etcd
	start_apiserver
	UP_DONE=1
	log "up in $((SECONDS - started))s: $APISERVER_URL (etcd $ETCD_URL), logs in $DIR"
	cmd_env
}

cmd_down() {
	# The API server first: stopped after etcd it would log errors and retry
	# for a while before exiting.
	stop kube-apiserver
	stop etcd
}

cmd_env() {
	local line
	printf -v line 'export KUBECONFIG=%q' "$DIR/kubeconfig"
	emit "$line"
}

main() {
	[[ $# -eq 2 ]] || usage
	local cmd="$1"
	[[ -n "$2" ]] || usage
	case "$cmd" in
	up) mkdir -p "$2" ;;
	down | env) [[ -d "$2" ]] || {
		[[ "$cmd" == down ]] && exit 0
		die "$2: no such directory"
	} ;;
	*) usage ;;
	esac
	DIR="$(cd "$2" && pwd -P)"
	# up and env print the export line for the caller's eval, and nothing else: what up
	# installs and builds on a cold machine reports on stderr.
	if [[ "$cmd" != down ]]; then
		stdout_is_data
	fi
	case "$cmd" in
	env)
		cmd_env
		return
		;;
	esac
	# One up or down at a time per DIR; different DIRs never wait for each
	# other.
	exec {LOCK_FD}>"$DIR/.lock"
	flock "$LOCK_FD"
	"cmd_$cmd"
}

# cluster.sh sources this file for its process helpers (spawn, stop,
# running_pid, wait_daemon, log_tail) without running a command.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
	main "$@"
fi
