#!/usr/bin/env bash
# The operator conducting N shards: a real kube-apiserver, the operator, and a fake fleet of N
# shard pods (operator/tests/support/fake_shards.rs) in one process, running a 5-tier
# pingLatency LoadTest to its end for each N, one after another (operator/tests/shards_sim.rs,
# built in release). What each field means: bench/operator/README.md.
#
# usage: bench/operator/shards.sh [N...]
#   N  shard counts (default: 10 100 1000)
#
# stdout holds one line per N and nothing else; the build, the operator's progress and the
# simulation's detail go to stderr:
#   shards=N phase=P release_ms=R skew_ms=S collect_s=C results_bytes=B reconciles=K \
#     status_bytes=T sim_mib=M apiserver_mib=A etcd_mib=E
# Exits non-zero when an N does not end Succeeded with every shard Collected (its line is
# printed all the same, and the control plane's logs are kept: the path is on stderr).
#
# Environment (optional):
#   WSLOAD_CACHE  the cache of the Kubernetes test binaries (default ~/.cache/wsload); they are
#                 built there first when missing (scripts/k8s/build.sh: minutes, once)
set -euo pipefail

LOG_NAME=bench-operator
# shellcheck source=scripts/lib/common.sh
source "$(dirname "$0")/../../scripts/lib/common.sh"
stdout_is_data
repo_root=$(cd "$(dirname "$0")/../.." && pwd)

(($# > 0)) || set -- 10 100 1000
for n in "$@"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || usage
done
cd "$repo_root"

# shellcheck source=bench/operator/lib.sh
source bench/operator/lib.sh
operator_bench release shards_sim shards "simulating $* shards" \
	"the simulation did not end as it should" "$@"
