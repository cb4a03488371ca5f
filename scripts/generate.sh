#!/usr/bin/env bash
# Regenerates every generated file of the repository from its source of truth:
#   crds/loadtest.yaml   the LoadTest CRD, from the types in crates/wsload-spec
#                        (`wsload-operator crd`)
# Add new generated files (e.g. the chart's copy of the CRD) here: check-generated.sh
# compares everything this script writes.
#
# usage: scripts/generate.sh [OUT_DIR]
#   OUT_DIR  where to write, as the repository root (default: the repository itself);
#            scripts/check-generated.sh passes a temporary directory.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT}"
cd "$ROOT"

# Write through a temporary file so that a failed build leaves the old file, not an empty one.
emit() { # path (relative to OUT), then the command printing its content
	local rel="$1" path="$OUT/$1"
	shift
	mkdir -p "$(dirname "$path")"
	"$@" >"$path.tmp"
	mv "$path.tmp" "$path"
	printf 'generated %s\n' "$rel" >&2
}

cargo build --quiet --locked -p wsload-operator --bin wsload-operator
OPERATOR="${CARGO_TARGET_DIR:-$ROOT/target}/debug/wsload-operator"

emit crds/loadtest.yaml "$OPERATOR" crd
