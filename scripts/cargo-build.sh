#!/usr/bin/env bash
# The suite's two builds of the workspace, and the directory of their binaries on stdout.
#
#   debug    every library, binary, test and example of the workspace: exactly the units
#            `cargo test --workspace` builds, so the parts that run a debug binary (generated,
#            chart, dashboards, browser) and the tests share one build. Cargo builds a crate
#            again for every different set of features it is asked for, and asking for one
#            package (`-p wsload-operator`) unifies other features than the workspace does:
#            each part building "just what it runs" cost the suite a debug build of the
#            operator's dependencies twice over.
#   release  wsload and wsload-server together, as README's first command builds them (the
#            browser, terminal and autobahn parts run these); `-p wsload-server` alone would
#            be yet another set of features, so another build.
#
# usage: scripts/cargo-build.sh debug|release     e.g. BIN="$(scripts/cargo-build.sh release)"
# cargo's output goes to stderr.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/common.sh
source "$ROOT/scripts/lib/common.sh"
stdout_is_data

[[ $# -eq 1 ]] || usage
cd "$ROOT"
case "$1" in
debug)
	cargo build --locked --workspace --lib --bins --tests --examples
	profile_dir=debug
	;;
release)
	cargo build --locked --release -p wsload -p wsload-server
	profile_dir=release
	;;
*) usage ;;
esac
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
emit "$target/$profile_dir"
