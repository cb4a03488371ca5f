#!/usr/bin/env bash
# Builds, ahead of the parts that ask for them, the cached tools a run of the suite needs
# (Kubernetes, Prometheus, helm, kube-router, CoreDNS, ... from the Go module proxy; the real
# servers' npm packages), in the order the parts ask, so that their minutes of CPU fill the
# time the suite's other parts only wait (a browser, a cluster booting, a build's one-crate
# stretches, cargo's tests waiting on sockets) instead of adding to it. scripts/test starts it in
# the background, niced, when it runs more than one part.
#
# It only warms caches: every part still calls the same installer itself, which waits on the
# installer's lock while this one builds the same thing and then finds it cached, or builds it
# in the foreground when this lane has not reached it yet. So a part's outcome never depends
# on this lane; a failure here also fails the part that needs the tool, with the same message.
#
# usage: scripts/prepare.sh PART...   (the parts of scripts/test that will run)
# Output: progress and every tool's output on stderr; stdout stays empty.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOG_NAME=prepare
# shellcheck source=scripts/lib/common.sh
source "$ROOT/scripts/lib/common.sh"
stdout_is_data

(($#)) || usage
# scripts/test starts this as a session of its own (setsid, so that one kill ends all it
# started). With the kernel's autogroup scheduling a session is weighed against the others as
# a whole, so the nice 19 it runs at would only rank its own processes among themselves: its Go
# builds took as much CPU as the part in front (a cold clippy 308 s instead of ~140 s). Its
# session's weight goes to nice 19 too.
if [[ -w /proc/self/autogroup && "$(ps -o sid= -p $$ | tr -d ' ')" == "$$" ]]; then
	echo 19 >/proc/self/autogroup || log "could not lower this session's autogroup: the lane competes with the parts"
	log "autogroup: $(cat /proc/self/autogroup)"
fi
PARTS=" $* "
runs() { [[ "$PARTS" == *" $1 "* ]]; }

# warm WHAT COMMAND...: runs an installer for its cache only (its stdout, a path, is dropped).
warm() {
	local what="$1" t=$SECONDS
	shift
	log "$what"
	"$@" >/dev/null || die "$what failed (above): '$*'"
	log "$what: $((SECONDS - t))s"
}

# In the order of the parts in scripts/test. The cluster parts skip themselves without root,
# so their tools are only built for root.
runs generated && warm "helm-values-schema-json" "$ROOT/scripts/tools.sh" helm-values-schema-json
# The real servers the cargo part's first tests start (real_servers runs first, the longest):
# before kube-apiserver, which only the operator's tests, beside the others, wait for.
runs cargo && warm "real servers (npm, RabbitMQ)" "$ROOT/scripts/test-servers/install.sh" --stomp
runs cargo && warm "real servers (PyPI)" "$ROOT/scripts/test-servers/python-install.sh"
runs cargo && warm "nats-server" "$ROOT/scripts/tools.sh" nats-server
if runs cargo || runs chart || runs dashboards || runs control-plane; then
	warm "control plane packages" "$ROOT/scripts/k8s/install-deps.sh"
	warm "kube-apiserver, kubectl" "$ROOT/scripts/k8s/build.sh" kube-apiserver kubectl
fi
runs chart && warm "helm, kubeconform" "$ROOT/scripts/tools.sh" helm kubeconform
if runs chart || { runs node && ((EUID == 0)); } || { runs kind && ((EUID == 0)); }; then
	warm "Prometheus" "$ROOT/scripts/k8s/prometheus.sh" image
fi
# The images' static release binaries (cargo-build.sh static), for browser, terminal, autobahn
# and the image parts: minutes of both cores cold, mostly while cargo's tests wait on sockets.
# Cargo's own lock on the build directory makes a part asking meanwhile wait, then find them.
for part in browser terminal autobahn server-image loadgen-image operator-image; do
	if runs "$part"; then
		warm "static release binaries" "$ROOT/scripts/cargo-build.sh" static
		break
	fi
done
runs autobahn && warm "the Autobahn suite (Python 2.7)" "$ROOT/scripts/autobahn.sh" --install
if ((EUID == 0)) && runs node; then
	warm "node packages" "$ROOT/scripts/k8s/install-deps.sh" --node
	warm "node binaries" "$ROOT/scripts/k8s/build.sh" kube-controller-manager kube-scheduler kubelet kube-proxy
	warm "pause image" "$ROOT/scripts/k8s/pause.sh"
	warm "helm, kube-router" "$ROOT/scripts/tools.sh" helm kube-router
fi
if ((EUID == 0)) && runs kind; then
	warm "kind node binaries" "$ROOT/scripts/k8s/build.sh" kube-controller-manager kube-scheduler kubelet kube-proxy kubeadm
	warm "kind, CoreDNS" "$ROOT/scripts/tools.sh" kind coredns helm
fi
log "done"
