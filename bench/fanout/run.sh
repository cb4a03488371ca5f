#!/usr/bin/env bash
# usage: bench/fanout/run.sh
#
# The fanout scenario (issue 24) on this machine: subscriber tiers (default 10, 100, 1,000,
# 10,000, 20,000) over TOPICS topics, each tier at a fixed publish rate and at saturation,
# against two servers in turn:
#   wsload-server  its `pubsub` profile, managed by `wsload run` (wsload's publishers, one per
#                  topic, open loop); a tier one server process cannot hold (its subscribers
#                  and publishers past the open-file limit) runs on replicas sharing the port,
#                  each publishing with its own ticker (topics are per process), marked so
#   socketio       the Socket.IO rooms server of scripts/test-servers/: one Node process, or
#                  for a tier past one process's open-file limit a Node cluster of as many
#                  workers as it needs, rooms spanning them through @socket.io/cluster-adapter
#                  (as Socket.IO applications scale on one machine), marked so
#   broadcast      wsload-server's `broadcast` profile at full speed, started here (a fresh
#                  process per tier): BROADCAST_BATCH messages every millisecond to every
#                  connection, no subscribe message, each stamped `"ts"` in float milliseconds
#                  (`--broadcast-timestamp ms`); read with `publisher: server`. One run per tier
#                  (the server sets the pace: no fixed rate, no saturation search); 1 s warm-up.
# Load-generator shards are derived from the open-file limit per process (`ulimit -Hn`, the
# most a shard can raise its own to): each holds its share of subscribers and publishers.
#
# Saturation: from the fixed rate, the publish rate doubles each step until a run's
# completeness falls below 99.9% or its p99 rises above SATURATION_P99_X times the fixed
# rate's p99 (and above 50 ms): the saturation row is the last rate that met both, and the
# rate that did not is named. At small tiers that is the publish path's limit (deliveries/s
# = publishes/s x subscribers per topic), not the fan-out's.
#
# Prints a markdown table on stdout (a row per server x tier x rate): publishes/s,
# deliveries/s, completeness, gaps, latency p50/p99/p99.9 from each publish's intended instant,
# for wsload-server its own delivered/owed counts over the cell, and the load generator's CPU
# over the measured window (cpu.py: `wsload run` and its shards, a managed server not
# included) with the deliveries it read per CPU-second; then, for `broadcast`, a table of
# what the subscribers were owed and read, and the server's CPU and its sent and skipped
# counts. Each run's result JSON, LoadTest, output and CPU samples are in the result directory.
#
# Run time: about (DURATION + 15 s) per fixed-rate run and per saturation step of each
# server x tier (more at 10,000+ subscribers, which take a while to connect), plus one run per
# tier of `broadcast`: the default list's ~60 runs take ~30 minutes at the default duration.
#
# Environment (all optional):
#   WSLOAD_BIN, WSLOAD_SERVER_BIN  prebuilt binaries; unset: `cargo build --release`
#   WSLOAD_BENCH_OUT               result directory (default: target/bench-fanout)
#   WSLOAD_FANOUT_SERVERS          servers to run, in order (default: "wsload-server socketio
#                                  broadcast")
#   WSLOAD_FANOUT_TIERS            subscriber tiers (default: "10 100 1000 10000 20000")
#   WSLOAD_FANOUT_TOPICS           topics (default: 10; each subscriber takes one)
#   WSLOAD_FANOUT_RATE             the fixed publish rate, messages/s over all topics (default: 100)
#   WSLOAD_FANOUT_DURATION         measured seconds of each run (default: 10)
#   WSLOAD_FANOUT_SATURATION       0: the fixed rate only (default: 1)
#   WSLOAD_FANOUT_STEPS            most doublings of the saturation search (default: 8)
#   SATURATION_P99_X               see above (default: 10)
#   WSLOAD_FANOUT_BROADCAST_BATCH  `broadcast`: messages per millisecond (default: 100, so
#                                  100,000 a second: more than a load generator on these cores
#                                  reads from 10 subscribers)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$here/../.." && pwd)
LOG_NAME=bench-fanout
# shellcheck source=bench/lib.sh
source "$here/../lib.sh"

out=${WSLOAD_BENCH_OUT:-$repo_root/target/bench-fanout}
servers=${WSLOAD_FANOUT_SERVERS:-wsload-server socketio broadcast}
tiers=${WSLOAD_FANOUT_TIERS:-10 100 1000 10000 20000}
topics=${WSLOAD_FANOUT_TOPICS:-10}
fixed_rate=${WSLOAD_FANOUT_RATE:-100}
duration=${WSLOAD_FANOUT_DURATION:-10}
saturation=${WSLOAD_FANOUT_SATURATION:-1}
steps=${WSLOAD_FANOUT_STEPS:-8}
p99_x=${SATURATION_P99_X:-10}
broadcast_batch=${WSLOAD_FANOUT_BROADCAST_BATCH:-100}
# Where take_ports (bench/lib.sh) looks for the broadcast server's ports.
next_port=23100
mkdir -p "$out/runs"
rows=$out/rows.jsonl
: >"$rows"

