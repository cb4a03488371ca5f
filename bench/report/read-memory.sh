#!/usr/bin/env bash
# Measures what reading a result costs in memory (issue 39): the peak RSS (`/usr/bin/time`'s
# maximum resident set size) of `wsload report` and `wsload merge` on
#   1. results of 2,048 cells (the most a valid LoadTest runs) and of 5,000 (refused), each cell
#      with five histograms of a few hundred distinct latencies (the `many-cells` example of
#      wsload-report: ~4.9 KB of JSON a cell, as the issue's 27 MB result of 5,000 cells);
#   2. `merge` of two shards' 2,048-cell results;
#   3. a 300 MB file and a gzip stream inflating to 2 GiB (a gzip bomb), both refused.
# One line per reading on stdout: NAME_maxrss_kib=V, and NAME_exit=CODE (report exits 1 here:
# the fixture's threshold fails on these latencies; 2 is a refusal). Progress on stderr.
#
# usage: bench/report/read-memory.sh
#   WSLOAD_BIN        a prebuilt wsload (e.g. an older build, to compare); unset: `cargo build
#                     --release -p wsload`
#   WSLOAD_BENCH_OUT  where the files go (default: target/bench-report-memory); they are kept,
#                     the 300 MB one sparse
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$here/../.." && pwd)
out=${WSLOAD_BENCH_OUT:-$repo_root/target/bench-report-memory}

LOG_NAME=bench-report-memory
# shellcheck source=bench/lib.sh
source "$here/../lib.sh"

for tool in cargo gzip head timeout truncate; do
    command -v "$tool" >/dev/null || die "$tool is required"
done
[[ -x /usr/bin/time ]] || die "/usr/bin/time is required (GNU time: the shell's keyword has no peak RSS)"

mkdir -p "$out"
if [[ -n ${WSLOAD_BIN:-} ]]; then
    wsload_bin=$WSLOAD_BIN
else
    log "building wsload (release)"
    (cd "$repo_root" && timeout 1800 cargo build --release --quiet -p wsload)
    wsload_bin=$repo_root/target/release/wsload
fi
[[ -x $wsload_bin ]] || die "no wsload binary at $wsload_bin"

# The inputs are the same every run: made once.
make_cells() { # CELLS SHARD FILE
    [[ -s $3 ]] && return 0
    log "writing $3"
    (cd "$repo_root" && timeout 1800 cargo run --release --quiet -p wsload-report \
        --features fixtures --example many-cells -- "$3" "$1" "$2")
}
make_cells 2048 0 "$out/cells-2048.json"
make_cells 2048 1 "$out/cells-2048-shard1.json"
make_cells 5000 0 "$out/cells-5000.json"
if [[ ! -s $out/big-300m.json ]]; then
    truncate -s 300M "$out/big-300m.json"
fi
if [[ ! -s $out/bomb-2g.json.gz ]]; then
    log "writing $out/bomb-2g.json.gz (2 GiB of zeros, gzip -1)"
    head -c 2G /dev/zero | gzip -1 >"$out/bomb-2g.json.gz"
fi

# measure NAME ARGS...: runs wsload ARGS under /usr/bin/time; prints its peak RSS and exit code.
measure() {
    local name=$1 rc=0 kib why=
    shift
    # -o: the peak alone in its file (its last line), apart from wsload's own stderr.
    /usr/bin/time -o "$out/$name.time" -f '%M' "$wsload_bin" "$@" >"$out/$name.out" \
        2>"$out/$name.err" || rc=$?
    kib=$(tail -1 "$out/$name.time")
    ((rc != 2)) || why=": $(tail -1 "$out/$name.err")"
    log "$name: exit $rc, peak RSS $kib KiB$why"
    printf '%s\n' "${name}_maxrss_kib=$kib" "${name}_exit=$rc"
}

measure report_2048 report "$out/cells-2048.json"
measure report_5000 report "$out/cells-5000.json"
measure merge_2x2048 merge "$out/cells-2048.json" "$out/cells-2048-shard1.json"
measure report_300mb report "$out/big-300m.json"
measure report_gzip_bomb report "$out/bomb-2g.json.gz"
