#!/usr/bin/env bash
# The operator under load: N LoadTests at once (half in one namespace, half over 5 others),
# each with 2 fake shards, conducted by one cluster-wide `wsload-operator` process against a
# real kube-apiserver, after one test alone (operator/tests/many_tests.rs, the suite's test at
# a load of N). What each field means: bench/operator/README.md.
#
# usage: bench/operator/many.sh [N]
#   N  LoadTests at once (default: 50)
#
# stdout holds two lines, the test alone and the load, and nothing else; the build and the
# test's detail go to stderr:
#   loadtests=N namespaces=M succeeded=S deleted=D slowest_s=.. median_s=.. alone_s=.. \
#     rss_mib=.. hwm_mib=.. cpu_s=.. reconciles=K reconcile_p50_ms=.. reconcile_p99_ms=..
# Exits non-zero when a check of the test fails (a test not reaching its own verdict, one
# starved, a deleted one leaving something behind): the lines are printed all the same.
#
# Environment (optional):
#   WSLOAD_CACHE  the cache of the Kubernetes test binaries (default ~/.cache/wsload); they are
#                 built there first when missing (scripts/k8s/build.sh: minutes, once)
#   PROFILE       cargo profile to build with (default dev: the figures in the README are a
#                 debug build's; `PROFILE=release` for a release build's)
set -euo pipefail

LOG_NAME=bench-operator-many
# shellcheck source=scripts/lib/common.sh
source "$(dirname "$0")/../../scripts/lib/common.sh"
stdout_is_data
repo_root=$(cd "$(dirname "$0")/../.." && pwd)

(($# <= 1)) || usage
n=${1:-50}
[[ $n =~ ^[1-9][0-9]*$ ]] || usage
profile=${PROFILE:-dev}
cd "$repo_root"

# shellcheck source=bench/operator/lib.sh
source bench/operator/lib.sh
export WSLOAD_MANY_LOADTESTS=$n
operator_bench "$profile" many_tests loadtests "$n LoadTests at once" "a check failed" --nocapture