for tool in python3 curl timeout; do
    command -v "$tool" >/dev/null || die "$tool is required"
done
if [[ -z ${WSLOAD_BIN:-} || -z ${WSLOAD_SERVER_BIN:-} ]]; then
    step "building wsload and wsload-server (release)" >&2
    (cd "$repo_root" && cargo build --release --quiet -p wsload -p wsload-server) >&2
    WSLOAD_BIN=$repo_root/target/release/wsload
    WSLOAD_SERVER_BIN=$repo_root/target/release/wsload-server
fi
export WSLOAD_SERVER_BIN

# Files a process may open: what a shard raises its own limit to. Each process keeps this
# many for its listener, metrics, logs and the like.
files=$(ulimit -Hn)
[[ $files == unlimited ]] && files=1048576
reserve=256
per_process=$((files - reserve))
log "open files per process: $files (hard limit); ${per_process} sockets each after a reserve of $reserve"

# Processes of PER_PROCESS sockets that N sockets need.
processes_for() { echo $((($1 + per_process - 1) / per_process)); }

# run_one SERVER TIER RATE: one `wsload run`; prints its row (summary.py's JSON plus the
# run's settings) and appends it to $rows. Fails (status 1) when the run left no result.
run_one() {
    local server=$1 tier=$2 rate=$3 name spec result shards replicas=1 publisher=wsload target
    local warmup=0 run_topics=$topics server_pid_here=0 sent lagged pid sampler
    name=$server-$tier-$rate
    spec=$out/runs/$name.yaml
    result=$out/runs/$name.json
    # Each shard: its share of subscribers and of the publishers (one per topic).
    shards=$(processes_for $((tier + topics)))
    case $server in
    broadcast)
        # One stream to every connection; no publisher connections.
        run_topics=1
        shards=$(processes_for "$tier")
        publisher=server
        warmup=1
        server_pid_here=$server_pid
        target="target: {url: 'ws://127.0.0.1:$server_port/'}"
        ;;
    wsload-server)
        replicas=$(processes_for $((tier + topics)))
        if ((replicas > 1)); then
            # Topics are per server process: each replica's ticker publishes to its own
            # subscribers, at the same rate per topic.
            publisher=server
        fi
        target="target: {server: {profile: pubsub, replicas: $replicas}}"
        ;;
    socketio)
        replicas=$socketio_workers
        target="target: {url: 'ws://127.0.0.1:$socketio_port/socket.io/?EIO=4&transport=websocket'}"
        ;;
    esac
    {
        printf 'apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata:\n  name: %s\nspec:\n' "$name"
        printf '  %s\n' "$target"
        printf '  scenario: fanout\n  connections: [%s]\n  shards: %s\n' "$tier" "$shards"
        # No warm-up: the publish window is then the measured one (measuredSecs), which the
        # rates are over. The broadcast publishes all along: a second for the subscribers'
        # first reads to settle.
        printf '  duration: %ss\n  warmup: %ss\n' "$duration" "$warmup"
        # Across shards the measured phase begins at the release plus connect.timeout (every
        # subscriber subscribed by then): a tier that takes long to open needs the room.
        ((shards > 1)) && printf '  connect: {timeout: %ss}\n' "$((10 + tier / 200))"
        printf '  fanout: {topics: %s, publisher: %s, drain: 2s}\n' "$run_topics" "$publisher"
        if [[ $server == broadcast ]]; then
            # No subscribe step: every connection gets every message from its open.
            printf '  conversation:\n    delivery:\n      sequence: {json: seq}\n'
            printf '      publishedAt: {json: ts}\n      publishedAtUnit: ms\n'
        else
            printf '  rate: {messagesPerSecond: %s}\n  message: {size: 64}\n' "$rate"
        fi
        [[ $server == socketio ]] && sed -n '/^  conversation:/,/^  thresholds:/p' \
            "$repo_root/examples/socketio-fanout.yaml" | sed '$d'
    } >"$spec"
    rm -f "$result"
    log "$name: $tier subscribers over $topics topics at $rate publishes/s ($shards shard(s), publisher $publisher${replicas:+, $replicas server process(es)})"
    [[ $server == socketio ]] && server_pid_here=$socketio_pid
    timeout $((duration + 300)) "$WSLOAD_BIN" run "$spec" --out "$result" \
        >"$out/runs/$name.out" 2>"$out/runs/$name.err" &
    pid=$!
    # The CPU of the load generator (and of the server) through the run, for its window's.
    python3 "$here/cpu.py" sample "$out/runs/$name.cpu" "$pid" "$server_pid_here" &
    sampler=$!
    wait "$pid" || true
    wait "$sampler" || true
    [[ -s $result ]] || {
        log "$name: no result: $(tail -3 "$out/runs/$name.err")"
        return 1
    }
    sent='' lagged=''
    if [[ $server == broadcast ]]; then
        sent=$(broadcast_metric 'wsload_server_messages_sent_total{profile="broadcast",format="text"}')
        lagged=$(broadcast_metric 'wsload_server_broadcast_lagged_total')
    fi
    python3 "$here/summary.py" "$result" | python3 -c '
