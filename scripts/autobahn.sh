#!/usr/bin/env bash
# The Autobahn|Testsuite (cases 1.* to 10.*) against both WebSocket implementations of the
# project, on loopback; prints a per-behavior summary and exits non-zero if any case is
# FAILED, if a case did not run, or if the suite did not finish.
#
# usage: scripts/autobahn.sh [--client | --install]
#   (no option)  the fuzzingclient (Autobahn is the client) against `wsload-server --profile echo`
#   --install    only install the suite's virtualenv (cached), for scripts/prepare.sh
#   --client     the fuzzingserver (Autobahn is the server) against the load generator's own
#                client (crates/wsload-ws) run by the hidden `wsload autobahn-client`,
#                which echoes every message back, as the client cases expect
#
# Cases 12.* and 13.* (permessage-deflate): the server does not implement compression, so
# they are excluded there (they could only report UNIMPLEMENTED). The client does: --client
# adds 16 of them, 12.1.1, 12.1.5 and 13.1.1-13.7.5's first and fifth (every window and
# context-takeover answer the fuzzingserver gives, 16 and 256 byte messages): 12-16 s beside
# 1-10's ~25 s. Each costs the fuzzingserver's ~0.5-1 s whatever its size; the larger ones (up
# to 1000 messages of 128 KiB) ~40 s each. Name others in WSLOAD_AUTOBAHN_CASES to run them.
#
# Environment:
#   WSLOAD_SERVER_BIN           server binary to test; unset: the images' static build (scripts/cargo-build.sh static)
#   WSLOAD_BIN                  (--client) wsload binary to test; unset: the same build
#   WSLOAD_AUTOBAHN_REPORT_DIR  report directory (default: target/autobahn in the repository;
#                               --client writes to its subdirectory client/)
#   WSLOAD_CACHE                cache root for the suite's virtualenv (default: ~/.cache/wsload)
#   WSLOAD_PYTHON2              Python 2.7 interpreter (default: python2.7 on PATH, then pyenv's)
#   WSLOAD_AUTOBAHN_CASES       comma-separated case patterns: case ids, or with * for any
#                               ending (default: 1.* ... 10.*, and --client the subset above)
#   WSLOAD_AUTOBAHN_TIMEOUT     seconds the whole suite may take (default: 900)
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib/common.sh
source "$repo_root/scripts/lib/common.sh"
req_file=$repo_root/scripts/autobahn-requirements.txt
cache_root=${WSLOAD_CACHE:-$HOME/.cache/wsload}
report_dir=${WSLOAD_AUTOBAHN_REPORT_DIR:-$repo_root/target/autobahn}
cases=${WSLOAD_AUTOBAHN_CASES:-}
suite_timeout=${WSLOAD_AUTOBAHN_TIMEOUT:-900}
mode=server
case "${1:-}" in
"") ;;
--client) mode=client ;;
--install) mode=install ;;
*) usage ;;
esac
[[ $# -le 1 ]] || usage
if [[ -z $cases ]]; then
    cases='1.*,2.*,3.*,4.*,5.*,6.*,7.*,8.*,9.*,10.*'
    if [[ $mode == client ]]; then
        # wstest's patterns know only *, which matches any ending (13.1.1* is 13.1.1x too).
        cases+=$(printf ',%s' 12.1.{1,5} 13.{1..7}.{1,5})
    fi
fi
# The agent is the name wstest files results under (and names report files by).
if [[ $mode == client ]]; then
    agent=wsload
    report_dir=$report_dir/client
else
    agent=wsload-server
fi
# The last virtualenv that itself runs on Python 2.7 and needs no other package; its
# bundled pip 20.3.4 / setuptools 44 are the last to support 2.7, so nothing is downloaded
# to seed the environment.
virtualenv_version=16.7.12

server_pid=
wstest_pid=
client_pid=
bootstrap_dir=
started_at=$SECONDS

# The server drains on SIGTERM; give it its drain bound, then stop waiting.
# At exit: the client and wstest stopped, then the server, then the bootstrap directory removed.
at_exit '[[ -z $bootstrap_dir ]] || rm -rf "$bootstrap_dir"'
at_exit 'stop_process "$server_pid" 15'
at_exit 'if [[ -n $wstest_pid ]]; then kill -TERM "$wstest_pid" 2>/dev/null; wait "$wstest_pid" 2>/dev/null; fi'
at_exit 'stop_process "$client_pid"'
# Without these, Ctrl-C or a CI cancel would kill bash before the EXIT trap stops the server.
trap 'exit 130' INT
trap 'exit 143' TERM

command -v python3 >/dev/null || die "python3 is required (it parses the report)"

find_python2() {
    local candidate
    # A pyenv shim named python2.7 exists even when 2.7 is not the selected version and then
    # fails when run, so each candidate is tried, not just looked up.
    for candidate in "${WSLOAD_PYTHON2:-}" python2.7 python2 \
        "${PYENV_ROOT:-$HOME/.pyenv}"/versions/2.7*/bin/python2.7 /usr/bin/python2.7; do
        [[ -n $candidate ]] || continue
        if "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (2, 7))' >/dev/null 2>&1; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

# Installs the suite into a virtualenv under the cache, named by a hash of everything that
# decides its contents, so changed pins get a fresh environment and an unchanged one is
# reused. A `.complete` marker is written last: an interrupted install is redone.
ensure_venv() {
    local py2 key lock_fd old out
    py2=$(find_python2) || die "no working Python 2.7 found (the Autobahn suite is Python 2 only); set WSLOAD_PYTHON2"
    key=$({
        cat "$req_file"
        echo "virtualenv==$virtualenv_version"
        # The environment links to this interpreter's installation, not just its version.
        "$py2" -c 'import sys; print(sys.version); print(sys.prefix)'
    } | sha256sum | cut -c1-16)
    venv=$cache_root/autobahn-venv-$key
    [[ -f $venv/.complete ]] && return 0

    mkdir -p "$cache_root"
    # Two runs sharing a cache (parallel CI jobs) must not build the same directory at once.
    exec {lock_fd}>"$cache_root/autobahn-venv.lock"
    if command -v flock >/dev/null; then
        flock "$lock_fd"
    fi
    if [[ ! -f $venv/.complete ]]; then
        log "installing the Autobahn testsuite into $venv (Python: $py2)"
        rm -rf "$venv"
        bootstrap_dir=$(mktemp -d)
        # Output kept for failures only: an old pip prints a Python 2 end-of-life banner.
        if ! out=$("$py2" -m pip install --quiet --disable-pip-version-check \
            --target "$bootstrap_dir" "virtualenv==$virtualenv_version" 2>&1); then
            printf '%s\n' "$out" >&2
            die "could not install virtualenv for $py2 (does it have pip?)"
        fi
        PYTHONPATH=$bootstrap_dir "$py2" -m virtualenv --quiet --no-download "$venv" >/dev/null
        # Through `python -m` rather than bin/ scripts: their shebangs hold the venv's full
        # path, which breaks past the kernel's shebang length limit in a deep cache dir.
        # pip's output on stderr, as every tool's here.
        PYTHONWARNINGS=ignore "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            --no-deps -r "$req_file" >&2
        PYTHONWARNINGS=ignore "$venv/bin/python" -m pip check --disable-pip-version-check >/dev/null \
            || die "$req_file is not a complete dependency set: $("$venv/bin/python" -m pip check 2>&1)"
        PYTHONWARNINGS=ignore "$venv/bin/python" -m autobahntestsuite.wstest --autobahnversion >/dev/null \
            || die "the installed testsuite does not start"
        touch "$venv/.complete"
        rm -rf "$bootstrap_dir"
        bootstrap_dir=
        # Environments of earlier pins would otherwise pile up in the cache.
        for old in "$cache_root"/autobahn-venv-*; do
            if [[ -d $old && $old != "$venv" ]]; then
                rm -rf "$old"
            fi
        done
    fi
    exec {lock_fd}>&-
}

http_ok() {
    python3 - "$1" <<'EOF'
import sys, urllib.request
try:
    sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=1).status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

venv=
ensure_venv
install_done=$SECONDS
[[ $mode != install ]] || exit 0

# Paths given by the caller are relative to where they ran the script, not to the repository.
mkdir -p "$report_dir"
report_dir=$(cd "$report_dir" && pwd)

# binary_path NAME VALUE: the executable the caller named in variable NAME (a path, or a
# command on PATH) as an absolute path; empty stays empty.
binary_path() {
    if [[ -z $2 || $2 == /* ]]; then
        printf '%s\n' "$2"
    elif [[ $2 == */* ]]; then
        printf '%s\n' "$PWD/$2"
    else
        command -v "$2" || die "$1=$2 not found"
    fi
}

# write_wstest_spec PATH KEY URL: wstest's spec; the URL is what the fuzzingclient tests
# (KEY servers) or where the fuzzingserver listens (KEY url).
write_wstest_spec() {
    python3 - "$1" "$report_dir" "$agent" "$3" "$cases" "$2" <<'EOF'
import json, sys
path, outdir, agent, url, cases, key = sys.argv[1:]
spec = {
    "outdir": outdir,
    "cases": [c.strip() for c in cases.split(",") if c.strip()],
    # wsload-server does not implement compression: the fuzzingclient's 12.* and 13.* could
    # only report UNIMPLEMENTED. The load generator's client does (permessage-deflate).
    "exclude-cases": ["12.*", "13.*"] if key == "servers" else [],
    "exclude-agent-cases": {},
}
if key == "servers":
    spec["servers"] = [{"agent": agent, "url": url}]
else:
    spec["url"] = url
with open(path, "w") as f:
    json.dump(spec, f, indent=2)
EOF
}

# start_wstest MODE SPEC [OPTION...]: wstest in the background (its pid in wstest_pid), from the report
# directory because it may drop files in its working directory. In the background and waited
# for, because bash runs a signal trap only once a foreground child has exited: a cancelled
# run would otherwise go on for the whole suite.
start_wstest() {
    (cd "$report_dir" && PYTHONWARNINGS=ignore exec timeout "$suite_timeout" \
        "$venv/bin/python" -m autobahntestsuite.wstest -m "$1" -s "$2" "${@:3}") \
        >"$report_dir/wstest.log" 2>&1 &
    wstest_pid=$!
}

# exit_explained RC WHAT LOG: says why WHAT ended with status RC, and LOG's last lines.
exit_explained() {
    if [[ $1 -eq 124 ]]; then
        log "$2 timed out after ${suite_timeout}s; last lines of $3:"
    else
        log "$2 exited with status $1; last lines of $3:"
    fi
    tail -n 20 "$3" >&2 || true
}

# Only wstest's and this script's own outputs are removed: the directory may be one the
# caller chose.
rm -f "$report_dir"/index.json "$report_dir"/index.html "$report_dir/${agent//-/_}"_case_*.json \
    "$report_dir/${agent//-/_}"_case_*.html "$report_dir"/wstest.log "$report_dir"/server.log \
    "$report_dir"/client.log

cd "$repo_root"
run_ok=true
if [[ $mode == server ]]; then
    server_bin=$(binary_path WSLOAD_SERVER_BIN "${WSLOAD_SERVER_BIN:-}")
    if [[ -z $server_bin ]]; then
        log "building wsload-server"
        server_bin=$("$repo_root/scripts/cargo-build.sh" static)/wsload-server
    fi
    [[ -x $server_bin ]] || die "server binary $server_bin is not executable"

    read -r ws_port metrics_port < <(free_ports 2)

    # WSLOAD_SERVER_* variables are the server's own configuration; one left in the caller's
    # environment (a cap, a route, a profile) would change what is being tested.
    server_env=()
    while IFS= read -r name; do
        if [[ $name == WSLOAD_SERVER_* ]]; then
            server_env+=(-u "$name")
        fi
    done < <(compgen -e)

    # Server pings are disabled: one landing mid-case would be recorded by Autobahn as an
    # unexpected frame, making results depend on how long a case happens to take.
    env "${server_env[@]}" "$server_bin" \
        --profile echo \
        --listen "127.0.0.1:$ws_port" \
        --metrics-listen "127.0.0.1:$metrics_port" \
        --max-message-size 16777216 \
        --ping-interval 0 \
        >"$report_dir/server.log" 2>&1 &
    server_pid=$!

    ready_rc=0
    WAIT_INTERVAL=0.1 wait_until 30 --pid "$server_pid" http_ok "http://127.0.0.1:$metrics_port/readyz" || ready_rc=$?
    if ((ready_rc == 1)); then
        tail -n 20 "$report_dir/server.log" >&2 || true
        die "wsload-server exited before becoming ready (log: $report_dir/server.log)"
    elif ((ready_rc == 2)); then
        die "wsload-server not ready after 30s (log: $report_dir/server.log)"
    fi

    write_wstest_spec "$report_dir/fuzzingclient.json" servers "ws://127.0.0.1:$ws_port"
    log "running cases $cases against $server_bin on 127.0.0.1:$ws_port"
    suite_started=$SECONDS
    wstest_rc=0
    start_wstest fuzzingclient fuzzingclient.json
    wait "$wstest_pid" || wstest_rc=$?
    wstest_pid=
    suite_seconds=$((SECONDS - suite_started))

    if ! kill -0 "$server_pid" 2>/dev/null; then
        run_ok=false
        log "wsload-server exited during the run; last lines of $report_dir/server.log:"
        tail -n 20 "$report_dir/server.log" >&2 || true
    fi
    if [[ $wstest_rc -ne 0 ]]; then
        run_ok=false
        exit_explained "$wstest_rc" wstest "$report_dir/wstest.log"
    fi
else
    client_bin=$(binary_path WSLOAD_BIN "${WSLOAD_BIN:-}")
    if [[ -z $client_bin ]]; then
        log "building wsload"
        client_bin=$("$repo_root/scripts/cargo-build.sh" static)/wsload
    fi
    [[ -x $client_bin ]] || die "wsload binary $client_bin is not executable"

    read -r ws_port < <(free_ports 1)
    write_wstest_spec "$report_dir/fuzzingserver.json" url "ws://127.0.0.1:$ws_port"
    # --webport 0: no status web server of its own (on 8080, which may be taken).
    start_wstest fuzzingserver fuzzingserver.json --webport 0
    # A plain GET gets the fuzzingserver's status page once it listens.
    ready_rc=0
    WAIT_INTERVAL=0.1 wait_until 30 --pid "$wstest_pid" http_ok "http://127.0.0.1:$ws_port/" || ready_rc=$?
    if ((ready_rc != 0)); then
        tail -n 20 "$report_dir/wstest.log" >&2 || true
        die "the fuzzingserver is not listening on 127.0.0.1:$ws_port (log: $report_dir/wstest.log)"
    fi

    log "running cases $cases with $client_bin against the fuzzingserver on 127.0.0.1:$ws_port"
    suite_started=$SECONDS
    client_rc=0
    # In the background and waited for, as wstest is.
    RUST_LOG=${RUST_LOG:-warn} timeout "$suite_timeout" "$client_bin" autobahn-client \
        --url "ws://127.0.0.1:$ws_port" --agent "$agent" >"$report_dir/client.log" 2>&1 &
    client_pid=$!
    wait "$client_pid" || client_rc=$?
    client_pid=
    suite_seconds=$((SECONDS - suite_started))

    if ! kill -0 "$wstest_pid" 2>/dev/null; then
        run_ok=false
        log "the fuzzingserver exited during the run; last lines of $report_dir/wstest.log:"
        tail -n 20 "$report_dir/wstest.log" >&2 || true
    fi
    if [[ $client_rc -ne 0 ]]; then
        run_ok=false
        exit_explained "$client_rc" "wsload autobahn-client" "$report_dir/client.log"
    fi
    # The fuzzingserver serves until stopped; the client's /updateReports wrote the report.
    kill -TERM "$wstest_pid" 2>/dev/null || true
    wait "$wstest_pid" 2>/dev/null || true
    wstest_pid=
fi

summary_rc=0
python3 - "$report_dir" "$agent" "$suite_seconds" <<'EOF' || summary_rc=$?
import json, os, re, sys

report_dir, agent, suite_seconds = sys.argv[1:]
BEHAVIORS = ["OK", "NON-STRICT", "INFORMATIONAL", "UNIMPLEMENTED", "FAILED"]

def case_key(case_id):
    return tuple(int(p) for p in case_id.split("."))

# wstest announces the cases it resolved from the patterns before running any; comparing
# with the report catches a run that ended early (server crash, refused connection).
expected = []
with open(os.path.join(report_dir, "wstest.log"), errors="replace") as f:
    for line in f:
        if line.startswith("Cases = "):
            expected = re.findall(r"'(\d+(?:\.\d+)+)'", line)
            break

index_path = os.path.join(report_dir, "index.json")
try:
    with open(index_path) as f:
        results = json.load(f).get(agent, {})
except (OSError, ValueError) as e:
    print("autobahn: no usable report at %s (%s)" % (index_path, e))
    sys.exit(1)

counts = {b: 0 for b in BEHAVIORS}
for r in results.values():
    counts[r["behavior"]] = counts.get(r["behavior"], 0) + 1
missing = sorted(set(expected) - set(results), key=case_key)

print("autobahn: %d cases against %s in %ss; report: %s"
      % (len(results), agent, suite_seconds, os.path.join(report_dir, "index.html")))
print("  " + "  ".join("%s %d" % (b, n) for b, n in counts.items()))
for case_id in sorted(results, key=case_key):
    r = results[case_id]
    if r["behavior"] != "OK":
        code = r.get("remoteCloseCode")
        print("  %-8s %-13s (close: %s%s)" % (case_id, r["behavior"], r.get("behaviorClose"),
                                           "" if code is None else ", code %s" % code))
if missing:
    print("  did not run: %d of %d cases: %s" % (len(missing), len(expected), " ".join(missing)))
if not expected:
    print("  could not read the planned case list from wstest.log")

sys.exit(1 if counts["FAILED"] or missing or not expected or not results else 0)
EOF

log "install ${install_done}s, suite ${suite_seconds}s, total $((SECONDS - started_at))s"
if [[ $summary_rc -ne 0 || $run_ok != true ]]; then
    exit 1
fi
