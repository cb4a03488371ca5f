#!/usr/bin/env bash
# wsload run's live progress as a person sees it: examples/sustained-hold.yaml in a tmux pane of
# 120x30, captured a few times over ~12 s. Checks that the bar names the cell and its place
# (tier 1/2), that its elapsed and remaining times move, that no line holds the bar's text run
# together with another message, and that Ctrl-C leaves the terminal clean; then that the same
# run with stderr on a pipe prints no progress at all; and the same bar for a run on two shard
# processes, fed from their metrics. The captures stay in target/terminal/.
#
# usage: scripts/e2e/terminal.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/lib/common.sh
source scripts/lib/common.sh
[[ $# -eq 0 ]] || usage

need_packages tmux
step "building wsload and wsload-server (static release, as the images ship them)"
BIN="$(scripts/cargo-build.sh static)"
OUT="$ROOT/target/terminal"
rm -rf "$OUT"
mkdir -p "$OUT"
EXAMPLE=examples/sustained-hold.yaml

# A tmux server of our own: the person's sessions are never touched.
SOCK="wsload-terminal-$$"
tm() { tmux -L "$SOCK" "$@"; }
at_exit 'tm kill-server 2>/dev/null'
tm new-session -d -x 120 -y 30 -s run "env -i PATH=/usr/bin:/bin TERM=xterm-256color HOME=$HOME bash --norc --noprofile"
capture() { tm capture-pane -p -t run >"$OUT/$1.txt"; }
tm send-keys -t run "cd $ROOT && PS1='$ ' && clear" Enter
tm send-keys -t run "WSLOAD_SERVER_BIN=$BIN/wsload-server $BIN/wsload run $EXAMPLE; echo \"wsload exited \$?\"" Enter

step "capturing the pane while the first tier runs"
shown() { capture probe && grep -q 'tier 1/2' "$OUT/probe.txt"; }
wait_until 60 shown || fail "no 'tier 1/2' on the terminal in 60 s: $(cat "$OUT/probe.txt")"
for i in 1 2 3 4; do
	capture "$i"
	sleep 4
done
cat "$OUT/4.txt" >&2

# The bar's first line ends with the run's elapsed and remaining time; its second line is
# indented. Anything else sharing a line with either ran into it.
head_re='run [0-9]+:[0-9]{2}'
for i in 1 2 3 4; do
	f="$OUT/$i.txt"
	grep -q 'tier 1/2: 1000 connections' "$f" || fail "capture $i does not name the cell and its place: $f"
	if grep -E "$head_re" "$f" | grep -vqE '^tier [0-9]+/[0-9]+: [0-9]+ connections  (connecting|warm-up|measuring|settling) '; then
		fail "capture $i: the bar's first line shares a line with something else: $f"
	fi
	if grep -E 'pings [0-9]+ sent|connections/s' "$f" | grep -vqE '^  (pings|[0-9]+/[0-9]+ opened)'; then
		fail "capture $i: the bar's second line shares a line with something else: $f"
	fi
	grep -qE '^managed wsload-server on ws://' "$f" || fail "capture $i: the managed server's line is not on a line of its own: $f"
	[[ $(grep -cE "$head_re" "$f") -eq 1 ]] || fail "capture $i: the bar is drawn more than once: $f"
done
times() { grep -oE '[0-9]+:[0-9]{2} / [0-9]+:[0-9]{2}, [0-9]+:[0-9]{2} left.*' "$OUT/$1.txt"; }
first=$(times 1) last=$(times 4)
[[ -n "$first" && "$first" != "$last" ]] || fail "elapsed and remaining time did not move: '$first' then '$last'"
log "first capture: $first"
log "last capture:  $last"

step "Ctrl-C: the terminal is left clean"
tm send-keys -t run C-c
ended() { capture end && grep -q '^wsload exited 130$' "$OUT/end.txt"; }
wait_until 20 ended || fail "wsload did not end on Ctrl-C with 130 at the start of a line: $(cat "$OUT/end.txt")"
cat "$OUT/end.txt" >&2
if grep -qE "$head_re|pings [0-9]+ sent|connections/s" "$OUT/end.txt"; then
	fail "the bar is still on the terminal after Ctrl-C: $OUT/end.txt"
fi
tm send-keys -t run "echo clean" Enter
clean() { capture after && grep -q '^clean$' "$OUT/after.txt"; }
wait_until 10 clean || fail "the shell does not answer cleanly after Ctrl-C: $(cat "$OUT/after.txt")"

step "shards: 2, as two processes: the same bar, from the shards' metrics"
# The example, shorter, on two shard processes; the conductor draws the bar.
sed -e 's/^  scenario: sustainedHold$/  scenario: sustainedHold\n  shards: 2/' \
	-e 's/^  connections: .*/  connections: [200, 400]/' -e 's/^  duration: .*/  duration: 6s/' \
	"$EXAMPLE" >"$OUT/two-shards.yaml"
grep -q '^  shards: 2$' "$OUT/two-shards.yaml" || fail "could not make a two-shard copy of $EXAMPLE"
tm send-keys -t run "clear; WSLOAD_SERVER_BIN=$BIN/wsload-server $BIN/wsload run $OUT/two-shards.yaml; echo \"wsload exited \$?\"" Enter
fleet_shown() { capture shards && grep -qE '^tier 1/2: 200 connections  (connecting|warm-up|measuring|settling) ' "$OUT/shards.txt"; }
wait_until 60 fleet_shown || fail "no bar for the two-shard run in 60 s: $(cat "$OUT/shards.txt")"
cat "$OUT/shards.txt" >&2
grep -qE '^wsload: 2 shards released at [0-9]+ \(Unix ms\), cell 200$' "$OUT/shards.txt" ||
	fail "the conductor's line is not on a line of its own: $OUT/shards.txt"
[[ $(grep -cE "$head_re" "$OUT/shards.txt") -eq 1 ]] || fail "the two-shard bar is drawn more than once: $OUT/shards.txt"
fleet_done() { capture shards-end && grep -q '^wsload exited 0$' "$OUT/shards-end.txt"; }
wait_until 90 fleet_done || fail "the two-shard run did not pass: $(cat "$OUT/shards-end.txt")"
if grep -qE "$head_re|pings [0-9]+ sent" "$OUT/shards-end.txt"; then
	fail "the bar is still on the terminal after the two-shard run: $OUT/shards-end.txt"
fi
grep -q '^Verdict: PASS' "$OUT/shards-end.txt" || fail "no verdict after the two-shard run: $OUT/shards-end.txt"

step "stderr on a pipe: no progress"
# A session of its own, stopped whole (wsload and its managed server) with SIGTERM: started in
# the background by a script, it ignores SIGINT.
setsid bash -c 'WSLOAD_SERVER_BIN="$1/wsload-server" "$1/wsload" run "$2" 2>&1 | cat' _ "$BIN" "$EXAMPLE" \
	>"$OUT/pipe.txt" &
pipe=$!
at_exit "kill -TERM -- -$pipe 2>/dev/null"
sleep 10
kill -TERM -- "-$pipe" 2>/dev/null || true
wait "$pipe" || true
grep -q '^managed wsload-server' "$OUT/pipe.txt" || fail "the piped run printed nothing of itself: $OUT/pipe.txt"
if grep -qE "tier [0-9]+/|$head_re|"$'\r|\x1b' "$OUT/pipe.txt"; then
	fail "the piped run printed progress or terminal codes: $OUT/pipe.txt"
fi
log "passed; the captures are in $OUT"