import json, subprocess, sys
row = json.load(sys.stdin)
row.update(target=sys.argv[1], rate=float(sys.argv[2]), shards=int(sys.argv[3]),
           replicas=int(sys.argv[4]), publisher=sys.argv[5], kind=sys.argv[6])
start = row["started"] + float(sys.argv[8])
cpu = json.loads(subprocess.check_output(["python3", sys.argv[9], "window", sys.argv[7],
                                          str(start), str(start + row["measured_secs"])]))
row.update(client_cpu=cpu["client"], server_cpu=cpu["server"],
           server_sent=float(sys.argv[10]) if sys.argv[10] else None,
           server_lagged=float(sys.argv[11]) if sys.argv[11] else None)
print(json.dumps(row))' "$server" "$rate" "$shards" "$replicas" "$publisher" "${kind:-fixed}" \
        "$out/runs/$name.cpu" "$warmup" "$here/cpu.py" "$sent" "$lagged" |
        tee -a "$rows"
}

# broadcast_metric SERIES: its value on the broadcast server's /metrics (empty if absent).
broadcast_metric() {
    curl -s "http://127.0.0.1:$metrics_port/metrics" |
        awk -v s="$1" 'index($0, s " ") == 1 { print $2 }'
}

# start_broadcast: a fresh wsload-server broadcasting at full speed (no tick or count left
# from the last tier). No server pings and no idle timeout: it sends only the feed.
start_broadcast() {
    local rc=0
    take_ports
    RUST_LOG=warn "$WSLOAD_SERVER_BIN" --profile broadcast \
        --listen "127.0.0.1:$server_port" --metrics-listen "127.0.0.1:$metrics_port" \
        --broadcast-interval 1ms --broadcast-batch "$broadcast_batch" \
        --broadcast-timestamp ms --broadcast-payload-size 64 \
        --ping-interval 0 --idle-timeout 0 --drain-timeout 2s >"$out/broadcast.err" 2>&1 &
    server_pid=$!
    started_pids+=("$server_pid")
    WAIT_INTERVAL=0.1 wait_until 10 --pid "$server_pid" listening "$server_port" || rc=$?
    ((rc == 0)) || die "the broadcast server did not start: $(tail -3 "$out/broadcast.err")"
}

# saturated ROW FIXED_P99: whether a run fell short (completeness, or latency climbing).
saturated() {
    python3 -c '
import json, sys
r, base, x = json.loads(sys.argv[1]), float(sys.argv[2] or 0), float(sys.argv[3])
c = r["completeness"]
bad = c is None or c < 0.999 or r["failed"] > 0 or (r["p99"] or 0) > max(x * base, 0.05)
sys.exit(0 if bad else 1)' "$1" "$2" "$p99_x"
}

# tier SERVER TIER: the fixed-rate run, then the saturation search.
tier() {
    local server=$1 n=$2 row base rate last="" i saturated_at=""
    if [[ $server == broadcast ]]; then
        # Full speed: the server's pace, one run.
        kind="full speed"
        run_one "$server" "$n" "$((broadcast_batch * 1000))" >/dev/null || true
        return 0
    fi
    kind=fixed
    row=$(run_one "$server" "$n" "$fixed_rate" | tail -1) || return 0
    ((saturation)) || return 0
    base=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["p99"] or 0)' "$row")
    rate=$fixed_rate
    kind=step
    for ((i = 0; i < steps; i++)); do
        rate=$((rate * 2))
        row=$(run_one "$server" "$n" "$rate" | tail -1) || break
        if saturated "$row" "$base"; then
            log "$server $n: saturated at $rate publishes/s"
            python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["kind"]="past saturation"; print(json.dumps(r))' "$row" >>"$rows"
            saturated_at=$rate
            break
        fi
        last=$row
    done
    # The last rate that held: the saturation point when a higher one fell short, else only
    # the highest tried.
    if [[ -n $last ]]; then
        python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["kind"]=sys.argv[2]; print(json.dumps(r))' \
            "$last" "$([[ -n $saturated_at ]] && echo saturation || echo "highest tried, held")" >>"$rows"
    fi
}

