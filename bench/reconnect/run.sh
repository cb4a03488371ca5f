#!/usr/bin/env bash
# usage: bench/reconnect/run.sh
#
# A reconnect storm measured twice, side by side: bench/reconnect/storm.yaml (10,000 held
# connections over 4 managed server replicas, one killed 10 s in) with exponential backoff
# and full jitter (1 s doubling to 30 s) as written, then with no backoff (`reconnect: {policy: immediate}`). For
# each it prints the report's reconnect lines and one summary line:
#   policy=P dropped=N back=N never_back=N attempts=N peak_attempts_per_s=N all_back_ms=N
#   handshake_p99_ms=X first_handshake_p99_ms=Y downtime_p99_ms=Z
# Release builds; both runs on the same machine one after the other (compare them as
# ratios: timings here are noisy).
#
# Environment (all optional):
#   WSLOAD_BIN, WSLOAD_SERVER_BIN  prebuilt binaries; unset: `cargo build --release`
#   WSLOAD_BENCH_OUT               result directory (default: target/bench-reconnect)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$here/../.." && pwd)
LOG_NAME=bench-reconnect
# shellcheck source=bench/lib.sh
source "$here/../lib.sh"

(($# == 0)) || die "usage: bench/reconnect/run.sh (no arguments)"
out=${WSLOAD_BENCH_OUT:-$repo_root/target/bench-reconnect}
mkdir -p "$out"
if [[ -z ${WSLOAD_BIN:-} || -z ${WSLOAD_SERVER_BIN:-} ]]; then
    log "building the release binaries"
    (cd "$repo_root" && cargo build --release --locked -p wsload -p wsload-server >&2)
    WSLOAD_BIN=$repo_root/target/release/wsload
    WSLOAD_SERVER_BIN=$repo_root/target/release/wsload-server
fi

# One run of FILE as POLICY: the report's reconnect lines, then the summary line.
run_policy() {
    local policy=$1 file=$2 report
    report=$out/$policy.txt
    log "running $policy"
    "$WSLOAD_BIN" run "$file" --server-bin "$WSLOAD_SERVER_BIN" --out "$out/$policy.json" \
        >"$report" 2>"$out/$policy.log" || log "$policy: wsload exited $? (its report is kept)"
    grep -A3 '^reconnect \[' "$report" | grep -v '^finding' || true
    python3 "$here/summary.py" "$policy" "$report"
}

run_policy backoff "$here/storm.yaml"
sed 's/^  reconnect: .*$/  reconnect: {policy: immediate}/' "$here/storm.yaml" >"$out/immediate.yaml"
run_policy immediate "$out/immediate.yaml"
