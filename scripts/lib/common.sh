# shellcheck shell=bash
# The helpers every shell script of the project shares (scripts/, bench/, examples/kind/):
# messages, failure, step headers and timings, polling, clean-up at exit, Debian packages, the
# version a tool reports, and the stdout contract. Sourced, never run:
#
#   LOG_NAME=k8s/cluster  # optional; the prefix of log lines, default: the script's name
#   source "$ROOT/scripts/lib/common.sh"
#
# The stdout contract: progress, warnings and the output of every tool a script runs (apt-get,
# go, pip, cargo, crane, helm) go to stderr. A script whose stdout is a value its caller reads
# ($(...), eval "$(...)") calls stdout_is_data first thing and prints that value with emit, so
# nothing it runs can write anything else there, whether or not the machine is warm.

# No include guard: sourcing twice redefines the same functions and keeps the state (LOG_NAME,
# the clean-ups registered, the timings).
LOG_NAME="${LOG_NAME:-$(basename "$0" .sh)}"

log() { printf '%s: %s\n' "$LOG_NAME" "$*" >&2; }
# die: this script could not do its job (a missing tool, a failed install, bad usage).
die() {
	log "error: $*"
	exit 1
}
# fail: a check this script makes did not hold.
fail() {
	log "FAILED: $*"
	exit 1
}
# usage: the script's own usage from its header comment (a "# usage: ..." line and the indented
# "#   ..." lines after it, its name as called), on stderr; then exit 2.
usage() {
	awk 'on && !/^#(  |\t)/ { exit } /^# ?usage: / { on = 1 } on { sub(/^# ?/, ""); print }' "$0" |
		sed "1s|^usage: [^ ]*|usage: $0|" >&2
	exit 2
}

# step TITLE: a section header; steps go where the script's output goes.
step() { printf '\n==> %s\n' "$*"; }
# timed LABEL: records the seconds since the last mark in TIMES, for a closing summary line.
# Kept when this file is sourced again (by a library after its script): what was recorded stays.
declare -p TIMES >/dev/null 2>&1 || TIMES=()
declare -p MARK >/dev/null 2>&1 || MARK=$SECONDS
timed() {
	TIMES+=("$1 $((SECONDS - MARK))s")
	MARK=$SECONDS
}

# stdout_is_data / emit VALUE...: see the stdout contract above. Everything after
# stdout_is_data, this script's tools included, writes to stderr; emit writes one line per
# argument to the caller's stdout. A daemon this script leaves running must close DATA_FD
# ({DATA_FD}>&-), or the caller's $(...) waits for it.
stdout_is_data() { exec {DATA_FD}>&1 1>&2; }
emit() { printf '%s\n' "$@" >&"${DATA_FD:?stdout_is_data was not called}"; }

