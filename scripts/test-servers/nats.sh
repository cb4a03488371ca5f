#!/usr/bin/env bash
# The NATS server (Go, github.com/nats-io/nats-server/v2, built from the Go module proxy by
# scripts/tools.sh) with its WebSocket listener, for the nats presets (examples/nats.yaml,
# examples/nats-fanout.yaml). Plain NATS over ws://HOST:PORT (any path), no TLS, no auth; its
# own config and log in a temporary directory removed at exit.
#
# usage: scripts/test-servers/nats.sh [--host H] [--port N] [--ping-interval D]
#   --host           the address the WebSocket listener takes (default 127.0.0.1)
#   --port           its port (default: a free one)
#   --ping-interval  how often the server PINGs a quiet connection (default 2s); two PINGs
#                    left without a PONG close it ("Stale Connection")
#
# Prints the test servers' line (scripts/test-servers/serve.js) once the WebSocket listener
# accepts upgrades, with "stats":"/varz" on the monitoring port, "statsPort" (the server's own
# counters: in_msgs, out_msgs, connections, ...). Runs until TERM or INT, then stops the server.
# Starts in well under a second once built (the build: ~35 s cold, cached after).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOG_NAME=test-servers/nats
# shellcheck source=scripts/lib/common.sh
source "$HERE/../lib/common.sh"
stdout_is_data

host=127.0.0.1
port=
ping_interval=2s
while (($#)); do
	case "$1" in
	--host) host=${2:?--host needs a value} ;;
	--port) port=${2:?--port needs a value} ;;
	--ping-interval) ping_interval=${2:?--ping-interval needs a value} ;;
	*) usage ;;
	esac
	shift 2
done

nats_server=$("$HERE/../tools.sh" nats-server)

# The plain NATS port is not used, but it always listens: a free one, on loopback.
read -r client_port monitor_port free < <(free_ports 3)
port=${port:-$free}
dir=$(mktemp -d "${TMPDIR:-/tmp}/wsload-nats.XXXXXX")
server_pid=
at_exit 'rm -rf "$dir"'
at_exit 'stop_process "$server_pid" 10'
trap 'exit 130' INT
trap 'exit 143' TERM

# ping_interval under websocket: the PINGs of WebSocket clients, the ones under test. The
# server skips a PING when the client sent a message or a PING of its own within the interval,
# so only quiet connections are PINGed. max_connections above the default 64K is not needed;
# max_pending is the default.
cat >"$dir/nats.conf" <<CONF
host: 127.0.0.1
port: $client_port
http: 127.0.0.1:$monitor_port
websocket {
  host: "$host"
  port: $port
  no_tls: true
  ping_interval: "$ping_interval"
}
CONF

started=$SECONDS
# The server must not hold the caller's stdout (DATA_FD) open: a caller reading to its end
# would wait for it.
(
	exec {DATA_FD}>&-
	exec "$nats_server" --config "$dir/nats.conf" --log "$dir/nats.log"
) &
server_pid=$!

# Ready when both answer: the monitoring endpoint, then a WebSocket upgrade whose first
# message is the server's INFO.
nats_listening() {
	python3 - "$host" "$port" "$monitor_port" <<'PY'
import socket, sys
host, port, monitor = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
m = socket.create_connection(("127.0.0.1", monitor), timeout=1)
m.sendall(b"GET /varz HTTP/1.0\r\n\r\n")
if not m.recv(64).startswith(b"HTTP/1."):
    sys.exit(1)
s = socket.create_connection((host, port), timeout=1)
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
          b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
data = b""
while b"INFO" not in data:
    chunk = s.recv(4096)
    if not chunk:
        sys.exit(1)
    data += chunk
sys.exit(0 if data.startswith(b"HTTP/1.1 101") else 1)
PY
}
if ! wait_until 30 --pid "$server_pid" nats_listening; then
	tail -n 30 "$dir/nats.log" >&2 || true
	die "nats-server did not listen on $host:$port within 30 s"
fi
log "$("$nats_server" --version): WebSocket on ws://$host:$port, /varz on port $monitor_port, after $((SECONDS - started)) s"
emit "{\"server\":\"nats\",\"host\":\"$host\",\"port\":$port,\"stats\":\"/varz\",\"statsPort\":$monitor_port}"
wait "$server_pid"
