#!/usr/bin/env bash
# A STOMP 1.2 over WebSocket broker for the stomp preset (examples/stomp.yaml): Debian's
# RabbitMQ with its rabbitmq_web_stomp plugin, run as a node of its own (own node name, data,
# logs, config, ports and port mapper (epmd), in a temporary directory removed at exit; the
# port mapper stopped at exit too), never the package's
# system service. STOMP over WebSocket on ws://HOST:PORT/ws (subprotocols v12.stomp and
# older), user guest/guest from any address.
#
# usage: scripts/test-servers/stomp.sh [--host H] [--port N]
#   --host  the address web-stomp listens on (default 127.0.0.1)
#   --port  its port (default: a free one)
#
# Prints the test servers' line (scripts/test-servers/serve.js) once the broker accepts
# WebSocket upgrades, without "stats": RabbitMQ has its own tools. Runs until TERM or INT,
# then stops the node. Starting takes ~5-10 s on this machine (Erlang boots the broker).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOG_NAME=test-servers/stomp
# shellcheck source=scripts/lib/common.sh
source "$HERE/../lib/common.sh"
stdout_is_data

host=127.0.0.1
port=
while (($#)); do
	case "$1" in
	--host) host=${2:?--host needs a value} ;;
	--port) port=${2:?--port needs a value} ;;
	*) usage ;;
	esac
	shift 2
done

need_packages rabbitmq-server
bin=/usr/lib/rabbitmq/bin
[[ -x $bin/rabbitmq-server ]] || die "the rabbitmq-server package is installed but $bin/rabbitmq-server is missing"

read -r amqp_port dist_port epmd_port free < <(free_ports 4)
port=${port:-$free}
dir=$(mktemp -d "${TMPDIR:-/tmp}/wsload-stomp.XXXXXX")
node_pid=
at_exit 'rm -rf "$dir"'
# An Erlang port mapper of this node's own (on its own port), so that nothing of it outlives
# the script and no other Erlang node on the machine is touched.
at_exit '[[ -z $node_pid ]] || ERL_EPMD_PORT=$epmd_port epmd -kill >/dev/null 2>&1 || true'
at_exit '[[ -z $node_pid ]] || { RABBITMQ_CONF_ENV_FILE=/dev/null HOME=$dir "$bin/rabbitmqctl" -n "$node" stop >/dev/null 2>&1 || true; stop_process "$node_pid" 10; }'
trap 'exit 130' INT
trap 'exit 143' TERM

# The node's name carries its port: two brokers on one machine (and one epmd) do not collide.
node="wsload-stomp-$port@localhost"
cat >"$dir/rabbitmq.conf" <<CONF
listeners.tcp.default = 127.0.0.1:$amqp_port
web_stomp.tcp.ip = $host
web_stomp.tcp.port = $port
# Load generators in pods connect from other addresses than loopback.
loopback_users = none
log.console = false
log.file.level = warning
CONF
echo '[rabbitmq_web_stomp].' >"$dir/enabled_plugins"

export HOME=$dir # the Erlang cookie is made there
export RABBITMQ_CONF_ENV_FILE=/dev/null
export RABBITMQ_NODENAME=$node
export RABBITMQ_DIST_PORT=$dist_port
export ERL_EPMD_PORT=$epmd_port
export RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf
export RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins
export RABBITMQ_MNESIA_BASE=$dir/mnesia
export RABBITMQ_LOG_BASE=$dir/log
export RABBITMQ_PID_FILE=$dir/rabbitmq.pid

started=$SECONDS
# The node must not hold the caller's stdout (DATA_FD) open: a caller reading to its end would
# wait for the broker.
(
	exec {DATA_FD}>&-
	exec "$bin/rabbitmq-server"
) >"$dir/stdout.log" 2>&1 &
node_pid=$!

# web_stomp answers a plain GET on /ws with 400 (not an upgrade) once it listens.
web_stomp_listening() {
	python3 - "$host" "$port" <<'PY'
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1)
s.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\n\r\n")
sys.exit(0 if s.recv(64).startswith(b"HTTP/1.1") else 1)
PY
}
if ! wait_until 60 --pid "$node_pid" web_stomp_listening; then
	tail -n 30 "$dir/stdout.log" >&2 || true
	cat "$dir"/log/*.log >&2 2>/dev/null || true
	die "RabbitMQ did not listen on $host:$port within 60 s"
fi
log "RabbitMQ $node: STOMP over WebSocket on ws://$host:$port/ws after $((SECONDS - started)) s"
emit "{\"server\":\"stomp\",\"host\":\"$host\",\"port\":$port}"
wait "$node_pid"
