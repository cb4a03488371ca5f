#!/usr/bin/env bash
# Starts one of the test servers here, installing what it needs first (install.sh, Debian's
# RabbitMQ for stomp, or nats-server from the Go module proxy for nats). It prints one line on
# stdout once it listens (the contract is in serve.js), e.g.
# {"server":"socketio","host":"127.0.0.1","port":40123,"stats":"/stats"}, and runs until TERM
# or INT.
#
# usage: scripts/test-servers/run.sh SERVER [--host H] [--port N] [OPTION VALUE...]
#   SERVER  socketio, socketio2, graphql-ws, jsonrpc, sockjs, mqtt (node, npm packages) or
#           stomp (RabbitMQ web-stomp) or nats (nats-server's WebSocket listener) or ariadne,
#           channels (Python, PyPI packages: python-install.sh)
#   --host  listen address (default 127.0.0.1); --port: default a free one
#   other options are the server's own: see the head of scripts/test-servers/SERVER.js (.sh,
#           _server.py)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOG_NAME=test-servers/run
# shellcheck source=scripts/lib/common.sh
source "$HERE/../lib/common.sh"

[[ $# -ge 1 ]] || usage
server=$1
shift
case "$server" in
stomp) exec "$HERE/stomp.sh" "$@" ;;
nats) exec "$HERE/nats.sh" "$@" ;;
ariadne | channels)
	python=$("$HERE/python-install.sh")
	exec "$python" "$HERE/${server}_server.py" "$@"
	;;
socketio | socketio2 | graphql-ws | jsonrpc | sockjs | mqtt)
	modules=$("$HERE/install.sh")
	NODE_PATH=$modules exec node "$HERE/$server.js" "$@"
	;;
*) usage ;;
esac
