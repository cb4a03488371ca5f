#!/usr/bin/env bash
# Installs Debian's `prometheus` package (the server and promtool) when it is missing, for the
# dashboard check (scripts/check-dashboards.py). Idempotent: a no-op costing one dpkg-query
# once installed. The package's service is never started (no systemd here; the check runs its
# own Prometheus with a temporary config and data directory).
#
# Debian's Prometheus (2.42 on bookworm) is built without kubernetes_sd_configs, which the
# check does not need: it scrapes fixed loopback addresses and a file_sd target list.
# Prints the path of the prometheus binary on success.
set -euo pipefail
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# The path is this script's stdout; apt's output and the messages go to stderr.
stdout_is_data

PACKAGE=prometheus

need_packages "$PACKAGE"

bin=/usr/bin/prometheus
[[ -x $bin ]] || die "the $PACKAGE package is installed but $bin is missing"
emit "$bin"
