#!/usr/bin/env bash
# The HTML report in a real browser: three pages, the fixture result (wsload-report's `fixtures`:
# two shards with samples, every chart kind), the fan-out fixture (its table, deliveries
# section and charts) and a real `wsload run examples/ping-latency.yaml
# --html` (the static release binaries the images ship: scripts/cargo-build.sh static). Each is loaded in Debian's headless
# Chromium (scripts/browser.sh installs it), which fails unless the page rendered without
# errors, fetched nothing, applied its inline style, and drew its charts (inline SVG with
# lines) and tables (with rows). A copy of the page gets a small inline script that checks this
# in the browser and writes its verdict into the DOM, which --dump-dom prints; the probe is
# first shown to fail on a page without charts. Then a screenshot of each page as shipped:
# target/browser/{report,fanout,ping-latency}.png. About 20 s when warm.
#
# usage: scripts/check-browser.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/lib/common.sh
source scripts/lib/common.sh
[[ $# -eq 0 ]] || usage

OUT="$ROOT/target/browser"
# One window width for the check and the screenshot, so the height measured is the page's.
WIDTH=1100
mkdir -p "$OUT"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/wsload-check-browser.XXXXXX")"
at_exit 'rm -rf "$WORK"'
chromium="$(scripts/browser.sh)"

# The fixture pages from the suite's debug build (its examples among them: cargo-build.sh).
FIXTURE="$(scripts/cargo-build.sh debug)/examples/fixture-html"
"$FIXTURE" "$OUT/report.html" >&2
log "rendered $OUT/report.html ($(wc -c <"$OUT/report.html") bytes)"
"$FIXTURE" "$OUT/fanout.html" fanout >&2
log "rendered $OUT/fanout.html ($(wc -c <"$OUT/fanout.html") bytes)"
BIN="$(scripts/cargo-build.sh static)"
# The verdict is the run's business here, not this check's: only the page counts.
"$BIN/wsload" run examples/ping-latency.yaml --html "$OUT/ping-latency.html" >"$WORK/ping-latency.txt" 2>&1 ||
	[[ $? -eq 1 ]] || fail "wsload run examples/ping-latency.yaml failed: $(tail -n 5 "$WORK/ping-latency.txt")"
log "rendered $OUT/ping-latency.html ($(wc -c <"$OUT/ping-latency.html") bytes) from a real run"

# Without the background-networking flags Chromium keeps trying to reach Google's services,
# which a closed network refuses; --no-sandbox because its sandbox needs user namespaces that
# containers (and root) often do not get. A new profile per run, so nothing cached counts.
browse() {
	local profile
	profile="$(mktemp -d "$WORK/profile.XXXXXX")"
	timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
		--disable-background-networking --disable-component-update --disable-sync \
		--hide-scrollbars --user-data-dir="$profile" "$@" 2>>"$WORK/chromium.log"
}

# Errors (scripts, and resources failing to load, which do not bubble) recorded from the start.
PROBE_HEAD='<script>window.__wsloadErrors=[];addEventListener("error",function(e){__wsloadErrors.push(e.message||("failed to load "+(e.target&&(e.target.src||e.target.href||e.target.tagName))))},true);</script>'
PROBE_END='<script>(function(){
var problems=(window.__wsloadErrors||[]).map(function(e){return "error: "+e});
function need(ok,what){if(!ok)problems.push(what)}
var svgs=document.querySelectorAll("svg.chart");
need(svgs.length>=MIN_CHARTS,"charts: "+svgs.length+" (want MIN_CHARTS or more)");
svgs.forEach(function(s,i){var b=s.getBoundingClientRect();
 need(b.width>200&&b.height>80,"chart "+i+" is not drawn ("+b.width+"x"+b.height+")");
 need(s.querySelectorAll("polyline").length>0,"chart "+i+" has no line")});
var tables=document.querySelectorAll("table");
need(tables.length>=4,"tables: "+tables.length+" (want 4 or more)");
tables.forEach(function(t,i){need(t.tBodies.length&&t.tBodies[0].rows.length>0,"table "+i+" has no rows")});
["verdict","cells","latency","throughput","shards","spec"].forEach(function(id){need(document.getElementById(id),"no section #"+id)});
need(getComputedStyle(document.body).maxWidth==="1040px","the inline style did not apply");
var fetched=performance.getEntriesByType("resource").map(function(r){return r.name});
need(fetched.length===0,"fetched "+fetched.join(" "));
var m=document.createElement("pre");m.id="wsload-check";
m.textContent=(problems.length?"FAILED "+problems.join("; "):"RENDERED OK")+" charts="+svgs.length+" tables="+tables.length+" height="+document.documentElement.scrollHeight;
document.body.appendChild(m)})();</script>'

# probe PAGE MIN_CHARTS: the probe's verdict on PAGE (an HTML file), as the browser wrote it.
probe() {
	local page checked="$WORK/checked.html" end="${PROBE_END//MIN_CHARTS/$2}"
	page="$(<"$1")"
	# Quoted replacements: bash 5.2 would otherwise put the match in place of each & in them.
	page="${page/<head>/"<head>$PROBE_HEAD"}"
	page="${page/<\/body>/"$end</body>"}"
	printf '%s' "$page" >"$checked"
	browse --window-size="$WIDTH,1000" --dump-dom "file://$checked" >"$WORK/dom.html" || die "chromium failed (its log: $WORK/chromium.log)"
	sed -n 's/.*<pre id="wsload-check">\([^<]*\)<\/pre>.*/\1/p' "$WORK/dom.html"
}

# The probe must be able to fail: the fixture page with its charts renamed away.
page="$(<"$OUT/report.html")"
printf '%s' "${page//<svg /<xsvg }" >"$WORK/no-charts.html"
verdict="$(probe "$WORK/no-charts.html" 3)"
[[ "$verdict" == FAILED*"charts: 0"* ]] || fail "the probe did not notice a page without charts: '$verdict'"
log "the probe fails a page without charts: $verdict"

# check NAME MIN_CHARTS: target/browser/NAME.html passes the probe; its screenshot NAME.png.
check() {
	local verdict height
	verdict="$(probe "$OUT/$1.html" "$2")"
	[[ -n "$verdict" ]] || fail "$1.html: the page's check did not run (no #wsload-check in the DOM; chromium's log: $WORK/chromium.log)"
	[[ "$verdict" == "RENDERED OK "* ]] || fail "$1.html: $verdict"
	log "$1.html: $verdict"
	height="${verdict##*height=}"
	browse --window-size="$WIDTH,$((height + 16))" --screenshot="$OUT/$1.png" "file://$OUT/$1.html" >&2 ||
		die "chromium could not take the screenshot of $1.html (its log: $WORK/chromium.log)"
	[[ "$(head -c 8 "$OUT/$1.png" | od -An -tx1 | tr -d ' \n')" == 89504e470d0a1a0a ]] ||
		fail "$OUT/$1.png is not a PNG"
	log "screenshot: $OUT/$1.png ($(wc -c <"$OUT/$1.png") bytes)"
}
# The fixture draws every chart kind: latency, and per cell of its two, rates, p99 per sample
# and open connections. The ping run's cells last a fraction of a second, sampled every 100 ms:
# here the larger ones get their three charts, but on a fast machine a cell may end before its
# second sample, so only the latency chart is certain.
check report 7
# The fan-out fixture: its latency chart, and its one cell's rates, p99 and open connections.
check fanout 4
check ping-latency 1
