#!/usr/bin/env bash
# Measures wsload-server's memory per idle connection: one release wsload-server (profile echo,
# its default keepalive) on loopback, held open by the release `wsload` load generator
# (scenario sustainedHold, an app-level ping every 30 s):
#   1. a baseline hold of 1 connection: the server's VmRSS once it is open and answered a ping;
#   2. a hold of N connections on the same server process: its VmRSS once all are open (+2 s)
#      and once every open connection has had its first ping echoed (+1 s).
# KiB per connection = (VmRSS with N - VmRSS with 1) / (N - 1). The figure after the first ping
# round is the steady one (right after the storm the allocator still holds the handshakes' freed
# buffers) and is the last line on stdout: server_kib_per_conn=V. The issue 12 target is <= 8.
# Progress on stderr; every process started here is ended on exit.
#
# usage: bench/server/idle-memory.sh
#   WSLOAD_BENCH_IDLE_CONNECTIONS  idle connections to hold (default: 15000)
#   WSLOAD_BENCH_SERVER_ARGS       extra wsload-server flags, split on spaces
#                                  (e.g. "--read-buffer-size 1024")
#   WSLOAD_BENCH_PORT              first loopback port; each start takes the next free pair
#                                  (default: 18760)
#   WSLOAD_BENCH_OUT               result directory (default: target/bench-server-idle)
#   WSLOAD_BIN, WSLOAD_SERVER_BIN  prebuilt binaries; unset (either): `cargo build --release
#                                  -p wsload -p wsload-server`
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$here/../.." && pwd)
conns=${WSLOAD_BENCH_IDLE_CONNECTIONS:-15000}
read -r -a server_args <<<"${WSLOAD_BENCH_SERVER_ARGS:-}"
next_port=${WSLOAD_BENCH_PORT:-18760}
out=${WSLOAD_BENCH_OUT:-$repo_root/target/bench-server-idle}

LOG_NAME=bench-server-idle
# shellcheck source=bench/lib.sh
source "$here/../lib.sh"

if ! [[ $conns =~ ^[0-9]+$ ]] || ((conns < 2)); then
    die "WSLOAD_BENCH_IDLE_CONNECTIONS must be a number >= 2"
fi
for tool in cargo curl timeout; do
    command -v "$tool" >/dev/null || die "$tool is required"
done

# The client and the server each hold N sockets; both raise their soft limit to the hard one
# themselves, which has to leave room for N and their own descriptors.
fd_limit=$(ulimit -Hn)
if [[ $fd_limit != unlimited ]] && ((conns + 200 > fd_limit)); then
    die "the hard open-file limit $fd_limit is too low for $conns connections per process"
fi

