#!/usr/bin/env bash
# Run `ansible-test sanity` offline against this checkout.
#
# ansible-test must run from a tree ending in ansible_collections/<ns>/<name>/, so
# this script copies the collection's files (tracked + untracked-but-not-ignored,
# minus EXCLUDES below) into a temporary tree, installs an offline get-pip shim
# (tools/get_pip_shim.py) where ansible-test looks for its cached get-pip script,
# and runs every sanity test on one Python version with --junit, then prints a
# one-line summary (passed / failed / skipped, with the skip reasons).
#
# Usage: tools/sanity.sh [--venv DIR] [--python X.Y] [--requirements] [--keep]
#                        [--allow-skip TEST[,TEST...]] [-- ANSIBLE-TEST-ARGS...]
#   --venv DIR        venv holding ansible-core/ansible-test (default: .venv)
#   --python X.Y      Python version to test (default: the venv's own version;
#                     it must be the venv's version, since --local is used)
#   --requirements    also pass --requirements (pip-installs ansible-test's
#                     controller requirements into DIR; not needed when DIR was
#                     made from the project's requirements files)
#   --keep            keep the temporary tree (path printed at the end)
#   --allow-skip T    do not fail when sanity test T is skipped (default: none)
#   --overlay DIR     copy DIR's files over the temporary tree after it is built
#                     (to try a file in the tree without putting it in the repo)
#   -- ARGS           extra ansible-test arguments, e.g. -- --test pep8
#
# Exit status: 0 only if no sanity test failed and none was skipped unless
# allowed with --allow-skip. Sanity venvs are cached by ansible-test in
# ~/.cache/dgxspark-sanity/home-<core>/.ansible/test/venv (cold run: they are created and filled from the wheels of
# tests/sanity/requirements-<core>.txt, downloaded with --require-hashes).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

VENV=".venv"
PYVER=""
REQUIREMENTS=0
KEEP=0
ALLOW_SKIP=""
OVERLAY=""
EXTRA=()

while [ $# -gt 0 ]; do
    case "$1" in
        --venv) VENV="$2"; shift 2 ;;
        --python) PYVER="$2"; shift 2 ;;
        --requirements) REQUIREMENTS=1; shift ;;
        --keep) KEEP=1; shift ;;
        --allow-skip) ALLOW_SKIP="$2"; shift 2 ;;
        --overlay) OVERLAY="$(cd "$2" && pwd)"; shift 2 ;;
        --) shift; EXTRA=("$@"); break ;;
        -h|--help) sed -n '2,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "sanity.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

# Paths (prefixes, relative to the repo root) that the sanity tree leaves out.
# Each is either ignored by git anyway (venvs, caches, test output, lab state) or
# a non-collection directory listed in galaxy.yml build_ignore:
#   lab/   - the Docker test lab and its fake engine fixture (not collection code)
#   bench/ - ad-hoc benchmark scripts (not collection code)
# Everything else (plugins, roles, playbooks, meta, tests/unit, tests/lab,
# molecule, tools, changelogs, docs) is seen by sanity.
EXCLUDES=(
    .venv .venv-latest .collections .git/ .ansible/ .pytest_cache/ .mypy_cache/ .tox/
    tests/output/ build/ collect_logs/ lab/ bench/
)

