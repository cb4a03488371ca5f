#!/usr/bin/env bash
# Fails when a generated file differs from what scripts/generate.sh makes now: the source
# (e.g. the spec types behind the CRD) changed without regenerating. Writes nothing in the
# work tree: generates into a temporary directory and compares.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/wsload-generated.XXXXXX")"
trap 'rm -rf "$TMP" "$TMP.diff"' EXIT

"$ROOT/scripts/generate.sh" "$TMP" 2>/dev/null

stale=0
while IFS= read -r -d '' file; do
	rel="${file#"$TMP"/}"
	if [[ ! -f "$ROOT/$rel" ]]; then
		printf 'check-generated: %s is missing; run scripts/generate.sh and commit it\n' "$rel" >&2
		stale=1
	elif ! diff -u --label "$rel (committed)" --label "$rel (generated now)" "$ROOT/$rel" "$file" >"$TMP.diff"; then
		head -n 40 "$TMP.diff" >&2
		printf 'check-generated: %s is stale; run scripts/generate.sh and commit it\n' "$rel" >&2
		stale=1
	fi
done < <(find "$TMP" -type f -print0)

if ((stale)); then
	exit 1
fi
printf 'generated files are in sync\n'
