#!/usr/bin/env bash
# usage: bench/scale/run.sh [N | LOADTEST.yaml]
#
# Holds N WebSocket connections on this machine with `wsload run` (default: bench/scale/
# hold-100k.yaml: 100,000 connections, sustainedHold, 6 shard processes, 6 server replicas on
# one port) and prints what a reviewer asks of such a claim: connections held, survival, time
# to open all, ping p50/p99, and the RSS per connection of the clients (the shard processes)
# and the servers (the replicas), each measured as the increase over the same processes just
# before the load. The last line is the summary:
#   held=N survival=P% open_s=S client_kib_per_conn=C server_kib_per_conn=V
#
# With a number N, the LoadTest is hold-100k.yaml at N connections, with as many shards and
# server replicas as this machine's open-file limit asks for (each process may open `ulimit
# -Hn` files; a share of 85% of it per process leaves room for the runtime and the sockets a
# closing connection still holds), and their connect.batchSize sharing 2,000 handshakes in
# flight, written to the result directory as hold-N.yaml.
#
# Environment (all optional):
#   WSLOAD_BIN, WSLOAD_SERVER_BIN  prebuilt binaries; unset: `cargo build --release`
#   WSLOAD_BENCH_OUT               result directory (default: target/bench-scale)
#   WSLOAD_BENCH_PING_S            with N: seconds between a connection's pings (default 10)
# RSS is read once every connection is open and a full ping round has passed, so that the
# figure is the connections' live memory, not what the handshakes left behind. The CPU time
# the clients and the servers spent opening (user + system, from the release until every
# shard opened its share, keep-alives of the connections already open included) is given per
# connection opened, in CPU-microseconds.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$here/../.." && pwd)
LOG_NAME=bench-scale
# shellcheck source=bench/lib.sh
source "$here/../lib.sh"

