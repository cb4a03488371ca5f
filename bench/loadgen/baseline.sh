#!/usr/bin/env bash
# Builds the wsload binary of an earlier commit (release) and prints its path, for the template
# phase's WSLOAD_BENCH_BASELINE_BIN: the echo path before a change, measured side by side with
# the one after. Cached under ${WSLOAD_CACHE:-$HOME/.cache/wsload}/bench-baseline/REV (a second
# call prints the path at once). Build output goes to stderr; stdout is only the path.
#
#   bench/loadgen/baseline.sh 5d05203
set -euo pipefail

rev=${1:?usage: bench/loadgen/baseline.sh REV (a commit of this repository)}
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
commit=$(git -C "$repo_root" rev-parse --verify "$rev^{commit}") || {
    echo "baseline.sh: $rev is not a commit of this repository" >&2
    exit 2
}
cache=${WSLOAD_CACHE:-$HOME/.cache/wsload}/bench-baseline/$commit
bin=$cache/wsload
if [[ ! -x $bin ]]; then
    src=$(mktemp -d)
    trap 'git -C "$repo_root" worktree remove --force "$src" >/dev/null 2>&1 || true; rm -rf "$src"' EXIT
    git -C "$repo_root" worktree add --detach "$src" "$commit" >&2
    echo "baseline.sh: building wsload at ${commit:0:12} (release; several minutes cold)" >&2
    # The repository's target directory: dependencies built once serve both builds.
    CARGO_TARGET_DIR=$repo_root/target/bench-baseline \
        cargo build --release --locked -p wsload --manifest-path "$src/Cargo.toml" >&2
    mkdir -p "$cache"
    cp "$repo_root/target/bench-baseline/release/wsload" "$bin.tmp"
    mv "$bin.tmp" "$bin"
fi
printf '%s\n' "$bin"
