#!/usr/bin/env bash
# The suite's two builds of the workspace, and the directory of their binaries on stdout.
#
#   debug   every library, binary, test and example of the workspace: exactly the units
#           `cargo test --workspace` builds, so the parts that run a debug binary (generated,
#           chart, dashboards, browser) and the tests share one build.
#   static  the release binaries of every image in scripts/lib/images.sh's table, static
#           (musl), in one cargo invocation with each image's features: what the images ship,
#           and what the browser, terminal and autobahn parts run (a glibc release build of the
#           same code beside it cost the suite a third of its cold Rust time).
#
# Why so few: cargo builds a crate again for every different set of features it is asked for,
# and each `-p PACKAGE` set unifies other features. Each part building "just what it runs"
# (`-p wsload-operator` for the CRD, `-p wsload-server` then `-p wsload` for Autobahn, each
# image on its own) built most of the dependency tree several times over.
#
# usage: scripts/cargo-build.sh debug|static     e.g. BIN="$(scripts/cargo-build.sh static)"
# cargo's output goes to stderr.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/common.sh
source "$ROOT/scripts/lib/common.sh"
# shellcheck source=scripts/lib/images.sh
source "$ROOT/scripts/lib/images.sh"
stdout_is_data

[[ $# -eq 1 ]] || usage
cd "$ROOT"

# The target directory and, for `static`, the cargo arguments that build every image's binary:
# each package's features as the table names them (`default`: its own defaults, when it has
# any), everything else off.
facts() {
	cargo metadata --format-version 1 --no-deps | python3 -c '
import json, sys
meta = json.load(sys.stdin)
print(meta["target_directory"])
features = {p["name"]: p["features"] for p in meta["packages"]}
args, wanted = [], []
for row in sys.argv[1].strip().splitlines():
    name, package, binary, _dir, _repo, feats = row.split()
    if package not in features:
        sys.exit("image %s: package %s is not a member of the cargo workspace" % (name, package))
    args += ["-p", package, "--bin", binary]
    for f in feats.split(","):
        if f != "default" or "default" in features[package]:
            wanted.append("%s/%s" % (package, f))
args += ["--no-default-features"] + (["--features", ",".join(wanted)] if wanted else [])
print(" ".join(args))
' "$IMAGE_TABLE"
}

case "$1" in
debug)
	cargo build --locked --workspace --lib --bins --tests --examples
	# sed reads all of it: `head -n 1` closed the pipe before facts wrote its second line, once
	# on a loaded machine (a BrokenPipeError in the log).
	emit "$(facts | sed -n 1p)/debug"
	;;
static)
	{
		read -r target
		read -r -a args
	} < <(facts)
	ensure_musl_toolchain
	# C in the dependency tree (mimalloc, ring) is compiled against musl's headers; cc-rs
	# looks for musl-gcc for this target.
	CC_x86_64_unknown_linux_musl="${CC_x86_64_unknown_linux_musl:-musl-gcc}" \
		cargo build --locked --release --target "$MUSL_TARGET" "${args[@]}"
	while read -r _ _ binary _; do
		[[ -n "$binary" ]] && assert_static "$target/$MUSL_TARGET/release/$binary"
	done <<<"$IMAGE_TABLE"
	emit "$target/$MUSL_TARGET/release"
	;;
*) usage ;;
esac
