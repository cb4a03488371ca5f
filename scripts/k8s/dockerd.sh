#!/usr/bin/env bash
# Docker for kind on a project machine: Debian's docker.io, its dockerd started by hand (these
# machines run no systemd), with runc-wrap as the default runtime and without iptables.
#
# usage: scripts/k8s/dockerd.sh up     start dockerd unless one answers (idempotent)
#        scripts/k8s/dockerd.sh down   stop the dockerd `up` started (idempotent)
#
# Why runc-wrap: the VM's bounding set lacks CAP_SYS_RESOURCE, so runc refuses every
# --privileged container (kind's nodes are) unless the capability is dropped from the spec.
# Why "iptables": false: dockerd would set the host's FORWARD policy to DROP, which cuts the pod
# traffic of the bare-process node cluster (scripts/k8s/cluster.sh) on the same machine. kind
# needs none of those rules here: its nodes talk over the docker bridge (layer 2), and the API
# server's port reaches the host through docker-proxy, the userland proxy.
#
# State: /run/wsload-dockerd (config, pid, runc-wrap's copy); log: $WSLOAD_CACHE/dockerd.log.
# The images live in dockerd's usual /var/lib/docker.
set -euo pipefail

K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOG_NAME=k8s/dockerd
# shellcheck source=scripts/lib/common.sh
source "$K8S_DIR/../lib/common.sh"

STATE=/run/wsload-dockerd
WSLOAD_CACHE="${WSLOAD_CACHE:-$HOME/.cache/wsload}"
LOG_FILE="$WSLOAD_CACHE/dockerd.log"

answers() { timeout 10 docker info >/dev/null 2>&1; }

up() {
	local pid rc=0
	need_packages docker.io jq
	if answers; then
		log "a Docker daemon answers already"
		return
	fi
	[[ $EUID -eq 0 ]] || die "starting dockerd needs root"
	mkdir -p "$STATE" "$WSLOAD_CACHE"
	# A copy: the daemon outlives this checkout's edits (and a deleted fresh clone).
	install -m 0755 "$K8S_DIR/runc-wrap" "$STATE/runc-wrap"
	cat >"$STATE/daemon.json" <<EOF
{
  "runtimes": { "wrap": { "path": "$STATE/runc-wrap" } },
  "default-runtime": "wrap",
  "iptables": false,
  "ip6tables": false,
  "exec-opts": ["native.cgroupdriver=cgroupfs"]
}
EOF
	printf '\n==== %s: dockerd\n' "$(date -u +%FT%TZ)" >>"$LOG_FILE"
	# setsid: the daemon outlives this script and its terminal.
	setsid dockerd --config-file "$STATE/daemon.json" --pidfile "$STATE/dockerd.pid" \
		</dev/null >>"$LOG_FILE" 2>&1 &
	pid=$!
	printf '%s\n' "$pid" >"$STATE/started.pid"
	wait_until 60 --pid "$pid" answers || rc=$?
	if ((rc)); then
		tail -n 20 "$LOG_FILE" | sed 's/^/    /' >&2
		((rc == 1)) && die "dockerd exited (log above, all of it in $LOG_FILE)"
		die "dockerd did not answer within 60 s (log above, all of it in $LOG_FILE)"
	fi
	log "dockerd $(docker version --format '{{.Server.Version}}') up (pid $pid, log $LOG_FILE)"
}

down() {
	local pid
	[[ -f "$STATE/started.pid" ]] || {
		log "no dockerd started by this script"
		return
	}
	pid="$(<"$STATE/started.pid")"
	if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
		kill "$pid"
		# dockerd stops its containers first (10 s each at most).
		wait_until 60 process_gone "$pid" || die "dockerd (pid $pid) did not stop within 60 s"
	fi
	rm -f "$STATE/started.pid"
	log "dockerd stopped"
}

case "${1:-}" in
up) up ;;
down) down ;;
*) usage ;;
esac