# at_exit COMMAND: runs COMMAND (a string, eval'd then, so it sees the variables' values at exit)
# when the script exits; clean-ups run in the reverse order of their registration. One EXIT trap
# for every clean-up a script and its libraries need; a failing clean-up does not stop the others.
declare -p AT_EXIT >/dev/null 2>&1 || AT_EXIT=()
at_exit() {
	AT_EXIT+=("$1")
	trap run_at_exit EXIT
}
run_at_exit() {
	local rc=$? i
	for ((i = ${#AT_EXIT[@]} - 1; i >= 0; i--)); do
		eval "${AT_EXIT[i]}" || true
	done
	return "$rc"
}

# wait_until SECONDS [--pid PID] COMMAND...: runs COMMAND (output discarded) every
# WAIT_INTERVAL seconds (0.25) until it succeeds. Returns 0 then, 1 when PID (the process that
# should make COMMAND succeed) exits first, 2 when SECONDS pass; the caller says what failed.
wait_until() {
	local deadline=$((SECONDS + $1)) pid=""
	shift
	if [[ "${1:-}" == --pid ]]; then
		pid="$2"
		shift 2
	fi
	until "$@" >/dev/null 2>&1; do
		[[ -z "$pid" ]] || kill -0 "$pid" 2>/dev/null || return 1
		((SECONDS < deadline)) || return 2
		sleep "${WAIT_INTERVAL:-0.25}"
	done
}

# process_gone PID: PID has exited (or is empty).
process_gone() { [[ -z "$1" ]] || ! kill -0 "$1" 2>/dev/null; }
# stop_process PID [SECONDS]: ends PID, a child of this script: TERM, KILL when it is still
# there after SECONDS (default 5), then reaps it. A no-op for an empty PID.
stop_process() {
	[[ -n "$1" ]] || return 0
	kill -TERM "$1" 2>/dev/null || true
	WAIT_INTERVAL=0.1 wait_until "${2:-5}" process_gone "$1" || kill -KILL "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

# free_ports [N]: N (default 1) distinct loopback ports free now, on one line. All are held open
# together while the kernel picks, so they differ, and all are closed before the line is
# printed: a caller reading it through `< <(free_ports 2)` (which does not wait for the process
# to end) must never race the picker's own sockets. A daemon that then fails to bind one
# (another process took it meanwhile) is the caller's retry.
free_ports() {
	python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
ports = [s.getsockname()[1] for s in socks]
for s in socks:
    s.close()
print(" ".join(map(str, ports)), flush=True)' "${1:-1}"
}

# reported_version COMMAND...: the first version X.Y.Z that COMMAND prints (stdout or stderr),
# without a leading v; nothing when it prints none or cannot run. Whether it can run is checked
# first: bash's own "No such file or directory" names the command's path, which in a
# version-keyed cache holds the version. How the install scripts decide whether a cached tool is
# the pinned one: compare with "${PINNED#v}".
reported_version() {
	command -v "$1" >/dev/null || return 0
	{ "$@" 2>&1 || true; } | grep -o -E '[0-9]+\.[0-9]+\.[0-9]+' | head -n 1 || true
}

# as_root COMMAND...: COMMAND as root, through sudo when this script is not root.
as_root() {
	if ((EUID == 0)); then
		"$@"
	elif command -v sudo >/dev/null; then
		sudo "$@"
	else
		die "needs root (or sudo) to run: $*"
	fi
}

# need_packages PACKAGE...: installs the Debian packages among PACKAGE that are not installed,
# with apt-get's and dpkg's output on stderr (they print progress on stdout). A no-op costing one
# dpkg-query per package when all are there. Package lists may be absent (a fresh machine) or
# stale (a superseded version is no longer downloadable): they are refreshed only when the plain
# install fails. Waits for another apt-get's lock instead of failing on it.
need_packages() {
	local missing=() p
	for p; do
		# dpkg-query, not `command -v`: a binary of the same name elsewhere on PATH is not the
		# package the scripts were proven with.
		if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" != installed ]]; then
			missing+=("$p")
		fi
	done
	((${#missing[@]})) || return 0
	command -v apt-get >/dev/null || die "missing Debian packages and no apt-get: ${missing[*]}"
	log "installing ${missing[*]} (Debian packages)"
	local apt=(as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -y -qq)
	if ! "${apt[@]}" install --no-install-recommends "${missing[@]}" >&2; then
		"${apt[@]}" update >&2 || true
		if ! "${apt[@]}" install --no-install-recommends "${missing[@]}" >&2; then
			for p in "${missing[@]}"; do apt-cache policy "$p" >&2 || true; done
			die "apt-get install ${missing[*]} failed (apt-cache policy above says what this machine's Debian offers)"
		fi
	fi
}

# require_go MINOR WHAT: dies unless `go` is on PATH and at least 1.MINOR. For the scripts that
# build Go programs from the module proxy (Kubernetes, Prometheus, helm, crane): an older go
# would try to download the toolchain their go.mod asks for, which the proxy here may well
# refuse, so it is refused up front with what to install.
require_go() {
	local want_minor="$1" what="$2" v major minor
	command -v go >/dev/null || die "go is needed to build $what (Go >= 1.$want_minor, e.g. /usr/local/go/bin on PATH)"
	v="$(GOTOOLCHAIN=local go env GOVERSION)"
	v="${v#go}"
	major="${v%%.*}"
	minor="${v#*.}"
	minor="${minor%%.*}"
	if ((major < 1 || (major == 1 && minor < want_minor))); then
		die "go $v is too old to build $what (needs >= 1.$want_minor)"
	fi
}

# kubectl ARGS...: $KUBECTL when set (a kind user's own), else the pinned kubectl that
# scripts/k8s/build.sh builds (K8S_BIN_DIR, from scripts/k8s/versions.sh). Scripts point it at a
# cluster with KUBECONFIG.
kubectl() { "${KUBECTL:-${K8S_BIN_DIR:?source scripts/k8s/versions.sh first}/kubectl}" "$@"; }

# crd_established NAME: the CustomResourceDefinition NAME is Established (for wait_until).
# Polled, not `kubectl wait --for=condition=Established`: a CRD read before its first condition
# makes kubectl wait fail at once.
crd_established() {
	[[ "$(kubectl get "crd/$1" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" == True ]]
}

# The metrics URLs of `wsload run`'s managed servers, from its stderr in FILE, one a line.
# The line is crates/wsload-contract's announce::managed_servers; the load generator's
# tests check this reader against a real run's line.
managed_metrics_urls() {
	sed -n 's/^managed wsload-server.*, metrics on \(http.*\)$/\1/p' "$1" | head -1 | tr ' ' '\n'
}
