# shellcheck shell=bash
# require_go MINOR WHAT: dies (with the caller's `die`) unless `go` is on PATH and at least
# 1.MINOR. Sourced by the scripts that build Go programs from the module proxy (Kubernetes,
# Prometheus): an older go would try to download the toolchain their go.mod asks for, which
# the proxy here may well refuse, so it is refused up front with what to install.
require_go() {
	local want_minor="$1" what="$2" v major minor
	command -v go >/dev/null || die "go is needed to build $what (Go >= 1.$want_minor, e.g. /usr/local/go/bin on PATH)"
	v="$(GOTOOLCHAIN=local go env GOVERSION)"
	v="${v#go}"
	major="${v%%.*}"
	minor="${v#*.}"
	minor="${minor%%.*}"
	if ((major < 1 || (major == 1 && minor < want_minor))); then
		die "go $v is too old to build $what (needs >= 1.$want_minor)"
	fi
}
