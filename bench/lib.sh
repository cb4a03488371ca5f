# shellcheck shell=bash
# Process bookkeeping shared by the benchmark scripts; sourced, never run.
# Every background process a benchmark starts goes into started_pids and is ended on exit,
# whatever the exit path; every directory in tmp_dirs is removed.

started_pids=()
tmp_dirs=()

cleanup() {
    local pid
    if ((${#started_pids[@]})); then
        for pid in "${started_pids[@]}"; do
            kill -TERM "$pid" 2>/dev/null || true
        done
        for pid in "${started_pids[@]}"; do
            for _ in $(seq 1 50); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            kill -KILL "$pid" 2>/dev/null || true
        done
    fi
    if ((${#tmp_dirs[@]})); then
        rm -rf "${tmp_dirs[@]}"
    fi
}
trap cleanup EXIT
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

# Ends process $1 (TERM, then KILL after ${2:-50} tenths of a second) and reaps it.
stop_pid() {
    local tenths=${2:-50}
    kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq 1 "$tenths"); do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    forget_pid "$1"
}
