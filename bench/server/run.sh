#!/usr/bin/env bash
# Benchmarks wsload-server (echo profile) against a Go gorilla/websocket echo server and a
# Node.js `ws` echo server, one server at a time, with the same client and settings:
#   - pipelined echo throughput at 64 B and 1 KiB over 100 connections, and the server's CPU
#     seconds in the measured window (utime+stime from /proc/PID/stat) -> messages per server
#     CPU-second, the figure of merit because client and server share this machine's cores;
#   - server RSS (VmRSS) on a fresh process before and after opening N idle connections -> KiB
#     per connection, at 10,000 and 19,000 (the per-process open-file cap here is 20,000).
# Prints a markdown table and the wsload-server / best-peer ratio. Loopback only.
#
# Environment (all optional):
#   WSLOAD_BENCH_SERVERS      servers to run, in order (default: "wsload go node")
#   WSLOAD_BENCH_SIZES        payload sizes in bytes (default: "64 1024")
#   WSLOAD_BENCH_CONNECTIONS  throughput connections (default: 100)
#   WSLOAD_BENCH_WINDOW       outstanding messages per connection (default: 64)
#   WSLOAD_BENCH_WARMUP       seconds before each measured window (default: 2)
#   WSLOAD_BENCH_DURATION     seconds of each measured window (default: 10)
#   WSLOAD_BENCH_IDLE         idle connection counts (default: "10000 19000"; empty: skip)
#   WSLOAD_BENCH_PORT         first loopback port; each server start takes the next pair (default: 18700)
#   WSLOAD_BENCH_OUT          result directory (default: target/bench-server in the repository)
#   WSLOAD_SERVER_BIN         wsload-server binary; unset: `cargo build --release -p wsload-server`
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$here/../.." && pwd)
servers=${WSLOAD_BENCH_SERVERS:-wsload go node}
sizes=${WSLOAD_BENCH_SIZES:-64 1024}
connections=${WSLOAD_BENCH_CONNECTIONS:-100}
window=${WSLOAD_BENCH_WINDOW:-64}
warmup=${WSLOAD_BENCH_WARMUP:-2}
duration=${WSLOAD_BENCH_DURATION:-10}
idle_counts=${WSLOAD_BENCH_IDLE-10000 19000}
next_port=${WSLOAD_BENCH_PORT:-18700}
out=${WSLOAD_BENCH_OUT:-$repo_root/target/bench-server}
bin_dir=$out/bin
results=$out/results
clk_tck=$(getconf CLK_TCK)

# Every process this script starts is recorded here and ended on exit, whatever the exit path.
LOG_NAME=bench-server
# shellcheck source=bench/lib.sh
source "$here/../lib.sh"

for tool in cargo go node npm timeout getconf; do
    command -v "$tool" >/dev/null || die "$tool is required"
done

