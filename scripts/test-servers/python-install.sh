#!/usr/bin/env bash
# Installs the PyPI packages the Python test servers here run on (python-requirements.txt:
# Ariadne on uvicorn, Django Channels on Daphne) into a virtualenv of Debian's python3, in a
# cache directory named by the hash of the requirements and of the interpreter, so changed
# pins get a fresh environment and an unchanged one is reused; earlier ones are removed.
# Debian's interpreter, not whichever python3 comes first on PATH (a pyenv shim): the
# environment links to it, and it is the one every machine of the project installs the same
# way (Debian's `python3-venv` when missing).
#
# usage: scripts/test-servers/python-install.sh
#   Prints the virtualenv's python on stdout; everything else on stderr.
#
# Environment:
#   WSLOAD_CACHE  cache root (default: ~/.cache/wsload)
#
# Cold: ~25 s on this machine (pip's own cache empty: 33 wheels downloaded, none built);
# warm: one hash, ~0.1 s.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOG_NAME=test-servers/python-install
# shellcheck source=scripts/lib/common.sh
source "$HERE/../lib/common.sh"
stdout_is_data

[[ $# -eq 0 ]] || usage
python=/usr/bin/python3
req_file=$HERE/python-requirements.txt
if [[ ! -x $python ]] || ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
	need_packages python3 python3-venv
fi
cache_root=${WSLOAD_CACHE:-$HOME/.cache/wsload}
key=$({
	cat "$req_file"
	# The environment links to this interpreter's installation, not just its version.
	"$python" -c 'import sys; print(sys.version); print(sys.prefix)'
} | sha256sum | cut -c1-16)
venv=$cache_root/python-servers-$key

if [[ ! -f $venv/.complete ]]; then
	mkdir -p "$cache_root"
	# Two runs sharing a cache must not install into the same directory at once.
	exec {lock_fd}>"$cache_root/python-servers.lock"
	flock "$lock_fd"
	if [[ ! -f $venv/.complete ]]; then
		log "installing the Python test servers' packages into $venv"
		rm -rf "$venv"
		"$python" -m venv "$venv" >&2 || die "$python -m venv failed"
		# Through `python -m` rather than bin/ scripts: their shebangs hold the venv's full
		# path, which breaks past the kernel's shebang length limit in a deep cache dir.
		# Wheels only: nothing here needs a compiler, and a source build would hide a pin
		# without a wheel for this interpreter behind minutes of building.
		"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
			--only-binary=:all: --no-deps -r "$req_file" >&2 ||
			die "pip install -r $req_file failed"
		"$venv/bin/python" -m pip check --disable-pip-version-check >&2 ||
			die "$req_file is not a complete dependency set (pip check above)"
		"$venv/bin/python" -c 'import ariadne.asgi, uvicorn, websockets, channels, daphne.server, django' ||
			die "the packages installed in $venv do not load"
		touch "$venv/.complete"
		# Environments of earlier pins would otherwise pile up in the cache.
		for old in "$cache_root"/python-servers-*; do
			if [[ -d $old && $old != "$venv" ]]; then
				rm -rf "$old"
			fi
		done
	fi
	exec {lock_fd}>&-
fi
emit "$venv/bin/python"
