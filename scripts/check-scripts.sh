#!/usr/bin/env bash
# Checks the project's own scripts (scripts/, bench/, examples/kind/, .ci/), in seconds:
#   1. shellcheck -x on every shell script (Debian's shellcheck, installed when missing and
#      root; without it this part says so and goes on), and every Python script compiles
#   2. one definition of each helper: no shell function and no top-level Python function is
#      defined in two files (scripts/lib/common.sh and scripts/lib/common.py hold the shared
#      ones; an entry point named main is each program's own)
#   3. the stdout contract (scripts/lib/common.sh): apt-get is run by need_packages alone, and
#      every script whose stdout a caller captures ($(...), eval "$(...)", Python's run or a
#      redirect to a file that is eval'd) calls stdout_is_data; then, on a simulated cold
#      machine (an apt-get and a dpkg-query on PATH that print what Debian's print while
#      installing), need_packages and a data script's stdout hold their value and nothing else
#
# usage: scripts/check-scripts.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/lib/common.sh
source scripts/lib/common.sh
[[ $# -eq 0 ]] || usage

WORK="$(mktemp -d "${TMPDIR:-/tmp}/wsload-check-scripts.XXXXXX")"
at_exit 'rm -rf "$WORK"'
problems=0
problem() {
	log "FAILED: $*"
	problems=$((problems + 1))
}

# The project's shell and Python scripts: tracked files (and new ones not ignored) under the
# script folders, by extension or by a shell shebang.
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- scripts bench examples/kind .ci | sort -u)
shell=() python=()
for f in "${files[@]}"; do
	[[ -f "$f" ]] || continue
	case "$f" in
	*.sh) shell+=("$f") ;;
	*.py) python+=("$f") ;;
	*.*) ;;
	*) if head -n1 "$f" | grep -qE '^#!.*\b(bash|sh)\b'; then shell+=("$f"); fi ;;
	esac
done
log "${#shell[@]} shell and ${#python[@]} Python scripts"

# --- 1. shellcheck, py_compile ---
if ! command -v shellcheck >/dev/null && ((EUID == 0)); then
	(need_packages shellcheck) || log "could not install shellcheck; going on without it"
fi
if command -v shellcheck >/dev/null; then
	shellcheck -x -P SCRIPTDIR "${shell[@]}" || problem "shellcheck found the problems above"
else
	log "SKIPPED shellcheck: not installed (apt-get install shellcheck)"
fi
for f in "${python[@]}"; do
	python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$f" ||
		problem "$f does not parse"
done

# --- 2. one definition of each helper ---
{
	grep -HnE '^[[:space:]]*(function[[:space:]]+)?[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\(\)[[:space:]]*\{' "${shell[@]}" |
		sed -E 's/^([^:]*):([0-9]+):[[:space:]]*(function[[:space:]]+)?([A-Za-z0-9_]+).*/sh \4 \1:\2/'
	grep -HnE '^(def|class) [A-Za-z_]' "${python[@]}" |
		sed -E 's/^([^:]*):([0-9]+):(def|class) ([A-Za-z0-9_]+).*/py \4 \1:\2/'
} | grep -v -E '^(sh|py) main ' >"$WORK/defs" || true
# A name defined in two files of one language; a file redefining its own name is the file's
# business (shellcheck sees that).
dups="$(awk '{ split($3, a, ":"); key = $1 " " $2; if (!((key, a[1]) in seen)) { seen[key, a[1]] = 1; n[key]++; where[key] = where[key] " " $3 } }
	END { for (k in n) if (n[k] > 1) print k ":" where[k] }' "$WORK/defs" | sort)"
if [[ -n "$dups" ]]; then
	problem "helpers defined in more than one file (move them to scripts/lib/common.sh or common.py):"
	printf '    %s\n' "$dups" >&2
fi
log "$(wc -l <"$WORK/defs") function definitions, $(awk '{print $1, $2}' "$WORK/defs" | sort -u | wc -l) names"

# --- 3. the stdout contract ---
# apt-get only through need_packages (its output on stderr). Comments and messages naming
# apt-get are fine: only command positions count.
apt_calls="$(grep -nE '(^|[;&|{]|\$\(|then|do|else)[[:space:]]*(sudo[[:space:]]+|env[[:space:]]+[^ ]*[[:space:]]+)*apt-get[[:space:]]+(-[^ ]+[[:space:]]+)*(install|update)' \
	"${shell[@]}" | grep -v '^scripts/lib/common.sh:' || true)"
[[ -z "$apt_calls" ]] || problem "apt-get outside need_packages (scripts/lib/common.sh):
$apt_calls"

# The scripts whose stdout a caller reads. Shell: $(SCRIPT ...) and eval "$(SCRIPT ...)", with
# SCRIPT a path ending in .sh (after an optional `nice -n N`); Python: run([... "X.sh" ...]).
# A redirect to a file read back later is listed by hand: control-plane.sh up in
# check-chart.sh.
captured=(scripts/k8s/control-plane.sh)
while IFS= read -r ref; do
	captured+=("$ref")
