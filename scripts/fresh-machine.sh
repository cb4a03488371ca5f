#!/usr/bin/env bash
# Runs the test suite as a machine that never ran the project would: warm caches and installed
# packages once hid two failures of the README's test command. Changes this machine: it purges
# the Debian packages the scripts install (PURGE below; they come back with the run), then runs
# ./scripts/test in a fresh clone of HEAD with every cache empty: WSLOAD_CACHE, Go's module and
# build caches and Cargo's registry, all new directories under DIR (the machine's own Go and
# Cargo caches are left as they are). With --warm it then runs the suite a second time on the
# same clone and caches, and prints both times.
#
# usage: scripts/fresh-machine.sh --yes [--warm] [--dir DIR] [PART...]
#   --yes      required: the packages are purged
#   --warm     a second run after the first, for the warm time
#   --dir DIR  where the clone and the caches go (default: a new directory in ${TMPDIR:-/tmp});
#              WSLOAD_CACHE, when set, is used instead of DIR/cache and must be empty
#   PART...    only these parts of scripts/test (default: all of it, as CI runs it)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/common.sh
source "$ROOT/scripts/lib/common.sh"
# --packages prints data; the suite's own output is progress here.
stdout_is_data

# What need_packages installs somewhere in scripts/ that a new project machine does not have.
# check-scripts.sh fails when a script installs a package that is in neither list.
PURGE=(etcd-server containerd runc containernetworking-plugins iptables ipset musl-tools buildah prometheus shellcheck chromium rabbitmq-server docker.io mmdebstrap)
# Installed by the scripts when missing, but part of every project machine (purging them would
# take the machine's TLS certificates, git, every program's fonts, the tmux a person runs this
# in, or the machine's own Node.js and Python with them): left installed.
BASE=(openssl curl jq fonts-dejavu-core tmux nodejs npm python3 python3-venv)

yes=0 warm=0 dir=""
parts=()
while (($#)); do
	case "$1" in
	--yes) yes=1 ;;
	--warm) warm=1 ;;
	--dir)
		[[ $# -ge 2 ]] || usage
		dir="$2"
		shift
		;;
	--packages) # for check-scripts.sh
		emit "${PURGE[@]}" "${BASE[@]}"
		exit 0
		;;
	-*) usage ;;
	*) parts+=("$1") ;;
	esac
	shift
done
((yes)) || usage
[[ -n "$dir" ]] || dir="$(mktemp -d "${TMPDIR:-/tmp}/wsload-fresh.XXXXXX")"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
cache="${WSLOAD_CACHE:-$dir/cache}"
if [[ -d "$cache" && -n "$(ls -A "$cache")" ]]; then
	die "WSLOAD_CACHE $cache is not empty: a fresh machine has no cache"
fi

installed=()
for p in "${PURGE[@]}"; do
	if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" == installed ]]; then
		installed+=("$p")
	fi
done
if ((${#installed[@]})); then
	# The kind part's dockerd (started by hand, no systemd to stop it on purge).
	"$ROOT/scripts/k8s/dockerd.sh" down >&2 || true
	log "purging ${installed[*]} and what only they needed"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -y -qq purge --autoremove \
		"${installed[@]}" >&2
fi

rm -rf "$dir/wsload"
git clone -q "$ROOT" "$dir/wsload"
mkdir -p "$cache" "$dir/cargo"
# Cargo's configuration (a registry mirror, if the machine has one) is kept; its registry is not.
for f in "${CARGO_HOME:-$HOME/.cargo}"/config "${CARGO_HOME:-$HOME/.cargo}"/config.toml; do
	if [[ -f "$f" ]]; then cp "$f" "$dir/cargo/"; fi
done
log "fresh clone of $(git -C "$ROOT" rev-parse --short HEAD) in $dir/wsload; caches under $dir (WSLOAD_CACHE $cache)"

run_suite() { # label
	local t=$SECONDS rc=0
	(
		cd "$dir/wsload"
		export WSLOAD_CACHE="$cache" GOMODCACHE="$dir/go/mod" GOCACHE="$dir/go/build" CARGO_HOME="$dir/cargo"
		./scripts/test "${parts[@]}"
	) || rc=$?
	log "$1 run: exit $rc in $((SECONDS - t))s"
	RESULTS+=("$1 $((SECONDS - t))s (exit $rc)")
	return "$rc"
}
RESULTS=()
rc=0
run_suite cold || rc=$?
if ((rc == 0 && warm)); then
	run_suite warm || rc=$?
fi
log "fresh-machine: ${RESULTS[*]}; kept $dir (delete it when done)"
exit "$rc"