case "$VENV" in /*) ;; *) VENV="$REPO_ROOT/$VENV" ;; esac
ANSIBLE_TEST="$VENV/bin/ansible-test"
if [ ! -x "$ANSIBLE_TEST" ]; then
    echo "sanity.sh: $ANSIBLE_TEST not found; create the venv first (make venv)" >&2
    exit 2
fi
VENV_PYVER="$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
PYVER="${PYVER:-$VENV_PYVER}"
if [ "$PYVER" != "$VENV_PYVER" ]; then
    echo "sanity.sh: --python $PYVER does not match $VENV (Python $VENV_PYVER); --local needs the venv's own version" >&2
    exit 2
fi
CORE_VERSION="$("$VENV/bin/python" -c 'from ansible.release import __version__; print(__version__)')"
CORE_MINOR="$(echo "$CORE_VERSION" | cut -d. -f1,2)"

# The venv's bin first: ansible-test looks up pythonX.Y and ansible-* on PATH, and
# a pyenv shim for a version that is not globally selected would fail.
export PATH="$VENV/bin:$PATH"

# --- hashed sanity requirements ------------------------------------------------
# ansible-test installs each sanity test's requirements (the exact pins it ships) into venvs of its own with pip. That
# pip sees nothing but a directory of wheels downloaded from this project's lock of them with --require-hashes
# (tests/sanity/requirements-<core>.txt, made by tools/locks.py): ansible-test passes HOME to pip and no PIP_*
# variable, so ansible-test runs under a HOME of its own whose pip.conf says no-index and names that directory.
SANITY_CACHE="${DGXSPARK_SANITY_CACHE:-$HOME/.cache/dgxspark-sanity}"
SANITY_LOCK="tests/sanity/requirements-$CORE_MINOR.txt"
[ -f "$SANITY_LOCK" ] || { echo "sanity.sh: no $SANITY_LOCK for ansible-core $CORE_VERSION (tools/locks.py)" >&2; exit 2; }
WHEELS="$SANITY_CACHE/wheels-$CORE_MINOR-$(sha256sum "$SANITY_LOCK" | cut -c1-16)"
"$VENV/bin/python" tools/locks.py sanity-wheels --venv "$VENV" --dest "$WHEELS"
SANITY_HOME="$SANITY_CACHE/home-$CORE_MINOR"
mkdir -p "$SANITY_HOME/.config/pip"
printf '[global]\nno-index = true\nfind-links = %s\n' "$WHEELS" >"$SANITY_HOME/.config/pip/pip.conf"
export HOME="$SANITY_HOME"
unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE XDG_CONFIG_HOME

# --- offline get-pip shim ----------------------------------------------------
# ansible-test bootstraps pip in its venvs with get-pip-<pip version>.py, which it
# downloads unless ~/.ansible/test/cache/get_pip_<pip_version_with_underscores>.py
# exists. Read the wanted pip version(s) from this ansible-test.
PIP_VERSIONS="$("$VENV/bin/python" - <<'EOF'
import inspect, re
from ansible_test._internal import python_requirements as pr
print(' '.join(sorted(set(re.findall(r"pip\s*=\s*'([0-9.]+)'", inspect.getsource(pr.get_venv_packages))))))
EOF
)"
if [ -z "$PIP_VERSIONS" ]; then
    echo "sanity.sh: could not find the pip version ansible-test $CORE_VERSION bootstraps" >&2
    exit 2
fi
CACHE_DIR="$HOME/.ansible/test/cache"
mkdir -p "$CACHE_DIR"
for pipver in $PIP_VERSIONS; do
    shim="$CACHE_DIR/get_pip_${pipver//./_}.py"
    if [ -e "$shim" ] && ! grep -q 'dgxspark.vllm get-pip shim' "$shim"; then
        echo "sanity.sh: keeping existing (real?) get-pip script $shim"
    elif ! cmp -s "$REPO_ROOT/tools/get_pip_shim.py" "$shim"; then
        cp "$REPO_ROOT/tools/get_pip_shim.py" "$shim"
    fi
done

# --- temporary collection tree -----------------------------------------------
NAMESPACE="$("$VENV/bin/python" -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["namespace"])')"
NAME="$("$VENV/bin/python" -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["name"])')"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/sanity-${NAMESPACE}-${NAME}.XXXXXX")"
trap '[ "$KEEP" = 1 ] || rm -rf "$TMP"' EXIT
TREE="$TMP/ansible_collections/$NAMESPACE/$NAME"
mkdir -p "$TREE"

excluded() {
    local path="$1" prefix
    for prefix in "${EXCLUDES[@]}"; do
        case "$prefix" in
            */) [[ "$path" == "$prefix"* ]] && return 0 ;;
            *) [[ "$path" == "$prefix" || "$path" == "$prefix/"* ]] && return 0 ;;
        esac
    done
    return 1
}