done < <(
	for f in "${shell[@]}"; do
		dir="$(dirname "$f")"
		grep -oE '\$\((nice -n [0-9]+ )?"?[^ ")]*\.sh"?' "$f" |
			sed -E 's/^\$\((nice -n [0-9]+ )?"?//; s/"$//' |
			sed -E "s|^\\\$ROOT/||; s|^\\\$repo_root/||; s|^\\\$WSLOAD_ROOT/||; s|^\\\$\\{?K8S_DIR\\}?/|scripts/k8s/|; s|^\\\$\\{?HERE\\}?/|$dir/|; s|^\\./||" || true
	done
	for f in "${python[@]}"; do
		grep -oE 'run\(\[os\.path\.join\((HERE|k8s), "[a-z0-9_-]+\.sh"' "$f" |
			sed -E 's/^run\(\[os\.path\.join\(HERE, "/scripts\//; s/^run\(\[os\.path\.join\(k8s, "/scripts\/k8s\//; s/"$//' || true
	done
)
mapfile -t captured < <(printf '%s\n' "${captured[@]}" | sort -u)
for s in "${captured[@]}"; do
	if [[ ! -f "$s" ]]; then
		problem "a caller captures the stdout of $s, which this check cannot find (update its path rules)"
	elif ! grep -q '^[[:space:]]*stdout_is_data' "$s"; then
		problem "$s: a caller reads its stdout, but it does not call stdout_is_data (scripts/lib/common.sh)"
	fi
done
log "${#captured[@]} scripts whose stdout is read by a caller: ${captured[*]}"

# A cold machine, simulated: Debian's tools print progress on stdout while they install.
mkdir -p "$WORK/bin"
cat >"$WORK/bin/apt-get" <<'EOF'
#!/bin/sh
echo "Selecting previously unselected package $*."
echo "(Reading database ... 12345 files and directories currently installed.)"
EOF
cat >"$WORK/bin/dpkg-query" <<'EOF'
#!/bin/sh
echo "not-installed"
EOF
cat >"$WORK/value.sh" <<EOF
#!/usr/bin/env bash
set -euo pipefail
source "$ROOT/scripts/lib/common.sh"
stdout_is_data
need_packages wsload-no-such-package
echo "a tool's progress on stdout"
emit /the/value
EOF
chmod +x "$WORK/bin/"* "$WORK/value.sh"
out="$(PATH="$WORK/bin:$PATH" bash -c "source scripts/lib/common.sh; need_packages wsload-no-such-package" 2>"$WORK/err")" ||
	problem "need_packages failed with a fake apt-get: $(cat "$WORK/err")"
[[ -z "$out" ]] || problem "need_packages wrote to stdout while installing: $out"
grep -q 'Selecting previously unselected' "$WORK/err" || problem "need_packages did not pass apt-get's output on to stderr"
out="$(PATH="$WORK/bin:$PATH" "$WORK/value.sh" 2>"$WORK/err")" || problem "a data script failed: $(cat "$WORK/err")"
[[ "$out" == /the/value ]] || problem "a data script's stdout holds more than its value: $(printf '%q' "$out")"

# Every Debian package a script installs is one scripts/fresh-machine.sh knows: it purges it
# to prove the cold path, or knows it is part of every project machine.
known="$(scripts/fresh-machine.sh --packages)"
while read -r file pkg; do
	grep -qx -- "$pkg" <<<"$known" ||
		problem "$file installs the Debian package $pkg, which scripts/fresh-machine.sh neither purges nor lists as BASE"
done < <(python3 - "${shell[@]}" <<'PY'
import re, sys
# need_packages WORD... with WORD a literal package or "${ARRAY[@]}" of an array set in the
# same file by ARRAY=(...) or ARRAY+=(...).
for path in sys.argv[1:]:
    if path.endswith("check-scripts.sh"):  # its own simulated cold machine installs a fake
        continue
    text = open(path).read()
    arrays = {}
    for name, body in re.findall(r'^\s*([A-Z_]+)\+?=\(([^)]*)\)', text, re.M):
        arrays.setdefault(name, []).extend(body.split())
    def expand(word, depth=0):
        m = re.fullmatch(r'"?\$\{([A-Z_]+)\[@\]\}"?', word)
        if not m:
            return [word]
        return [p for w in arrays.get(m.group(1), []) for p in (expand(w, depth + 1) if depth < 5 else [])]
    for line in text.splitlines():
        m = re.match(r'^\s*(?:\(|if !? ?)?need_packages\s+([^;|&)#]*)', line)
        if m:
            for w in m.group(1).split():
                for p in expand(w):
                    if re.fullmatch(r'[a-z0-9][a-z0-9.+-]+', p):
                        print(path, p)
PY
)

if ((problems)); then
	fail "$problems problems (above)"
fi
log "passed"
