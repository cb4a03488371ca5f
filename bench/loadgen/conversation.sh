#!/usr/bin/env bash
# Benchmarks the conversation's measured message against today's echo path, side by side in
# one run, on one wsload-server echo server started here on loopback: 100 connections keep 64
# messages of 64 B in flight for 10 s (bench/loadgen/throughput-64b.yaml's load), once with
# the built-in echo template (answers matched as exact copies) and once with a templated JSON
# message carrying `${seq}` and `${sendTime}` whose answers are matched by their JSON `id`.
# The figure is echoes per client CPU-second: echoes counted over the whole process's CPU time
# (utime+stime from /usr/bin/time; no warm-up, so both runs pay the same connect and close).
# Runs alternate (echo, conversation, echo, ...) so drift on a shared machine hits both; the
# table shows medians.
#
# Environment (all optional):
#   WSLOAD_BENCH_REPEAT    runs of each variant (default: 3)
#   WSLOAD_BENCH_DURATION  measured seconds of each run (default: 10)
#   WSLOAD_BENCH_PORT      loopback port of the server; the next one is its metrics' (default: 18950)
#   WSLOAD_BIN, WSLOAD_SERVER_BIN  the binaries (default: target/release/ of this repository,
#                          built by `cargo build --release -p wsload -p wsload-server`)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$here/../.." && pwd)
repeat=${WSLOAD_BENCH_REPEAT:-3}
duration=${WSLOAD_BENCH_DURATION:-10}
port=${WSLOAD_BENCH_PORT:-18950}
wsload_bin=${WSLOAD_BIN:-$repo_root/target/release/wsload}
server_bin=${WSLOAD_SERVER_BIN:-$repo_root/target/release/wsload-server}
[[ -x $wsload_bin ]] || { echo "no wsload binary at $wsload_bin" >&2; exit 1; }
[[ -x $server_bin ]] || { echo "no wsload-server binary at $server_bin" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "/usr/bin/time is required (Debian package: time)" >&2; exit 1; }

work=$(mktemp -d)
server_pid=
cleanup() {
    if [[ -n $server_pid ]]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

"$server_bin" --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$((port + 1))" \
    >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        break
    fi
    sleep 0.1
done

# spec NAME CONVERSATION_LINES: the shared load, with the conversation (if any) after it.
spec() {
    cat >"$work/$1.yaml" <<EOF
apiVersion: wsload.dev/v1alpha1
kind: LoadTest
metadata:
  name: bench-$1
spec:
  target:
    url: ws://127.0.0.1:$port/
  scenario: throughput
  connections: [100]
  warmup: 0s
  duration: ${duration}s
  window: 64
  message:
    size: 64
    format: json
$2
EOF
    "$wsload_bin" validate "$work/$1.yaml" >/dev/null
}
spec echo ""
spec conversation '  conversation:
    message:
      text: '"'"'{"type":"msg","id":${seq},"ts":${sendTime},"data":"${pad}"}'"'"'
      answer: {id: {json: id}}'

# One run of variant $1: "echoes cpu-seconds".
once() {
    /usr/bin/time -f "%U %S" -o "$work/time" \
        "$wsload_bin" run "$work/$1.yaml" --out "$work/$1.json" >/dev/null 2>"$work/$1.err" ||
        { cat "$work/$1.err" >&2; exit 1; }
    python3 - "$work/$1.json" "$work/time" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["cells"][0]["counts"]
user, system = open(sys.argv[2]).read().split()[-2:]
print(c["received"], float(user) + float(system), c.get("lost", 0), c.get("mismatched", 0))
EOF
}

for i in $(seq "$repeat"); do
    for variant in echo conversation; do
        read -r echoes cpu lost mismatched < <(once "$variant")
        printf '%s %s %s %s %s\n' "$variant" "$echoes" "$cpu" "$lost" "$mismatched" >>"$work/runs"
        echo "run $i $variant: $echoes echoes, $cpu CPU-s, lost $lost, mismatched $mismatched" >&2
    done
done

python3 - "$work/runs" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    variant, echoes, cpu, _, _ = line.split()
    runs.setdefault(variant, []).append((int(echoes), float(cpu)))
print("| variant | echoes (median) | client CPU-s (median) | echoes per CPU-s (median) |")
print("|---|---|---|---|")
per = {}
for variant, rs in runs.items():
    per[variant] = statistics.median(e / c for e, c in rs)
    print(f"| {variant} | {statistics.median(e for e, _ in rs):,.0f} | "
          f"{statistics.median(c for _, c in rs):.2f} | {per[variant]:,.0f} |")
ratio = per["conversation"] / per["echo"]
print(f"\nconversation / echo: {ratio:.3f} (target: within 10%: {'met' if ratio >= 0.9 else 'NOT met'})")
EOF
