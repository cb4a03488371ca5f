# shellcheck shell=bash
# What the cluster tests of scripts/e2e/ (smoke.sh, placement.sh, netpol.sh) share: the
# install they check, their output directory, following a LoadTest to its end and checking how
# it ended. Sourced after scripts/lib/common.sh, by a script that sets TEST_NS, the namespace
# of its LoadTests, and calls e2e_begin.

# The chart's install the checks run on, as scripts/e2e/smoke.sh makes it.
NS=wsload-system
RELEASE=wsload
# The kubectl that common.sh's kubectl() runs.
KUBECTL="${KUBECTL:-kubectl}"

# e2e_begin NAME [TOOL...]: OUT, where each finished LoadTest is kept as $OUT/NAME.json
# (WSLOAD_E2E_OUT, else a new /tmp/wsload-NAME.XXXXXX), made; kubectl, jq and each TOOL found,
# else a failure naming the one missing.
e2e_begin() {
	local name=$1 tool
	shift
	OUT="${WSLOAD_E2E_OUT:-$(mktemp -d "/tmp/wsload-$name.XXXXXX")}"
	mkdir -p "$OUT"
	for tool in "$KUBECTL" jq "$@"; do
		command -v "$tool" >/dev/null || fail "$tool not found (set KUBECTL or HELM to it, or install it)"
	done
}

status() { kubectl -n "$TEST_NS" get loadtest "$1" -o json | jq "${2:-.status}"; }
phase() { kubectl -n "$TEST_NS" get loadtest "$1" -o jsonpath='{.status.phase}' 2>/dev/null || true; }
# phase_is NAME PHASE...: the LoadTest's phase is one of PHASE.
phase_is() {
	local p want
	p="$(phase "$1")"
	shift
	for want; do [[ "$p" != "$want" ]] || return 0; done
	return 1
}
wait_phase() { # name phase seconds
	WAIT_INTERVAL=0.5 wait_until "$3" phase_is "$1" "$2" && return 0
	# Ended before it got there: why, as status says it.
	kubectl -n "$TEST_NS" get loadtest "$1" -o json |
		jq '.status | {phase, reason, message, shards}' >&2 || true
	fail "LoadTest $1 not $2 after $3 s (phase '$(phase "$1")')"
}
# wait_done NAME [SECONDS]: until Succeeded or Failed (at most SECONDS, default 300); then
# keeps the status in $OUT/NAME.json.
wait_done() {
	local limit="${2:-300}"
	if ! WAIT_INTERVAL=1 wait_until "$limit" phase_is "$1" Succeeded Failed; then
		kubectl -n "$TEST_NS" describe loadtest "$1" | tail -n 30 >&2 || true
		# Who should have moved it on: every pod (a Pending operator shows here) and what the
		# operator replicas logged.
		kubectl get pods -A -o wide >&2 || true
		kubectl -n "$NS" logs -l app.kubernetes.io/instance="$RELEASE",app.kubernetes.io/component=operator \
			--prefix --tail=80 >&2 || true
		fail "LoadTest $1 not finished after $limit s (phase '$(phase "$1")')"
	fi
	kubectl -n "$TEST_NS" get loadtest "$1" -o json >"$OUT/$1.json"
}
diagnose() { # name: what a reader needs when an expectation fails
	jq '.status | {phase, reason, message, verdict, missingShards, shards, conditions}' "$OUT/$1.json" >&2 || true
	kubectl -n "$NS" logs "deploy/$RELEASE" --tail=40 >&2 || true
}
# expect NAME PHASE FAILED-REASON|- VERDICT: the outcome, from the kept status.
expect() {
	local got
	got="$(jq -r '[.status.phase, (.status.conditions // [] | map(select(.type == "Failed" and .status == "True"))[0].reason // "-"), .status.verdict // "-"] | join(" ")' "$OUT/$1.json")"
	if [[ "$got" != "$2 $3 $4" ]]; then
		diagnose "$1"
		fail "LoadTest $1 ended '$got' (phase, Failed reason, verdict); want '$2 $3 $4'"
	fi
	echo "LoadTest $1: $got, as expected"
}
