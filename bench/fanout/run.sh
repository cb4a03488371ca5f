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
# and for wsload-server its own delivered/owed counts over the cell. Each run's result JSON,
# LoadTest and output are in the result directory.
#
# Environment (all optional):
#   WSLOAD_BIN, WSLOAD_SERVER_BIN  prebuilt binaries; unset: `cargo build --release`
#   WSLOAD_BENCH_OUT               result directory (default: target/bench-fanout)
#   WSLOAD_FANOUT_SERVERS          servers to run, in order (default: "wsload-server socketio")
#   WSLOAD_FANOUT_TIERS            subscriber tiers (default: "10 100 1000 10000 20000")
#   WSLOAD_FANOUT_TOPICS           topics (default: 10; each subscriber takes one)
#   WSLOAD_FANOUT_RATE             the fixed publish rate, messages/s over all topics (default: 100)
#   WSLOAD_FANOUT_DURATION         measured seconds of each run (default: 10)
#   WSLOAD_FANOUT_SATURATION       0: the fixed rate only (default: 1)
#   WSLOAD_FANOUT_STEPS            most doublings of the saturation search (default: 8)
#   SATURATION_P99_X               see above (default: 10)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$here/../.." && pwd)
LOG_NAME=bench-fanout
# shellcheck source=bench/lib.sh
source "$here/../lib.sh"

out=${WSLOAD_BENCH_OUT:-$repo_root/target/bench-fanout}
servers=${WSLOAD_FANOUT_SERVERS:-wsload-server socketio}
tiers=${WSLOAD_FANOUT_TIERS:-10 100 1000 10000 20000}
topics=${WSLOAD_FANOUT_TOPICS:-10}
fixed_rate=${WSLOAD_FANOUT_RATE:-100}
duration=${WSLOAD_FANOUT_DURATION:-10}
saturation=${WSLOAD_FANOUT_SATURATION:-1}
steps=${WSLOAD_FANOUT_STEPS:-8}
p99_x=${SATURATION_P99_X:-10}
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
    name=$server-$tier-$rate
    spec=$out/runs/$name.yaml
    result=$out/runs/$name.json
    # Each shard: its share of subscribers and of the publishers (one per topic).
    shards=$(processes_for $((tier + topics)))
    case $server in
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
        # rates are over.
        printf '  duration: %ss\n  warmup: 0s\n' "$duration"
        # Across shards the measured phase begins at the release plus connect.timeout (every
        # subscriber subscribed by then): a tier that takes long to open needs the room.
        ((shards > 1)) && printf '  connect: {timeout: %ss}\n' "$((10 + tier / 200))"
        printf '  fanout: {topics: %s, publisher: %s, drain: 2s}\n' "$topics" "$publisher"
        printf '  rate: {messagesPerSecond: %s}\n  message: {size: 64}\n' "$rate"
        [[ $server == socketio ]] && sed -n '/^  conversation:/,/^  thresholds:/p' \
            "$repo_root/examples/socketio-fanout.yaml" | sed '$d'
    } >"$spec"
    rm -f "$result"
    log "$name: $tier subscribers over $topics topics at $rate publishes/s ($shards shard(s), publisher $publisher${replicas:+, $replicas server process(es)})"
    timeout $((duration + 300)) "$WSLOAD_BIN" run "$spec" --out "$result" \
        >"$out/runs/$name.out" 2>"$out/runs/$name.err" || true
    [[ -s $result ]] || {
        log "$name: no result: $(tail -3 "$out/runs/$name.err")"
        return 1
    }
    python3 "$here/summary.py" "$result" | python3 -c '
import json, sys
row = json.load(sys.stdin)
row.update(target=sys.argv[1], rate=float(sys.argv[2]), shards=int(sys.argv[3]),
           replicas=int(sys.argv[4]), publisher=sys.argv[5], kind=sys.argv[6])
print(json.dumps(row))' "$server" "$rate" "$shards" "$replicas" "$publisher" "${kind:-fixed}" |
        tee -a "$rows"
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
        tier "$server" "$n"
        [[ $server == socketio ]] && stop_socketio
    done
done

python3 - "$rows" "$topics" "$duration" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
topics, duration = sys.argv[2], sys.argv[3]
ms = lambda s: "-" if s is None else f"{s*1000:.2f}"
print(f"\nfanout: {topics} topics, one per subscriber, {duration} s measured per run, 64 B payloads\n")
print("| server | subscribers | run | publishes/s | deliveries/s | completeness | gaps | p50 ms | p99 ms | p99.9 ms | server delivered/owed | shards x servers |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if r.get("kind") == "step":
        continue
    c = r["completeness"]
    s = r.get("server") or {}
    owed = f"{s.get('delivered', 0)}/{s.get('fanout', 0)}" if s else "-"
    pub = " (ticker)" if r.get("publisher") == "server" else (" (cluster)" if r["target"] == "socketio" and r["replicas"] > 1 else "")
    print(f"| {r['target']} | {r['subscribers']} | {r['kind']}{pub} @ {r['rate']:.0f}/s | {r['publishes_per_sec']:.0f} | "
          f"{r['deliveries_per_sec']:.0f} | {'-' if c is None else f'{c*100:.3f}%'} | {r['gaps']} | "
          f"{ms(r['p50'])} | {ms(r['p99'])} | {ms(r['p999'])} | {owed} | {r['shards']} x {r['replicas']} |")
PY
