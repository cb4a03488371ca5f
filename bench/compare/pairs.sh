#!/usr/bin/env bash
# usage: bench/compare/pairs.sh [PAIRS]
#
# How `wsload compare` judges runs it should find the same, and runs it should find slower
# (issue 41's bench). PAIRS times (default 20), one after the other on this machine:
#   same:  a pingpong LoadTest (100 connections, 5 s) run twice against one echo server
#          (bench/compare/echo-after.js, Node's `ws`), the second compared with the first;
#   slow:  the same run against that server answering 2 ms later, compared with the first.
# Prints one line per pair (`pair=N same=VERDICT slow=VERDICT`) and a summary:
#   same: Same N/PAIRS (Improved N, Regressed N)  slow: Regressed N/PAIRS
# and, for the same pairs, the largest change each figure showed (what noise alone gives at
# this size: the smallest change the verdict could tell from it is beyond that).
#
# Environment (all optional):
#   WSLOAD_BIN           a prebuilt wsload; unset: `cargo build --release`
#   WSLOAD_COMPARE_ARGS  more arguments to `wsload compare` (e.g. --min-effect 5%)
#   WSLOAD_BENCH_OUT     result directory (default: target/bench-compare)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$here/../.." && pwd)
LOG_NAME=bench-compare
# shellcheck source=bench/lib.sh
source "$here/../lib.sh"

pairs=${1:-20}
[[ $pairs =~ ^[1-9][0-9]*$ ]] || die "usage: bench/compare/pairs.sh [PAIRS] (a whole number of pairs)"
out=${WSLOAD_BENCH_OUT:-$repo_root/target/bench-compare}
mkdir -p "$out"
if [[ -z ${WSLOAD_BIN:-} ]]; then
    log "building the release binary"
    (cd "$repo_root" && cargo build --release --locked -p wsload >&2)
    WSLOAD_BIN=$repo_root/target/release/wsload
fi
node_modules=$("$repo_root/scripts/test-servers/install.sh")
read -r -a compare_args <<<"${WSLOAD_COMPARE_ARGS:-}"

# Starts echo-after.js with --delay-ms $1; sets `port` to where it listens.
start_echo() {
    local fifo=$out/echo.port
    rm -f "$fifo"
    NODE_PATH=$node_modules node "$here/echo-after.js" --delay-ms "$1" >"$fifo" 2>>"$out/echo.log" &
    started_pids+=($!)
    wait_until 10 test -s "$fifo" || die "the echo server did not start (see $out/echo.log)"
    port=$(<"$fifo")
}

# Runs the pingpong LoadTest against port $1 into result file $2.
run_once() {
    local file=$out/pingpong.yaml
    cat >"$file" <<YAML
apiVersion: wsload.dev/v1alpha1
kind: LoadTest
metadata: {name: compare-bench}
spec:
  target: {url: "ws://127.0.0.1:$1/"}
  scenario: pingpong
  connections: [100]
  warmup: 1s
  duration: 5s
  message: {size: 64, format: json}
YAML
    "$WSLOAD_BIN" run "$file" --out "$2" >"$2.txt" 2>>"$out/run.log" ||
        die "wsload run exited $? (see $2.txt and $out/run.log)"
}

# The verdict of comparing result $2 with $1, its JSON kept as $3.
verdict() {
    local code=0
    "$WSLOAD_BIN" compare "$1" "$2" --json "$3" "${compare_args[@]}" >"$3.txt" 2>>"$out/run.log" || code=$?
    ((code <= 1)) || die "wsload compare exited $code (see $out/run.log)"
    jq -r .verdict "$3"
}

start_echo 0
fast=$port
start_echo 2
slow=$port
declare -A same_count=([Same]=0 [Improved]=0 [Regressed]=0)
slow_regressed=0
for ((i = 1; i <= pairs; i++)); do
    run_once "$fast" "$out/base-$i.json"
    run_once "$fast" "$out/again-$i.json"
    run_once "$slow" "$out/slow-$i.json"
    same=$(verdict "$out/base-$i.json" "$out/again-$i.json" "$out/same-$i.cmp.json")
    slower=$(verdict "$out/base-$i.json" "$out/slow-$i.json" "$out/slow-$i.cmp.json")
    same_count[$same]=$((same_count[$same] + 1))
    [[ $slower == Regressed ]] && slow_regressed=$((slow_regressed + 1))
    echo "pair=$i same=$same slow=$slower"
done
echo "same: Same ${same_count[Same]}/$pairs (Improved ${same_count[Improved]}, Regressed ${same_count[Regressed]})  slow: Regressed $slow_regressed/$pairs"
echo "largest change between runs of one server, by figure (new: from none):"
same_files=()
for ((i = 1; i <= pairs; i++)); do
    same_files+=("$out/same-$i.cmp.json")
done
jq -rs '[.[].cells[0].figures[] | {name, change: (if .change == null then (if .new == .base then 0 else infinite end) else (.change | fabs) end)}]
    | group_by(.name) | map((map(.change) | max) as $m | "  \(.[0].name): \(if $m == infinite then "new" else "\($m * 1000 | round / 10)%" end)") | .[]' \
    "${same_files[@]}"
