#!/usr/bin/env bash
# Benchmarks the wsload load generator against k6 on the same local wsload-server echo server
# (started here on loopback, one fresh server per phase, both tools against it in turn):
#   throughput  100 connections, 64 B and 1 KiB text messages, 64 in flight per connection,
#               echoes/s and echoes per CLIENT CPU-second over the same ~10 s steady window;
#   ping        1 and 100 connections, sequential echo round trips: percentiles, round trips/s;
#   storm       5,000 connections opened (and closed): connections/s, connect percentiles;
#   hold        wsload only: client VmRSS per idle connection at 19,000 connections;
#   template    wsload only (not in the default phases): throughput-64b.yaml's built-in echo
#               message against throughput-template.yaml's own JSON template with ${seq} and
#               ${sendTime}, answered by its id: echoes per client CPU-second of each, alternating.
# The client's CPU time is read from /proc/PID/stat (utime+stime) every 50 ms while it runs,
# and from /usr/bin/time for the whole process. Prints a markdown table with wsload/k6 ratios
# and whether the targets are met. Loopback only; every process started here is ended on exit.
#
# k6 is built from source with `go install go.k6.io/k6@VERSION` (Go module proxy) and cached
# as ${WSLOAD_CACHE:-$HOME/.cache/wsload}/bin/k6, so later runs reuse it.
#
# Environment (all optional):
#   WSLOAD_BENCH_PHASES        phases to run, in order (default: "throughput ping storm hold")
#   WSLOAD_BENCH_REPEAT        runs of each tool per throughput/ping/storm cell; the table
#                              shows medians (default: 3)
#   WSLOAD_BENCH_WARMUP        throughput warm-up seconds, both tools (default: the YAML's, 2)
#   WSLOAD_BENCH_DURATION      throughput measured seconds, both tools (default: the YAML's, 10)
#   WSLOAD_BENCH_HOLD          idle connections of the hold phase (default: 19000)
#   WSLOAD_BENCH_K6            0: run wsload alone (no k6 install, no k6 runs; the table shows
#                              "-" for k6), e.g. to compare two wsload builds (default: 1)
#   WSLOAD_BENCH_K6_VERSION    k6 module version to install (default: v1.8.1)
#   WSLOAD_BENCH_K6_API        k6 WebSocket module: ws (k6/ws) or websockets (k6/websockets)
#                              (default: ws, the faster one here)
#   WSLOAD_BENCH_K6_GOGC       GOGC for k6 (default: 400, faster than Go's 100 here; "" keeps Go's)
#   WSLOAD_BENCH_K6_STORM_VUS  VUs of k6's shared-iterations storm (default: 50)
#   WSLOAD_BENCH_PORT          first loopback port; each server start takes the next pair
#                              (default: 18900)
#   WSLOAD_BENCH_OUT           result directory (default: target/bench-loadgen in the repository)
#   WSLOAD_BIN, WSLOAD_SERVER_BIN  prebuilt binaries; unset: `cargo build --release`
#   WSLOAD_BENCH_BASELINE_BIN  the template phase also runs throughput-64b.yaml with this wsload
#                              binary, an earlier version's (bench/loadgen/baseline.sh REV builds
#                              one and prints its path): the echo path before, side by side
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$here/../.." && pwd)
phases=${WSLOAD_BENCH_PHASES:-throughput ping storm hold}
repeat=${WSLOAD_BENCH_REPEAT:-3}
hold_conns=${WSLOAD_BENCH_HOLD:-19000}
k6_version=${WSLOAD_BENCH_K6_VERSION:-v1.8.1}
k6_api=${WSLOAD_BENCH_K6_API:-ws}
k6_gogc=${WSLOAD_BENCH_K6_GOGC-400}
k6_storm_vus=${WSLOAD_BENCH_K6_STORM_VUS:-50}
with_k6=${WSLOAD_BENCH_K6:-1}
next_port=${WSLOAD_BENCH_PORT:-18900}
out=${WSLOAD_BENCH_OUT:-$repo_root/target/bench-loadgen}
cache=${WSLOAD_CACHE:-$HOME/.cache/wsload}
runs=$out/runs
specs=$out/specs

