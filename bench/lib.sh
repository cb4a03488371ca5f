# shellcheck shell=bash
# Process bookkeeping and the echo servers shared by the benchmark scripts; sourced, never run.
# Every background process a benchmark starts goes into started_pids and is ended on exit,
# whatever the exit path; every directory in tmp_dirs is removed. Brings
# scripts/lib/common.sh (log, die, at_exit, wait_until): set LOG_NAME before sourcing this.

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/common.sh"

started_pids=()
# shellcheck disable=SC2034 # removed at exit (at_exit below); the benchmarks add to it
tmp_dirs=()

# Ends every process in started_pids: TERM to all, then KILL to any still there 5 s later.
end_started_pids() {
    local pid
    ((${#started_pids[@]})) || return 0
    for pid in "${started_pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${started_pids[@]}"; do
        WAIT_INTERVAL=0.1 wait_until 5 process_gone "$pid" || kill -KILL "$pid" 2>/dev/null || true
    done
}
at_exit '((${#tmp_dirs[@]} == 0)) || rm -rf "${tmp_dirs[@]}"'
at_exit end_started_pids
# Without these, Ctrl-C or a CI cancel would kill bash before the EXIT trap ends the processes.
trap 'exit 130' INT
trap 'exit 143' TERM

# A reaped PID can be reused by an unrelated process: drop it from the list once waited for.
forget_pid() {
    local pid kept=()
    for pid in "${started_pids[@]}"; do
        [[ $pid == "$1" ]] || kept+=("$pid")
    done
    started_pids=("${kept[@]}")
}

# Ends process $1 (TERM, then KILL after ${2:-5} seconds), reaps it and forgets it.
stop_pid() {
    stop_process "$1" "${2:-5}"
    forget_pid "$1"
}

# VmRSS of process $1 in KiB; empty when it is gone.
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || true; }

# --- the server under test -----------------------------------------------------------------
# server_pid, server_port and metrics_port: the one server running (start_server, stop_server).
# next_port (set by the benchmark): where take_ports looks next.
server_pid=
server_port=
metrics_port=

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
listening() { ! port_free "$1"; }

# The next free loopback port pair from next_port into server_port and metrics_port (a fresh
# pair per start, so no TIME_WAIT of an earlier phase touches the next).
take_ports() {
    while ! port_free "$next_port" || ! port_free $((next_port + 1)); do
        next_port=$((next_port + 2))
    done
    server_port=$next_port
    metrics_port=$((next_port + 1))
    next_port=$((next_port + 2))
}

# start_server NAME LOG_FILE [CMD...]: starts the echo server NAME (as messages call it) on a
# fresh port pair (take_ports), its output in LOG_FILE, and waits until it accepts TCP
# connections. Without CMD it is wsload-server ($server_bin) with the settings both benchmarks
# use; CMD is a peer server, given its address as a last `--listen 127.0.0.1:PORT`.
start_server() {
    local name=$1 log_file=$2 rc=0
    shift 2
    take_ports
    if (($#)); then
        "$@" --listen "127.0.0.1:$server_port" >"$log_file" 2>&1 &
    else
        # No server pings and no idle timeout: the server sends nothing the clients did not ask
        # for. RUST_LOG=warn: nothing logged per connection (the peers log nothing either).
        RUST_LOG=warn "${server_bin:?}" --profile echo --listen "127.0.0.1:$server_port" \
            --metrics-listen "127.0.0.1:$metrics_port" --ping-interval 0 --idle-timeout 0 \
            --drain-timeout 2s >"$log_file" 2>&1 &
    fi
    server_pid=$!
    started_pids+=("$server_pid")
    WAIT_INTERVAL=0.1 wait_until 10 --pid "$server_pid" listening "$server_port" || rc=$?
    ((rc != 1)) || die "$name exited at start-up: $(tail -5 "$log_file")"
    ((rc != 2)) || die "$name did not listen on 127.0.0.1:$server_port within 10 s"
}

stop_server() {
    [[ -n $server_pid ]] || return 0
    stop_pid "$server_pid"
    server_pid=
}
