#!/usr/bin/env bash
# Installs the npm packages the test servers here run on (package-lock.json: socket.io 4 and
# socket.io 2 as socket.io-v2, aedes, graphql-ws, ws, graphql, rpc-websockets, sockjs), with
# `npm ci`, into a cache directory named by the hash of the lock file and the major version of
# node, so changed pins get a fresh directory and an unchanged one is reused; earlier ones are
# removed. Needs node and npm (Debian's `nodejs` and `npm` when missing). Package install
# scripts are not run: every package used has a pure JavaScript path (ws's native helpers are
# optional).
#
# usage: scripts/test-servers/install.sh [--stomp]
#   --stomp  also Debian's rabbitmq-server (the STOMP broker stomp.sh runs; ~13 s cold)
#   Prints the node_modules directory on stdout (for NODE_PATH); everything else on stderr.
#
# Environment:
#   WSLOAD_CACHE  cache root (default: ~/.cache/wsload)
#
# Cold: ~4 s on this machine with npm's own cache warm (see README for the measured costs);
# warm: one hash, ~0.1 s.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOG_NAME=test-servers/install
# shellcheck source=scripts/lib/common.sh
source "$HERE/../lib/common.sh"
stdout_is_data

case "${1:-}" in
"") ;;
--stomp) need_packages rabbitmq-server ;;
*) usage ;;
esac
[[ $# -le 1 ]] || usage
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	need_packages nodejs npm
fi
cache_root=${WSLOAD_CACHE:-$HOME/.cache/wsload}
key=$({
	cat "$HERE/package-lock.json"
	node -p 'process.versions.node.split(".")[0]'
} | sha256sum | cut -c1-16)
dir=$cache_root/test-servers-$key

if [[ ! -f $dir/.complete ]]; then
	mkdir -p "$cache_root"
	# Two runs sharing a cache must not install into the same directory at once.
	exec {lock_fd}>"$cache_root/test-servers.lock"
	flock "$lock_fd"
	if [[ ! -f $dir/.complete ]]; then
		log "installing the test servers' npm packages into $dir"
		rm -rf "$dir"
		mkdir -p "$dir"
		cp "$HERE/package.json" "$HERE/package-lock.json" "$dir/"
		(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) >&2 ||
			die "npm ci failed in $dir"
		NODE_PATH=$dir/node_modules node -e 'for (const m of ["socket.io", "socket.io-v2", "graphql-ws/use/ws", "ws", "graphql", "rpc-websockets", "sockjs"]) require(m)' ||
			die "the packages installed in $dir do not load"
		touch "$dir/.complete"
		for old in "$cache_root"/test-servers-*; do
			if [[ -d $old && $old != "$dir" ]]; then
				rm -rf "$old"
			fi
		done
	fi
	exec {lock_fd}>&-
fi
emit "$dir/node_modules"