# --- process bookkeeping -----------------------------------------------------------------------
# Every background process started here is recorded and ended on exit, whatever the exit path.
LOG_NAME=bench-loadgen
# shellcheck source=bench/lib.sh
source "$here/../lib.sh"

# Runs a long step in the background and waits for it, so that a signal interrupts the wait at
# once (bash runs traps only after a foreground command returns) and cleanup ends the step.
run_step() {
    local pid rc=0
    "$@" &
    pid=$!
    started_pids+=("$pid")
    wait "$pid" || rc=$?
    forget_pid "$pid"
    return "$rc"
}

# --- prerequisites -----------------------------------------------------------------------------
for tool in cargo python3 curl timeout getconf; do
    command -v "$tool" >/dev/null || die "$tool is required"
done
[[ -x /usr/bin/time ]] || die "/usr/bin/time is required (Debian package: time)"
[[ $k6_api == ws || $k6_api == websockets ]] || die "WSLOAD_BENCH_K6_API must be ws or websockets"

# Each client holds up to hold_conns sockets and so does the server: raise the soft open-file
# limit to the hard one, and hold fewer connections if even that is too low.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
fd_limit=$(ulimit -n)
hold_note=
if [[ $fd_limit != unlimited ]] && ((hold_conns + 500 > fd_limit)); then
    hold_note="open-file limit $fd_limit: holding $((fd_limit - 500)) connections instead of $hold_conns"
    log "$hold_note"
    hold_conns=$((fd_limit - 500))
fi

mkdir -p "$runs" "$specs" "$cache/bin"
rm -rf "${runs:?}"/*

# --- k6 ----------------------------------------------------------------------------------------
# Cached as bin/k6 (k6 names itself after its file); a different pinned version replaces it.
k6_bin=$cache/bin/k6
install_k6() {
    if [[ -x $k6_bin ]] && [[ $("$k6_bin" version 2>/dev/null) == *" $k6_version ("* ]]; then
        log "k6 $k6_version: cached at $k6_bin"
        return
    fi
    local gobin
    command -v go >/dev/null || die "go is required to install k6 (or run wsload alone: WSLOAD_BENCH_K6=0)"
    gobin=$(mktemp -d "$cache/bin/.k6-install.XXXXXX")
    tmp_dirs+=("$gobin")
    log "installing k6 $k6_version with go install (a few minutes on 2 cores, once)"
    # GOTOOLCHAIN=local: build with the Go here, never download another toolchain.
    GOBIN=$gobin GOTOOLCHAIN=local GOFLAGS=-buildvcs=false \
        run_step timeout 1500 go install "go.k6.io/k6@$k6_version" ||
        die "go install go.k6.io/k6@$k6_version failed"
    mv -f "$gobin/k6" "$k6_bin"
    [[ $("$k6_bin" version) == *" $k6_version ("* ]] || die "installed k6 is not $k6_version"
}
# The hold phase runs wsload alone: a hold-only run neither builds nor needs k6.
needs_k6=false
if [[ $with_k6 != 0 ]]; then
    for phase in $phases; do
        [[ $phase == hold || $phase == template ]] || needs_k6=true
    done
fi
k6_versions="k6 not run"
if $needs_k6; then
    install_k6
    k6_versions="$("$k6_bin" version); k6 API k6/$k6_api, GOGC=${k6_gogc:-default}"
fi

# k6 never reports usage, never resolves extensions, serves no REST API (--address '').
k6_env=(K6_NO_USAGE_REPORT=true K6_AUTO_EXTENSION_RESOLUTION=false)
if [[ -n $k6_gogc ]]; then
    k6_env+=("GOGC=$k6_gogc")
fi
k6_flags=(--quiet --no-usage-report --address "" --log-format raw)

# --- wsload ------------------------------------------------------------------------------------
if [[ -n ${WSLOAD_BIN:-} && -n ${WSLOAD_SERVER_BIN:-} ]]; then
    wsload_bin=$WSLOAD_BIN
    server_bin=$WSLOAD_SERVER_BIN
else
    log "building wsload and wsload-server (release)"
    run_step timeout 1800 cargo build --manifest-path "$repo_root/Cargo.toml" --release --quiet \
        -p wsload -p wsload-server
    wsload_bin=${WSLOAD_BIN:-$repo_root/target/release/wsload}
    server_bin=${WSLOAD_SERVER_BIN:-$repo_root/target/release/wsload-server}
fi
[[ -x $wsload_bin ]] || die "no wsload binary at $wsload_bin"
[[ -x $server_bin ]] || die "no wsload-server binary at $server_bin"

# --- server ------------------------------------------------------------------------------------
# start_server, stop_server (../lib.sh): one wsload-server per phase, on a fresh port pair.

# The LoadTest file $1 of this directory with the server's ports (and, for the hold, the
# connection count) substituted, written under $specs.
render_spec() {
    local name=$1 dest=$specs/$1
    sed -e "s|127\\.0\\.0\\.1:18900|127.0.0.1:$server_port|g" \
        -e "s|127\\.0\\.0\\.1:18901|127.0.0.1:$metrics_port|g" "$here/$name" >"$dest"
    if [[ $name == throughput-* ]]; then
        [[ -z ${WSLOAD_BENCH_WARMUP:-} ]] || sed -i "s/^  warmup: .*/  warmup: ${WSLOAD_BENCH_WARMUP}s/" "$dest"
        [[ -z ${WSLOAD_BENCH_DURATION:-} ]] || sed -i "s/^  duration: .*/  duration: ${WSLOAD_BENCH_DURATION}s/" "$dest"
    fi
    if [[ $name == hold.yaml ]]; then
        sed -i "s/^  connections: .*/  connections: [$hold_conns]/" "$dest"
    fi
    "$wsload_bin" validate "$dest" >/dev/null || die "$dest is not a valid LoadTest"
    printf '%s\n' "$dest"
}

