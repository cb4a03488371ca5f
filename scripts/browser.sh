#!/usr/bin/env bash
# Prints the path of a headless-capable Chromium (Debian's), installing it first when missing.
# Installer output goes to stderr; stdout is the binary's path and nothing else:
#
#   chromium="$(scripts/browser.sh)"
#
# The flags it works with on a machine without a network are chromium_flags in
# scripts/check-browser.sh.
#
# usage: scripts/browser.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/common.sh
source "$ROOT/scripts/lib/common.sh"
stdout_is_data
[[ $# -eq 0 ]] || usage

# fonts-dejavu-core: chromium only recommends fonts, and a page without one renders no text.
need_packages chromium fonts-dejavu-core
bin=/usr/bin/chromium
[[ -x "$bin" ]] || die "the chromium package is installed but $bin is not there"
emit "$bin"