socketio_pid=
socketio_port=
socketio_workers=1
# start_socketio WORKERS: a fresh server (no rooms or sockets left from the last tier).
start_socketio() {
    local line
    socketio_workers=$1
    coproc SIO { exec "$repo_root/scripts/test-servers/run.sh" socketio --tick-ms 0 --workers "$socketio_workers" 2>"$out/socketio.err"; }
    socketio_pid=$SIO_PID
    started_pids+=("$socketio_pid")
    read -r -t 180 line <&"${SIO[0]}" || die "the Socket.IO server did not start: $(tail -3 "$out/socketio.err")"
    socketio_port=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["port"])' "$line")
}
stop_socketio() {
    [[ -n $socketio_pid ]] || return 0
    stop_pid "$socketio_pid"
    socketio_pid=
}

for server in $servers; do
    for n in $tiers; do
        [[ $server == socketio ]] && start_socketio "$(processes_for $((n + topics)))"
        [[ $server == broadcast ]] && start_broadcast
        tier "$server" "$n"
        [[ $server == socketio ]] && stop_socketio
        [[ $server == broadcast ]] && stop_server
    done
done

python3 - "$rows" "$topics" "$duration" "$broadcast_batch" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
topics, duration, batch = sys.argv[2], sys.argv[3], int(sys.argv[4])
ms = lambda s: "-" if s is None else f"{s*1000:.2f}"
pct = lambda c: "-" if c is None else f"{c*100:.3f}%"
k = lambda v: "-" if v is None else f"{v/1000:.1f}K"


def cpu(r):
    """The load generator's cores over the window, and what it read per CPU-second."""
    c, secs = r.get("client_cpu"), r.get("measured_secs") or 0
    read = (r.get("read_per_sec") or r["deliveries_per_sec"]) * secs
    if not c or not secs:
        return "-", "-"
    return f"{c/secs:.2f}", k(read / c)


pubsub = [r for r in rows if r["target"] != "broadcast" and r.get("kind") != "step"]
if pubsub:
    print(f"\nfanout: {topics} topics, one per subscriber, {duration} s measured per run, 64 B payloads\n")
    print("| server | subscribers | run | publishes/s | deliveries/s | completeness | gaps | p50 ms | p99 ms | p99.9 ms | server delivered/owed | shards x servers | client CPU cores | read per client CPU-s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in pubsub:
    s = r.get("server") or {}
    owed = f"{s.get('delivered', 0)}/{s.get('fanout', 0)}" if s else "-"
    pub = " (ticker)" if r.get("publisher") == "server" else (" (cluster)" if r["target"] == "socketio" and r["replicas"] > 1 else "")
    cores, per_cpu = cpu(r)
    print(f"| {r['target']} | {r['subscribers']} | {r['kind']}{pub} @ {r['rate']:.0f}/s | {r['publishes_per_sec']:.0f} | "
          f"{r['deliveries_per_sec']:.0f} | {pct(r['completeness'])} | {r['gaps']} | "
          f"{ms(r['p50'])} | {ms(r['p99'])} | {ms(r['p999'])} | {owed} | {r['shards']} x {r['replicas']} | {cores} | {per_cpu} |")

broadcast = [r for r in rows if r["target"] == "broadcast"]
if broadcast:
    print(f"\nbroadcast: wsload-server at full speed ({batch} messages a millisecond to every connection, "
          f"no subscribe), {duration} s measured per run after 1 s of warm-up\n")
    print("| subscribers | owed/s | read/s | deliveries/s | completeness | gaps | behind | p50 ms | p99 ms | client CPU cores | deliveries per client CPU-s | server CPU cores | server sent / skipped | measured |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in broadcast:
    cores, per_cpu = cpu(r)
    secs = r.get("measured_secs") or 0
    srv = "-" if not r.get("server_cpu") or not secs else f"{r['server_cpu']/secs:.2f}"
    sent = "-" if r.get("server_sent") is None else f"{r['server_sent']/1e6:.2f}M / {(r.get('server_lagged') or 0)/1e6:.2f}M"
    measured = "no (exit 4)" if r.get("unmeasured") else "yes"
    print(f"| {r['subscribers']} | {k(r.get('owed_per_sec'))} | {k(r.get('read_per_sec'))} | {k(r['deliveries_per_sec'])} | "
          f"{pct(r['completeness'])} | {r['gaps']} | {r.get('behind', 0)} | {ms(r['p50'])} | {ms(r['p99'])} | "
          f"{cores} | {per_cpu} | {srv} | {sent} | {measured} |")
PY