# `key: value` of a LoadTest file: the first line whose key is $2 (digits of the value only).
spec_number() { sed -n "s/^ *$2: *\\[\\{0,1\\}\\([0-9]*\\).*/\\1/p" "$1" | head -1; }

# --- measuring a client ------------------------------------------------------------------------
# Writes "unix-seconds cpu-ticks" (utime+stime of the whole process, all threads) every 50 ms
# while process $1 lives. Builtins only (read -t on a pipe nobody writes is the sleep), so the
# sampler itself costs next to nothing on the 2 cores the client and server share.
sample_cpu() {
    local pid=$1 stat rest fd
    local -a f
    exec {fd}<> <(:)
    while read -r stat 2>/dev/null <"/proc/$pid/stat"; do
        rest=${stat##*) }
        read -ra f <<<"$rest"
        printf '%s %s\n' "$EPOCHREALTIME" $((f[11] + f[12]))
        read -rt 0.05 -u "$fd" _ || true
    done
}

# The first child of process $1, waiting up to 5 s for it to appear.
child_of() {
    kids=
    WAIT_INTERVAL=0.01 wait_until 5 --pid "$1" has_children "$1" || true
    printf '%s\n' "${kids%% *}"
}
has_children() {
    kids=$(cat "/proc/$1/task/$1/children" 2>/dev/null || true)
    [[ -n $kids ]]
}

# measured DIR LIMIT_SECONDS CMD...: runs CMD under /usr/bin/time (whole-process CPU and peak
# RSS to DIR/time) and `timeout`, samples its CPU into DIR/samples, stdout/stderr to
# DIR/stdout, DIR/stderr. Sets `client_pid` while running (for callers that watch it) and
# returns CMD's exit code. Run with `measured_start` + `measured_wait` to do work meanwhile.
measured_start() {
    local dir=$1 limit=$2
    shift 2
    mkdir -p "$dir"
    /usr/bin/time -f '%e %U %S %M' -o "$dir/time" \
        timeout -k 10 "$limit" "$@" >"$dir/stdout" 2>"$dir/stderr" &
    time_pid=$!
    started_pids+=("$time_pid")
    # On an early exit, cleanup must reach `timeout` (which passes the signal on to the
    # client) and the client itself, not only /usr/bin/time.
    timeout_pid=$(child_of "$time_pid")
    client_pid=
    if [[ -n $timeout_pid ]]; then
        started_pids+=("$timeout_pid")
        client_pid=$(child_of "$timeout_pid")
        [[ -z $client_pid ]] || started_pids+=("$client_pid")
    fi
    sampler_pid=
    if [[ -n $client_pid ]]; then
        sample_cpu "$client_pid" >"$dir/samples" &
        sampler_pid=$!
        started_pids+=("$sampler_pid")
    fi
    printf 'launched=%s\n' "$EPOCHREALTIME" >>"$dir/meta"
}
measured_wait() {
    local rc=0
    wait "$time_pid" || rc=$?
    forget_pid "$time_pid"
    [[ -z $timeout_pid ]] || forget_pid "$timeout_pid"
    [[ -z $client_pid ]] || forget_pid "$client_pid"
    if [[ -n $sampler_pid ]]; then
        stop_pid "$sampler_pid"
    fi
    return "$rc"
}
measured() {
    measured_start "$@"
    measured_wait
}

meta() { printf '%s=%s\n' "$1" "$2" >>"$3/meta"; }

run_wsload() {
    local dir=$1 spec=$2 limit=$3 rc=0
    shift 3
    mkdir -p "$dir"
    meta tool wsload "$dir"
    meta spec "$spec" "$dir"
    measured "$dir" "$limit" env RUST_LOG=warn "$wsload_bin" run "$spec" --out "$dir/result.json" "$@" || rc=$?
    # 1 = a threshold failed (these files set none); anything else means no result.
    if ((rc != 0 && rc != 1)); then
        log "wsload exited with $rc: $(tail -3 "$dir/stderr")"
    fi
}

run_k6() {
    local dir=$1 script=$2 limit=$3 rc=0
    shift 3
    mkdir -p "$dir"
    meta tool k6 "$dir"
    measured "$dir" "$limit" env "${k6_env[@]}" "$@" SUMMARY="$dir/summary.json" API="$k6_api" \
        "$k6_bin" run "${k6_flags[@]}" "$here/k6/$script" || rc=$?
    if ((rc != 0)); then
        log "k6 exited with $rc: $(tail -3 "$dir/stderr")"
    fi
}

# The tools of one cell in the order they run: $1, then the other (wsload alone with
# WSLOAD_BENCH_K6=0).
tool_order() {
    if [[ $with_k6 == 0 ]]; then
        echo wsload
    else
        echo "$1" "$([[ $1 == wsload ]] && echo k6 || echo wsload)"
    fi
}

now_ms() { printf '%s\n' "$(($(date +%s%N) / 1000000))"; }

# --- phases ------------------------------------------------------------------------------------
phase_throughput() {
    start_server wsload-server "$out/server-throughput.log"
    local name spec size warmup duration rep dir win_start first tool
    for name in throughput-64b.yaml throughput-1k.yaml; do
        spec=$(render_spec "$name")
        size=$(spec_number "$spec" size)
        warmup=$(spec_number "$spec" warmup)
        duration=$(spec_number "$spec" duration)
        for rep in $(seq 1 "$repeat"); do
            # Alternate which tool goes first, so a drift in the machine's load hits both.
            first=wsload
            ((rep % 2)) || first=k6
            for tool in $(tool_order "$first"); do
                dir=$runs/throughput-$size-$tool-$rep
                log "throughput ${size} B, $tool, run $rep/$repeat (${warmup}s warm-up + ${duration}s)"
                if [[ $tool == wsload ]]; then
                    run_wsload "$dir" "$spec" $((warmup + duration + 60))
                    meta warmup "$warmup" "$dir"
                else
                    # k6 gets 1 s to start its VUs and connect, then the same warm-up; it
                    # counts echoes between WIN_START and WIN_END and then closes.
                    win_start=$(($(now_ms) + 1000 + warmup * 1000))
                    mkdir -p "$dir"
                    meta win_start_ms "$win_start" "$dir"
                    meta win_end_ms $((win_start + duration * 1000)) "$dir"
                    run_k6 "$dir" throughput.js $((warmup + duration + 60)) \
                        URL="ws://127.0.0.1:$server_port/" CONNS=100 SIZE="$size" WINDOW=64 \
                        WIN_START="$win_start" WIN_END=$((win_start + duration * 1000)) \
                        MAX_DURATION="$((warmup + duration + 30))s"
                fi
                meta test "throughput-$size" "$dir"
                meta size "$size" "$dir"
            done
        done
    done
    stop_server
}

# wsload alone, the built-in echo message against the user's own template (a JSON message with
# ${seq} and ${sendTime}, answered by its `id`), alternating, on one server: what a template
# costs per message, as a ratio measured side by side.
phase_template() {
    start_server wsload-server "$out/server-template.log"
    local name spec warmup rep dir order test
    local baseline=${WSLOAD_BENCH_BASELINE_BIN:-}
    [[ -z $baseline || -x $baseline ]] || die "WSLOAD_BENCH_BASELINE_BIN: no binary at $baseline"
    for rep in $(seq 1 "$repeat"); do
        order="throughput-64b.yaml throughput-template.yaml"
        [[ -z $baseline ]] || order="$order baseline"
        ((rep % 2)) || order=$(tr ' ' '\n' <<<"$order" | tac | tr '\n' ' ')
        for name in $order; do
            test=${name%.yaml}
            [[ $name != baseline ]] || { name=throughput-64b.yaml; test=throughput-64b-baseline; }
            spec=$(render_spec "$name")
            warmup=$(spec_number "$spec" warmup)
            dir=$runs/template-$test-$rep
            log "template phase: $test, run $rep/$repeat"
            if [[ $test == throughput-64b-baseline ]]; then
                wsload_bin=$baseline run_wsload "$dir" "$spec" $((warmup + $(spec_number "$spec" duration) + 60))
            else
                run_wsload "$dir" "$spec" $((warmup + $(spec_number "$spec" duration) + 60))
            fi
            meta warmup "$warmup" "$dir"
            meta test "$test" "$dir"
            meta size 64 "$dir"
        done
    done
    stop_server
}

phase_ping() {
    start_server wsload-server "$out/server-ping.log"
    local conns spec pings rep dir first tool
    for conns in 1 100; do
        spec=$(render_spec "ping-$conns.yaml")
        pings=$(spec_number "$spec" count)
        for rep in $(seq 1 "$repeat"); do
            first=wsload
            ((rep % 2)) || first=k6
            for tool in $(tool_order "$first"); do
                dir=$runs/ping-$conns-$tool-$rep
                log "ping, $conns connection(s) x $pings round trips, $tool, run $rep/$repeat"
                if [[ $tool == wsload ]]; then
                    run_wsload "$dir" "$spec" 300
                else
                    run_k6 "$dir" ping.js 300 URL="ws://127.0.0.1:$server_port/" \
                        CONNS="$conns" PINGS="$pings" SIZE=64
                fi
                meta test "ping-$conns" "$dir"
            done
        done
    done
    stop_server
}

phase_storm() {
    start_server wsload-server "$out/server-storm.log"
    local spec conns rep dir first tool
    spec=$(render_spec storm.yaml)
    conns=$(spec_number "$spec" connections)
    # An untimed storm first: a fresh server spends ~20% of its first storm's CPU faulting in
    # memory (clear_page_erms), which would be charged to whichever tool happened to go first.
    log "storm, $conns connections, server warm-up (not recorded)"
    RUST_LOG=warn "$wsload_bin" run "$spec" >/dev/null 2>&1 || log "warm-up storm failed (ignored)"
    sleep 2
    for rep in $(seq 1 "$repeat"); do
        first=wsload
        ((rep % 2)) || first=k6
        for tool in $(tool_order "$first"); do
            dir=$runs/storm-$tool-$rep
            log "storm, $conns connections, $tool, run $rep/$repeat"
            if [[ $tool == wsload ]]; then
                run_wsload "$dir" "$spec" 120
            else
                run_k6 "$dir" storm.js 180 URL="ws://127.0.0.1:$server_port/" \
                    CONNS="$conns" VUS="$k6_storm_vus"
            fi
            meta test storm "$dir"
            meta connections "$conns" "$dir"
        done
        # Let the closed connections' TIME_WAIT and the server settle a moment.
        sleep 2
    done
    stop_server
}

# Sum of a wsload live counter (all label sets) from its /metrics, or empty.
wsload_metric() {
    curl -s --max-time 2 "http://127.0.0.1:$1/metrics" 2>/dev/null |
        awk -v name="$2" 'index($1, name "{") == 1 || $1 == name { s += $2; n++ } END { if (n) printf "%d\n", s }'
}

# Runs hold LoadTest $2 into dir $1 with live metrics; records VmRSS once all connections
# are open (+2 s) and once every open connection has had its first ping answered (+1 s).
hold_run() {
    local dir=$1 spec=$2 limit=$3 conns mport opened failed received active
    conns=$(spec_number "$spec" connections)
    take_ports
    mport=$server_port # the wsload metrics port: any free port of the pair
    mkdir -p "$dir"
    meta tool wsload "$dir"
    meta spec "$spec" "$dir"
    meta connections "$conns" "$dir"
    measured_start "$dir" "$limit" env RUST_LOG=warn "$wsload_bin" run "$spec" \
        --out "$dir/result.json" --metrics-listen "127.0.0.1:$mport"
    local deadline=$((SECONDS + 120))
    while ((SECONDS < deadline)) && kill -0 "$client_pid" 2>/dev/null; do
        opened=$(wsload_metric "$mport" wsload_connections_opened_total)
        failed=$(wsload_metric "$mport" wsload_connections_failed_total)
        if [[ -n $opened && -n $failed ]] && ((opened + failed >= conns)); then
            break
        fi
        sleep 0.5
    done
    sleep 2
    active=$(wsload_metric "$mport" wsload_connections_active)
    meta open_connections "${active:-0}" "$dir"
    meta failed_connections "${failed:-0}" "$dir"
    meta rss_open_kib "$(rss_kib "$client_pid")" "$dir"
    log "hold: ${active:-0} of $conns open, wsload VmRSS $(rss_kib "$client_pid") KiB"
    if ((conns > 1)); then
        deadline=$((SECONDS + 60))
        while ((SECONDS < deadline)) && kill -0 "$client_pid" 2>/dev/null; do
            received=$(wsload_metric "$mport" wsload_messages_received_total)
            if [[ -n $received ]] && ((received >= ${active:-0})); then
                sleep 1
                meta rss_after_ping_kib "$(rss_kib "$client_pid")" "$dir"
                log "hold: first ping round answered, wsload VmRSS $(rss_kib "$client_pid") KiB"
                break
            fi
            sleep 0.5
        done
    fi
    local rc=0
    measured_wait || rc=$?
    ((rc == 0 || rc == 1)) || log "wsload hold exited with $rc: $(tail -3 "$dir/stderr")"
}

phase_hold() {
    start_server wsload-server "$out/server-hold.log"
    local base spec
    base=$(render_spec hold-baseline.yaml)
    spec=$(render_spec hold.yaml)
    log "hold: baseline, 1 connection"
    hold_run "$runs/hold-baseline" "$base" 60
    log "hold: $hold_conns idle connections, ping every 30 s"
    hold_run "$runs/hold" "$spec" 180
    meta test hold "$runs/hold"
    meta note "$hold_note" "$runs/hold"
    stop_server
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
started=$SECONDS
for phase in $phases; do
    case $phase in
    throughput | ping | storm | hold | template) "phase_$phase" ;;
    *) die "unknown phase $phase (throughput, ping, storm, hold, template)" ;;
    esac
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

run_step timeout 120 python3 -B "$here/report.py" "$runs" \
    --clk-tck "$(getconf CLK_TCK)" --cores "$(nproc)" --repeat "$repeat" \
    --versions "$("$wsload_bin" --version) at $(git -C "$repo_root" describe --always --dirty 2>/dev/null || echo '?'); $k6_versions" \
    --load "$load_start" "$load_end" --seconds $((SECONDS - started)) | tee "$out/report.md"
log "raw results: $runs; table: $out/report.md"