# --exclude only prunes the untracked (-o) walk (so git does not descend into an
# un-ignored venv); excluded() filters both lists.
GIT_EXCLUDES=()
for prefix in "${EXCLUDES[@]}"; do GIT_EXCLUDES+=("--exclude=/${prefix%/}"); done
count=0
while IFS= read -r -d '' path; do
    excluded "$path" && continue
    # tracked files deleted in the work tree are listed by -c; skip them
    [ -e "$path" ] || [ -L "$path" ] || continue
    mkdir -p "$TREE/$(dirname "$path")"
    cp -a "$path" "$TREE/$path"
    count=$((count + 1))
done < <(git ls-files -z -co --exclude-standard --deduplicate "${GIT_EXCLUDES[@]}")
if [ -n "$OVERLAY" ]; then
    cp -a "$OVERLAY/." "$TREE/"
    echo "sanity.sh: overlaid $OVERLAY onto the tree"
fi

# No `git init`: without a .git directory ansible-test lists files by walking the
# tree (UnversionedSource), which sees exactly the files copied above.

# --- run ---------------------------------------------------------------------
ARGS=(sanity --local --python "$PYVER" --color no --junit)
[ "$REQUIREMENTS" = 1 ] && ARGS+=(--requirements)
ARGS+=("${EXTRA[@]}")

IGNORE_FILE="tests/sanity/ignore-$CORE_MINOR.txt"
if [ -f "$IGNORE_FILE" ]; then
    ignores="$(grep -cv '^[[:space:]]*\(#\|$\)' "$IGNORE_FILE" || true)"
else
    ignores=0
fi
echo "sanity.sh: ansible-core $CORE_VERSION, Python $PYVER, $count files in $TREE, $ignores entries in $IGNORE_FILE"
echo "sanity.sh: ansible-test ${ARGS[*]}"
start=$(date +%s)
set +e
(cd "$TREE" && "$ANSIBLE_TEST" "${ARGS[@]}")
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))

# --- summary from the junit results -------------------------------------------
summary="$("$VENV/bin/python" - "$TREE/tests/output/junit" "$ALLOW_SKIP" <<'EOF'
import glob, os, sys
import xml.etree.ElementTree as ET

junit_dir, allow = sys.argv[1], {t for t in sys.argv[2].split(',') if t}
passed, failed, skipped, bad_skips = [], [], {}, []
for path in sorted(glob.glob(os.path.join(junit_dir, '*.xml'))):
    for case in ET.parse(path).getroot().iter('testcase'):
        name = case.get('name')
        if case.find('failure') is not None or case.find('error') is not None:
            failed.append(name)
        elif case.find('skipped') is not None:
            reason = case.find('skipped').get('message') or (case.find('skipped').text or '')
            skipped[name] = reason.strip()
            # "No tests applicable." means there is no file of that kind (e.g. no .ps1).
            if name not in allow and reason.strip() != 'No tests applicable.':
                bad_skips.append(name)
        else:
            passed.append(name)
passed, failed = sorted(set(passed)), sorted(set(failed))
for name, reason in sorted(skipped.items()):
    print('SKIP %s: %s' % (name, reason), file=sys.stderr)
print('%d passed, %d failed%s, %d skipped%s' % (
    len(passed), len(failed), (' (' + ', '.join(failed) + ')') if failed else '',
    len(skipped), (' (' + ', '.join(sorted(skipped)) + ')') if skipped else ''))
sys.exit(1 if failed or bad_skips or not (passed or failed) else 0)
EOF
)" && summary_rc=0 || summary_rc=$?

if [ "$rc" = 0 ] && [ "$summary_rc" != 0 ]; then
    rc=1
fi
[ "$KEEP" = 1 ] && echo "sanity.sh: kept $TMP"
if [ "$rc" = 0 ]; then status=PASSED; else status=FAILED; fi
echo "SANITY $status: ansible-core $CORE_VERSION / Python $PYVER: ${summary:-no junit results} in ${elapsed}s"
exit "$rc"