mkdir -p "$bin_dir" "$results"
rm -f "$results"/*.json

# --- build ---------------------------------------------------------------------------------
log "building go-echo (module cache: $(go env GOMODCACHE))"
(cd "$here/go-echo" && GOFLAGS="-mod=readonly -buildvcs=false" timeout 600 go build -trimpath -o "$bin_dir/go-echo" .)

log "installing node-echo dependencies (npm ci, cache first)"
(cd "$here/node-echo" && timeout 600 npm ci --prefer-offline --no-audit --no-fund --loglevel=error >/dev/null)

log "building wsload-server and wsload-bench-client (release)"
if [[ -n ${WSLOAD_SERVER_BIN:-} ]]; then
    server_bin=$WSLOAD_SERVER_BIN
    (cd "$repo_root" && timeout 1200 cargo build --release --quiet -p wsload-bench-client)
else
    server_bin=$repo_root/target/release/wsload-server
    (cd "$repo_root" && timeout 1200 cargo build --release --quiet -p wsload-server -p wsload-bench-client)
fi
client_bin=$repo_root/target/release/wsload-bench-client
[[ -x $server_bin ]] || die "no wsload-server binary at $server_bin"

# --- servers -------------------------------------------------------------------------------
# Starts server $1 (wsload, go or node) on a fresh loopback port pair and waits until it
# accepts TCP connections (start_server in ../lib.sh; stop_server ends it).
start_echo_server() {
    local name=$1 log_file=$out/$1-server.log
    case $name in
    wsload) start_server "$name" "$log_file" ;;
    go) start_server "$name" "$log_file" "$bin_dir/go-echo" ;;
    node) start_server "$name" "$log_file" node "$here/node-echo/server.js" ;;
    *) die "unknown server $name" ;;
    esac
}

# --- throughput ----------------------------------------------------------------------------
run_throughput() {
    local name=$1 size
    start_echo_server "$name"
    for size in $sizes; do
        log "$name: throughput, $connections connections, $size B, window $window, ${warmup}s + ${duration}s"
        timeout $((warmup + duration + 60)) "$client_bin" --url "ws://127.0.0.1:$server_port/" \
            --label "$name" throughput --connections "$connections" --payload "$size" \
            --window "$window" --warmup "$warmup" --duration "$duration" \
            --server-pid "$server_pid" --clk-tck "$clk_tck" >"$results/$name-tp-$size.json"
        cat "$results/$name-tp-$size.json" >&2
    done
    stop_server
}

# --- idle memory ---------------------------------------------------------------------------
run_idle() {
    local name=$1 count=$2 before after client_pid line
    start_echo_server "$name"
    sleep 1 # let start-up allocations settle before the baseline
    before=$(rss_kib "$server_pid")
    log "$name: idle, $count connections (server RSS before: $before KiB)"
    local client_out=$out/$name-idle-$count.out
    : >"$client_out"
    "$client_bin" --url "ws://127.0.0.1:$server_port/" --label "$name" idle \
        --connections "$count" --hold 300 >"$client_out" &
    client_pid=$!
    started_pids+=("$client_pid")
    WAIT_INTERVAL=0.1 wait_until 120 --pid "$client_pid" grep -q '"event":"open"' "$client_out" || true
    line=$(grep '"event":"open"' "$client_out" || true)
    [[ -n $line ]] || die "$name: idle client did not report open connections within 120 s"
    sleep 2 # let the server finish its per-connection set-up before reading RSS
    after=$(rss_kib "$server_pid")
    # Closing 19,000 connections takes a while: up to 30 s before KILL.
    stop_pid "$client_pid" 30
    stop_server
    # The client's "closed" line says whether any connection was lost during the hold.
    node -e '
        const [line, closedText, name, count, before, after] = process.argv.slice(1);
        const open = JSON.parse(line);
        const closed = closedText.split("\n").filter(Boolean).map(JSON.parse).find((r) => r.event === "closed");
        const r = { label: name, mode: "idle", connections: Number(count), open: open.open,
            failed_connections: open.failed_connections, errors: open.errors.concat(closed ? closed.errors : []),
            rss_before_kib: Number(before), rss_after_kib: Number(after) };
        r.kib_per_conn = open.open > 0 ? (r.rss_after_kib - r.rss_before_kib) / open.open : null;
        console.log(JSON.stringify(r));
    ' "$line" "$(cat "$client_out")" "$name" "$count" "$before" "$after" >"$results/$name-idle-$count.json"
    cat "$results/$name-idle-$count.json" >&2
}

# Other work on the machine skews msg/s (less so msg per server CPU-s): the report shows this.
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for name in $servers; do
    run_throughput "$name"
    for count in $idle_counts; do
        run_idle "$name" "$count"
    done
done

# --- report --------------------------------------------------------------------------------
versions=$(printf 'go %s; node %s, ws %s; %s; %s' \
    "$(go env GOVERSION)" "$(node --version)" \
    "$(node -p 'require(process.argv[1]).version' "$here/node-echo/node_modules/ws/package.json")" \
    "$(rustc --version | cut -d' ' -f1-2)" "$("$server_bin" --version 2>/dev/null || echo wsload-server)")

node - "$results" "$servers" "$sizes" "$idle_counts" "$(nproc)" "$connections" "$window" \
    "$warmup" "$duration" "$versions" "$load_start" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'JS'
const fs = require('fs');
const path = require('path');
const [dir, serversArg, sizesArg, idleArg, cores, conns, window, warmup, duration, versions, loadStart, loadEnd] =
  process.argv.slice(2);
const servers = serversArg.split(/\s+/).filter(Boolean);
const sizes = sizesArg.split(/\s+/).filter(Boolean);
const idle = idleArg.split(/\s+/).filter(Boolean);
const read = (f) => { try { return JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')); } catch { return null; } };
const names = { wsload: 'wsload-server (echo)', go: 'Go gorilla/websocket', node: 'Node.js ws (1 process)' };
const int = (x) => (x == null ? 'n/a' : Math.round(x).toLocaleString('en-US'));
const kib = (x) => (x == null ? 'n/a' : x.toFixed(2));
const sizeName = (s) => (Number(s) % 1024 === 0 ? `${Number(s) / 1024}KiB` : `${s}B`);
const problems = [];

const header = ['server'];
for (const s of sizes) header.push(`msg/s ${sizeName(s)}`, `msg/s per server CPU-s ${sizeName(s)}`);
for (const n of idle) header.push(`KiB/conn @${Number(n) / 1000}k`);
const rows = [header, header.map(() => '---')];
for (const srv of servers) {
  const row = [names[srv] || srv];
  for (const s of sizes) {
    const r = read(`${srv}-tp-${s}.json`);
    if (r && (r.failed_connections || r.errors.length)) problems.push(`${srv} ${s} B: ${r.failed_connections} failed, ${r.errors.join('; ')}`);
    row.push(int(r && r.msgs_per_s), int(r && r.msgs_per_server_cpu_s));
  }
  for (const n of idle) {
    const r = read(`${srv}-idle-${n}.json`);
    if (r && (r.open !== r.connections || r.errors.length)) problems.push(`${srv} idle ${n}: ${r.open} open, ${r.errors.join('; ')}`);
    row.push(kib(r && r.kib_per_conn));
  }
  rows.push(row);
}
console.log(`\n## wsload-server vs peers: echo benchmark (${cores} cores, one server at a time)\n`);
console.log(rows.map((r) => `| ${r.join(' | ')} |`).join('\n'));
console.log(`
- Throughput: ${conns} connections, up to ${window} messages outstanding each, binary frames,
  ${warmup} s warm-up then ${duration} s measured; msg/s = echoes received by the client.
- The client and the server share the same ${cores} cores, so msg/s is bounded by both; the figure of
  merit is messages echoed per second of SERVER CPU time (utime+stime of the server process over the
  measured window, /proc/PID/stat).
- KiB/conn = (server VmRSS with N idle connections - VmRSS of the fresh process) / N.
- Node.js runs as a single process (one event loop, bufferutil installed); Go uses all cores
  (GOMAXPROCS default); wsload-server uses its default worker threads. No compression anywhere.
- ${versions}
- Load average (1/5/15 min) before the measurements: ${loadStart}; after: ${loadEnd}.`);

if (servers.includes('wsload')) {
  const peers = servers.filter((s) => s !== 'wsload');
  console.log('\nTargets:');
  for (const s of sizes) {
    const own = read(`wsload-tp-${s}.json`);
    const best = peers.map((p) => ({ p, r: read(`${p}-tp-${s}.json`) }))
      .filter((x) => x.r && x.r.msgs_per_server_cpu_s)
      .sort((a, b) => b.r.msgs_per_server_cpu_s - a.r.msgs_per_server_cpu_s)[0];
    if (!own || !own.msgs_per_server_cpu_s || !best) { console.log(`- ${sizeName(s)}: n/a`); continue; }
    const ratio = own.msgs_per_server_cpu_s / best.r.msgs_per_server_cpu_s;
    console.log(`- ${sizeName(s)}: wsload-server / best peer (${best.p}) msg per server CPU-s = ${ratio.toFixed(2)} ` +
      `(target >= 1.00: ${ratio >= 1 ? 'met' : 'NOT met'})`);
  }
  for (const n of idle) {
    const r = read(`wsload-idle-${n}.json`);
    const v = r && r.kib_per_conn;
    console.log(`- idle @${n}: wsload-server ${kib(v)} KiB per connection (target <= 8: ${v != null && v <= 8 ? 'met' : 'NOT met'})`);
  }
}
if (problems.length) console.log(`\nWarnings:\n${problems.map((p) => `- ${p}`).join('\n')}`);
JS
log "raw results: $results"