(($# <= 1)) || usage
out=${WSLOAD_BENCH_OUT:-$repo_root/target/bench-scale}
mkdir -p "$out"
spec=${1:-$here/hold-100k.yaml}
if [[ $spec =~ ^[1-9][0-9]*$ ]]; then
    n=$spec
    per_process=$(($(ulimit -Hn) * 85 / 100))
    procs=$(((n + per_process - 1) / per_process))
    spec=$out/hold-$n.yaml
    # connect.batchSize is each shard's: in flight at once are shards x batchSize handshakes,
    # and each waits in flight / open rate (Little's law). With dozens of processes 2 cores
    # open ~1,000 a second: 2,000 in flight keep a handshake ~2 s from the server's 10 s
    # timeout (hold-100k.yaml's 6 x 1,000 at 18 processes left 27 of 300,000 past it).
    batch=$(((2000 + procs - 1) / procs))
    # A ping every 10 s per connection, as hold-100k.yaml, unless WSLOAD_BENCH_PING_S says
    # otherwise: at 300,000 that is 30,000 round trips a second, more than 2 cores answer
    # beside everything else (pings queue: p50 4 s); below the server's 60 s idle timeout.
    ping_s=${WSLOAD_BENCH_PING_S:-10}
    if ! [[ $ping_s =~ ^[1-9][0-9]*$ ]] || ((ping_s >= 60)); then
        die "WSLOAD_BENCH_PING_S must be whole seconds under the server's 60 s idle timeout"
    fi
    sed -e "s/^  connections: \[100000\]$/  connections: [$n]/" \
        -e "s/batchSize: 1000,/batchSize: $batch,/" \
        -e "s/ping: {interval: 10s, timeout: 10s}/ping: {interval: ${ping_s}s, timeout: 10s}/" \
        -e "s/^  shards: 6$/  shards: $procs/" \
        -e "s/server: {profile: echo, replicas: 6}/server: {profile: echo, replicas: $procs}/" \
        -e "s/^  name: scale-hold$/  name: scale-hold-$n/" \
        "$here/hold-100k.yaml" >"$spec"
    if ! grep -q "connections: \[$n\]" "$spec" || ! grep -q "shards: $procs$" "$spec" ||
        ! grep -q "replicas: $procs}" "$spec" || ! grep -q "interval: ${ping_s}s" "$spec"; then
        die "bench/scale/hold-100k.yaml no longer has the lines this script rewrites (connections, shards, replicas, ping)"
    fi
    log "$n connections: $procs shard processes and $procs server replicas ($per_process connections at most each: ulimit -Hn $(ulimit -Hn)), connect.batchSize $batch; LoadTest $spec"
fi
[[ -f $spec ]] || die "no LoadTest file $spec"

if [[ -z ${WSLOAD_BIN:-} || -z ${WSLOAD_SERVER_BIN:-} ]]; then
    step "building wsload and wsload-server (release)" >&2
    (cd "$repo_root" && cargo build --release --quiet -p wsload -p wsload-server) >&2
    WSLOAD_BIN=$repo_root/target/release/wsload
    WSLOAD_SERVER_BIN=$repo_root/target/release/wsload-server
fi
export WSLOAD_SERVER_BIN

log "open-file limit per process: $(ulimit -Sn) soft, $(ulimit -Hn) hard; ephemeral ports $(tr '\t' - </proc/sys/net/ipv4/ip_local_port_range); somaxconn $(cat /proc/sys/net/core/somaxconn)"

# The processes of the run: its shards and its server replicas, children of `wsload run`.
children() { pgrep -P "$run_pid" -f "$1" || true; }
# User + system CPU time of processes "$@", in clock ticks.
sum_ticks() {
    local pid total=0 t
    for pid in "$@"; do
        t=$(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || true)
        total=$((total + ${t:-0}))
    done
    echo "$total"
}
sum_rss() {
    local pid total=0 kib
    for pid in "$@"; do
        kib=$(rss_kib "$pid")
        total=$((total + ${kib:-0}))
    done
    echo "$total"
}
# Connections the replicas hold now, summed over their /metrics.
server_connections() {
    local url total=0 n
    for url in "${metrics_urls[@]}"; do
        n=$(curl -fsS --max-time 5 "$url" 2>/dev/null |
            awk '$1 ~ /^wsload_server_connections_active/ { s += $2 } END { printf "%d", s }')
        total=$((total + ${n:-0}))
    done
    echo "$total"
}

stderr_log=$out/run.stderr
result=$out/result.json
rm -f "$result"
"$WSLOAD_BIN" run "$spec" --out "$result" >"$out/report.md" 2>"$stderr_log" &
run_pid=$!
started_pids+=("$run_pid")

# Before the load: the processes ready and idle (the release line is printed as the shards
# are told the start instant, 250 ms ahead of it).
# With shards: 1 the test runs in `wsload run` itself, which says nothing before its load but
# that its server is up: the load follows at once, so the base is read a little into it.
started='released at'
(($(awk '/^  shards:/ { print $2; exit }' "$spec") > 1)) || started='^managed wsload-server on'
wait_until 120 --pid "$run_pid" grep -qE "$started" "$stderr_log" ||
    die "the run did not start: $(tail -5 "$stderr_log")"
mapfile -t shard_pids < <(children 'wsload shard')
# shards: 1 runs the test in `wsload run`'s own process.
((${#shard_pids[@]} > 0)) || shard_pids=("$run_pid")
mapfile -t server_pids < <(children wsload-server)
client_base=$(sum_rss "${shard_pids[@]}")
server_base=$(sum_rss "${server_pids[@]}")
client_ticks=$(sum_ticks "${shard_pids[@]}")
server_ticks=$(sum_ticks "${server_pids[@]}")
mapfile -t metrics_urls < <(managed_metrics_urls "$stderr_log")
log "${#shard_pids[@]} shards (RSS ${client_base} KiB), ${#server_pids[@]} server replicas (RSS ${server_base} KiB)"

want=$(awk '/^  connections:/ { gsub(/[^0-9]/, ""); print; exit }' "$spec")
open_started=$SECONDS
# Twice what ~1,000 connections a second (many processes on 2 cores) takes, 5 minutes at least.
open_limit=$((want / 500 > 300 ? want / 500 : 300))
# The servers' count every second, and the processes' RSS when it is highest, until every
# connection is open, or every shard opened its share (the conductor says so: some failed),
# after which the shards hold them all for the hold's duration from one instant.
peak=0 client_held=0 server_held=0 opened_all=
while kill -0 "$run_pid" 2>/dev/null && ((SECONDS - open_started < open_limit)); do
    now=$(server_connections)
    if ((now > peak)); then
        peak=$now peak_s=$((SECONDS - open_started))
        client_held=$(sum_rss "${shard_pids[@]}")
        server_held=$(sum_rss "${server_pids[@]}")
    fi
    if ((now >= want)) || grep -q 'every shard opened its share' "$stderr_log"; then
        opened_all=1
        break
    fi
    sleep 1
done
if [[ -n $opened_all ]]; then
    open_s=$((SECONDS - open_started))
    client_cpu=$(($(sum_ticks "${shard_pids[@]}") - client_ticks))
    server_cpu=$(($(sum_ticks "${server_pids[@]}") - server_ticks))
    log "all open after ${open_s} s (the servers held $now): CPU spent opening ${client_cpu} ticks in the clients, ${server_cpu} in the servers"
    # A full ping round on every connection, then the memory the held connections take.
    ping_every=$(sed -n 's/.*interval: *\([0-9]*\)s.*/\1/p' "$spec" | head -1)
    # Within the first half of the hold, though: the connections close at its end.
    hold_s=$(sed -n 's/^  duration: *\([0-9]*\)s$/\1/p' "$spec" | head -1)
    round=$((${ping_every:-10} + 2))
    half=$((${hold_s:-60} / 2))
    sleep "$((round < half ? round : half))"
    client_held=$(sum_rss "${shard_pids[@]}")
    server_held=$(sum_rss "${server_pids[@]}")
    held_now=$(server_connections)
else
    log "the servers never held all $want at once: at most $peak, ${peak_s:-?} s after the release (RSS read then)"
    held_now=$peak
fi
log "held $held_now: clients RSS ${client_held} KiB, servers RSS ${server_held} KiB"

rc=0
wait "$run_pid" || rc=$?
forget_pid "$run_pid"
[[ -s $result ]] || die "no result (exit $rc): $(tail -5 "$stderr_log")"
cat "$out/report.md" >&2

python3 - "$result" "$client_base" "$client_held" "$server_base" "$server_held" "$held_now" \
    "${client_cpu:--1}" "${server_cpu:--1}" "$(getconf CLK_TCK)" <<'PY'
import json, sys
path, cb, ch, sb, sh, held_now, ccpu, scpu, tck = sys.argv[1], *map(int, sys.argv[2:])
r = json.load(open(path))
c = r["cells"][0]
counts = c["counts"]
connected = counts["connected"]
survived = counts["survived"]
f = c["figures"]
per = lambda before, after: (after - before) / max(held_now, 1)
print(f"connections held: {survived} of {connected} opened (servers held {held_now} when RSS was read)", file=sys.stderr)
print(f"time to open all: {c['connectSecs']:.1f} s", file=sys.stderr)
print(f"ping p50 {f['rtt']['p50']*1000:.2f} ms, p99 {f['rtt']['p99']*1000:.2f} ms", file=sys.stderr)
print(f"client RSS per connection {per(cb, ch):.2f} KiB ({ch - cb} KiB over {held_now}); server {per(sb, sh):.2f} KiB ({sh - sb} KiB)", file=sys.stderr)
cpu_us = lambda ticks: ticks * 1e6 / tck / max(connected, 1)
if ccpu >= 0:
    print(f"CPU per connection opened: clients {cpu_us(ccpu):.0f} us, servers {cpu_us(scpu):.0f} us", file=sys.stderr)
cpu = f" client_cpu_us_per_conn={cpu_us(ccpu):.0f} server_cpu_us_per_conn={cpu_us(scpu):.0f}" if ccpu >= 0 else ""
print(f"held={survived} survival={f['survival']*100:.2f}% open_s={c['connectSecs']:.1f} client_kib_per_conn={per(cb, ch):.2f} server_kib_per_conn={per(sb, sh):.2f}{cpu}")
PY
exit "$rc"
