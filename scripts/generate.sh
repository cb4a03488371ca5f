#!/usr/bin/env bash
# Regenerates every generated file of the repository from its source of truth:
#   crds/loadtest.yaml   the LoadTest CRD, from the types in crates/wsload-spec
#                        (`wsload-operator crd`)
#   charts/wsload/crds/loadtest.yaml
#                        the same CRD, copied into the chart (Helm installs crds/ of a chart)
#   charts/wsload/dashboards/*.json
#                        copies of dashboards/*.json: a chart can only read files inside
#                        itself (.Files.Get), and templates/dashboards.yaml renders these
# Add new generated files here: check-generated.sh compares everything this script writes,
# and, in the directories written with sync_dir, also flags files this script no longer makes.
#
# usage: scripts/generate.sh [OUT_DIR]
#   OUT_DIR  where to write, as the repository root (default: the repository itself);
#            scripts/check-generated.sh passes a temporary directory.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/common.sh
source "$ROOT/scripts/lib/common.sh"
OUT="${1:-$ROOT}"
cd "$ROOT"

# Write through a temporary file so that a failed build leaves the old file, not an empty one.
generate() { # path (relative to OUT), then the command printing its content
	local rel="$1" path="$OUT/$1"
	shift
	mkdir -p "$(dirname "$path")"
	"$@" >"$path.tmp"
	mv "$path.tmp" "$path"
	printf 'generated %s\n' "$rel" >&2
}

# sync_dir DIR SRC...: DIR (relative to OUT) holds exactly copies of the SRC files: a source
# removed is removed from DIR too. check-generated.sh learns these directories through
# $WSLOAD_GENERATED_DIRS (a file it names) and fails on any other file in them.
sync_dir() {
	local rel="$1" dir="$OUT/$1" src have
	shift
	mkdir -p "$dir"
	for src in "$@"; do
		generate "$rel/$(basename "$src")" cat "$src"
	done
	for have in "$dir"/*; do
		[[ -e "$have" ]] || continue
		for src in "$@"; do
			[[ "$(basename "$src")" == "$(basename "$have")" ]] && continue 2
		done
		rm -f "$have"
		printf 'removed %s (no source any more)\n' "$rel/$(basename "$have")" >&2
	done
	if [[ -n "${WSLOAD_GENERATED_DIRS:-}" ]]; then
		printf '%s\n' "$rel" >>"$WSLOAD_GENERATED_DIRS"
	fi
}

cargo build --quiet --locked -p wsload-operator --bin wsload-operator
OPERATOR="${CARGO_TARGET_DIR:-$ROOT/target}/debug/wsload-operator"

generate crds/loadtest.yaml "$OPERATOR" crd

# The chart's copies. Helm cannot read files outside the chart directory, so the chart carries
# its own; the originals stay the source of truth.
sync_dir charts/wsload/crds "$OUT/crds/loadtest.yaml"
shopt -s nullglob
dashboards=("$ROOT"/dashboards/*.json)
shopt -u nullglob
((${#dashboards[@]})) || die "no dashboards/*.json in $ROOT"
sync_dir charts/wsload/dashboards "${dashboards[@]}"
