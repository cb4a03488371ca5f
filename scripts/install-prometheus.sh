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

PACKAGE=prometheus

log() { printf 'install-prometheus: %s\n' "$*" >&2; }

if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$PACKAGE" 2>/dev/null || true)" != installed ]]; then
	sudo=()
	if [[ $EUID -ne 0 ]]; then
		command -v sudo >/dev/null || {
			log "needs root: apt-get install -y $PACKAGE"
			exit 1
		}
		sudo=(sudo)
	fi
	log "installing $PACKAGE (Debian package)"
	# Package lists may be absent (a fresh machine) or stale (a superseded version is no longer
	# downloadable): refresh only when the plain install fails.
	if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$PACKAGE"; then
		"${sudo[@]}" apt-get update -qq
		if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$PACKAGE"; then
			log "apt-get install $PACKAGE failed (is it in this machine's Debian release? apt-cache policy $PACKAGE says:)"
			apt-cache policy "$PACKAGE" >&2 || true
			exit 1
		fi
	fi
fi

bin=/usr/bin/prometheus
[[ -x $bin ]] || {
	log "the $PACKAGE package is installed but $bin is missing"
	exit 1
}
printf '%s\n' "$bin"