mkdir -p "$out"
rm -f "$out"/*.yaml "$out"/*.log "$out"/*.json

if [[ -n ${WSLOAD_BIN:-} && -n ${WSLOAD_SERVER_BIN:-} ]]; then
    wsload_bin=$WSLOAD_BIN
    server_bin=$WSLOAD_SERVER_BIN
else
    log "building wsload and wsload-server (release)"
    (cd "$repo_root" && timeout 1800 cargo build --release --quiet -p wsload -p wsload-server)
    wsload_bin=${WSLOAD_BIN:-$repo_root/target/release/wsload}
    server_bin=${WSLOAD_SERVER_BIN:-$repo_root/target/release/wsload-server}
fi
[[ -x $wsload_bin ]] || die "no wsload binary at $wsload_bin"
[[ -x $server_bin ]] || die "no wsload-server binary at $server_bin"

# Sum of a counter or gauge (all label sets) at metrics address $1, or empty.
metric() {
    curl -s --max-time 2 "http://$1/metrics" 2>/dev/null |
        awk -v name="$2" 'index($1, name "{") == 1 || $1 == name { s += $2; n++ } END { if (n) printf "%d\n", s }'
}

# The server keeps its default keepalive (ping 25 s, idle timeout 60 s): the memory measured is
# the one a deployed server has, timers included. RUST_LOG=warn: nothing logged per connection.
take_ports
server_addr=127.0.0.1:$server_port
server_metrics=127.0.0.1:$metrics_port
RUST_LOG=warn "$server_bin" --profile echo --listen "$server_addr" \
    --metrics-listen "$server_metrics" --drain-timeout 2s "${server_args[@]}" \
    >"$out/server.log" 2>&1 &
server_pid=$!
started_pids+=("$server_pid")
rc=0
WAIT_INTERVAL=0.1 wait_until 10 --pid "$server_pid" listening "$server_port" || rc=$?
((rc != 1)) || die "wsload-server exited at start-up: $(tail -5 "$out/server.log")"
((rc != 2)) || die "wsload-server did not listen on $server_addr within 10 s"

# write_spec NAME CONNECTIONS DURATION PING_INTERVAL PING_TIMEOUT: a sustainedHold LoadTest
# in $out.
write_spec() {
    cat >"$out/$1.yaml" <<EOF
apiVersion: wsload.dev/v1alpha1
kind: LoadTest
metadata:
  name: bench-server-$1
spec:
  target:
    url: ws://$server_addr/
  scenario: sustainedHold
  connections: [$2]
  duration: $3
  ping:
    interval: $4
    timeout: $5
EOF
    "$wsload_bin" validate "$out/$1.yaml" >/dev/null || die "$out/$1.yaml is not a valid LoadTest"
}

# hold NAME CONNECTIONS DURATION PING_INTERVAL PING_TIMEOUT: runs the hold and sets rss_open and rss_ping
# (server VmRSS in KiB once all are open, and once the first ping round is echoed).
hold() {
    local name=$1 n=$2 client_pid mport opened failed received active deadline
    write_spec "$@"
    take_ports
    mport=127.0.0.1:$server_port # wsload's own metrics: any free port of the pair
    RUST_LOG=warn "$wsload_bin" run "$out/$name.yaml" --out "$out/$name.json" \
        --metrics-listen "$mport" >"$out/$name.log" 2>&1 &
    client_pid=$!
    started_pids+=("$client_pid")
    deadline=$((SECONDS + 120))
    while ((SECONDS < deadline)) && kill -0 "$client_pid" 2>/dev/null; do
        opened=$(metric "$mport" wsload_connections_opened_total)
        failed=$(metric "$mport" wsload_connections_failed_total)
        [[ -n $opened && -n $failed ]] && ((opened + failed >= n)) && break
        sleep 0.5
    done
    sleep 2
    active=$(metric "$server_metrics" wsload_server_connections_active)
    ((${active:-0} == n)) || die "$name: the server holds ${active:-0} of $n connections ($(tail -3 "$out/$name.log"))"
    rss_open=$(rss_kib "$server_pid")
    log "$name: $n open, server VmRSS $rss_open KiB"
    rss_ping=
    deadline=$((SECONDS + 60))
    while ((SECONDS < deadline)) && kill -0 "$client_pid" 2>/dev/null; do
        received=$(metric "$mport" wsload_messages_received_total)
        if [[ -n $received ]] && ((received >= n)); then
            sleep 1
            rss_ping=$(rss_kib "$server_pid")
            break
        fi
        sleep 0.5
    done
    [[ -n $rss_ping ]] || die "$name: the first ping round was not echoed within 60 s"
    log "$name: first ping round echoed, server VmRSS $rss_ping KiB"
    stop_pid "$client_pid" 30
    # The next hold starts from a server that has seen every connection of this one go.
    WAIT_INTERVAL=0.5 wait_until 60 server_empty || log "$name: connections still open on the server"
}

server_empty() { [[ $(metric "$server_metrics" wsload_server_connections_active) == 0 ]]; }

kib_per_conn() { awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN { printf "%.2f\n", (a - b) / (n - 1) }'; }

log "baseline: 1 connection on $server_addr"
hold baseline 1 8s 2s 1s
base_open=$rss_open base_ping=$rss_ping
log "hold: $conns idle connections, ping every 30 s"
hold hold "$conns" 40s 30s 10s
stop_server

open_per_conn=$(kib_per_conn "$rss_open" "$base_open" "$conns")
ping_per_conn=$(kib_per_conn "$rss_ping" "$base_ping" "$conns")
printf '%s\n' "connections=$conns" "server_args=${server_args[*]}" \
    "server_rss_baseline_kib=$base_ping" "server_rss_open_kib=$rss_open" \
    "server_rss_after_ping_kib=$rss_ping" "server_kib_per_conn_open=$open_per_conn" \
    "server_kib_per_conn=$ping_per_conn"
