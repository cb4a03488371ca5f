#!/usr/bin/env bash
# Fails when a generated file differs from what scripts/generate.sh makes now: the source
# (e.g. the spec types behind the CRD) changed without regenerating. Writes nothing in the
# work tree: generates into a temporary directory and compares.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/common.sh
source "$ROOT/scripts/lib/common.sh"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/wsload-generated.XXXXXX")"
at_exit 'rm -rf "$TMP" "$TMP.diff" "$TMP.dirs"'

# generate.sh names the directories it owns wholly (sync_dir) in this file.
: >"$TMP.dirs"
if ! WSLOAD_GENERATED_DIRS="$TMP.dirs" "$ROOT/scripts/generate.sh" "$TMP" 2>"$TMP.diff"; then
	cat "$TMP.diff" >&2
	die "scripts/generate.sh failed (above)"
fi

stale=0
while IFS= read -r -d '' file; do
	rel="${file#"$TMP"/}"
	if [[ ! -f "$ROOT/$rel" ]]; then
		log "$rel is missing; run scripts/generate.sh and commit it"
		stale=1
	elif ! diff -u --label "$rel (committed)" --label "$rel (generated now)" "$ROOT/$rel" "$file" >"$TMP.diff"; then
		head -n 40 "$TMP.diff" >&2
		log "$rel is stale; run scripts/generate.sh and commit it"
		stale=1
	fi
done < <(find "$TMP" -type f -print0)

# In a wholly generated directory every committed file must still be made by generate.sh
# (a dashboard deleted from dashboards/ must leave the chart too).
while IFS= read -r dir; do
	[[ -d "$ROOT/$dir" ]] || continue
	while IFS= read -r -d '' file; do
		rel="${file#"$ROOT"/}"
		if [[ ! -e "$TMP/$rel" ]]; then
			log "$rel is no longer generated (its source is gone); run scripts/generate.sh, which removes it, and commit"
			stale=1
		fi
	done < <(find "$ROOT/$dir" -type f -print0)
done <"$TMP.dirs"

if ((stale)); then
	exit 1
fi
printf 'generated files are in sync\n'
