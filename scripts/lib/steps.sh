# Sourced by the smoke scripts (examples/kind/smoke.sh, scripts/e2e/smoke.sh,
# scripts/k8s/{node-smoke,smoke}.sh): step headers, a failure that names its script, and
# per-phase timings for the closing PASS line. Set STEP_NAME before sourcing.
step() { printf '\n==> %s\n' "$*"; }
fail() {
	printf '%s: FAILED: %s\n' "${STEP_NAME:?set STEP_NAME before sourcing steps.sh}" "$*" >&2
	exit 1
}
TIMES=()
MARK=$SECONDS
timed() { # label: records the seconds since the last mark
	TIMES+=("$1 $((SECONDS - MARK))s")
	MARK=$SECONDS
}
