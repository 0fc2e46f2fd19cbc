#!/usr/bin/env bash
# Install a built collection tarball offline into a collections path.
#
# Usage: tools/install-collection.sh [--venv DIR] TARBALL COLLECTIONS_DIR
#
# Ansible Galaxy cannot be reached from the build machines, so the tarball's
# dependencies (collection_info.dependencies in its MANIFEST.json:
# community.docker, ansible.posix) are offered to the resolver as already
# installed: COLLECTIONS_DIR/ansible_collections gets symlinks to the copies
# bundled in the venv's `ansible` package. The resolver then checks the
# version ranges of galaxy.yml against them and installs only the collection
# itself (no --no-deps). The install runs from a temporary directory with
# ANSIBLE_CONFIG unset, so no ansible.cfg of a checkout takes part.
#
# Used by tools/build-check.sh (step 3), `make release` and
# tests/lab/test_lab_release_install.py. Exit status 0 only when
# COLLECTIONS_DIR/ansible_collections/<namespace>/<name>/MANIFEST.json exists
# afterwards; the last line of the output names the installed collection.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO_ROOT/.venv"
ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --venv) VENV="$2"; shift 2 ;;
        -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "install-collection.sh: unknown option: $1 (see --help)" >&2; exit 2 ;;
        *) ARGS+=("$1"); shift ;;
    esac
done
if [ "${#ARGS[@]}" != 2 ]; then
    echo "usage: tools/install-collection.sh [--venv DIR] TARBALL COLLECTIONS_DIR" >&2
    exit 2
fi
case "$VENV" in /*) ;; *) VENV="$PWD/$VENV" ;; esac
TARBALL="$(cd "$(dirname "${ARGS[0]}")" && pwd)/$(basename "${ARGS[0]}")"
mkdir -p "${ARGS[1]}"
COLL="$(cd "${ARGS[1]}" && pwd)"
PY="$VENV/bin/python"
fail() { echo "INSTALL FAILED: $*" >&2; exit 1; }
[ -x "$VENV/bin/ansible-galaxy" ] || { echo "install-collection.sh: $VENV/bin/ansible-galaxy not found (make venv)" >&2; exit 2; }
[ -f "$TARBALL" ] || fail "no such tarball: $TARBALL"
export PATH="$VENV/bin:$PATH"
unset ANSIBLE_CONFIG

# namespace, name, then one "namespace.name range" line per dependency, from the tarball's MANIFEST.json
manifest="$("$PY" - "$TARBALL" <<'EOF'
import json, sys, tarfile

with tarfile.open(sys.argv[1]) as tar:
    info = json.load(tar.extractfile('MANIFEST.json'))['collection_info']
print(info['namespace'])
print(info['name'])
for dep, spec in sorted((info.get('dependencies') or {}).items()):
    print(dep, spec)
EOF
)" || fail "$TARBALL has no readable MANIFEST.json"
NAMESPACE="$(sed -n 1p <<<"$manifest")"
NAME="$(sed -n 2p <<<"$manifest")"

mkdir -p "$COLL/ansible_collections"
while read -r dep spec; do
    [ -n "$dep" ] || continue
    ns="${dep%%.*}" coll="${dep#*.}"
    target="$COLL/ansible_collections/$ns/$coll"
    if [ -e "$target" ] && [ ! -L "$target" ]; then
        echo "dependency $dep ($spec): already installed in $COLL"
        continue
    fi
    # where the venv's python finds it (the `ansible` package's ansible_collections)
    src="$("$PY" - "$ns" "$coll" <<'EOF'
import os, sys
import ansible_collections
for base in ansible_collections.__path__:
    path = os.path.join(base, sys.argv[1], sys.argv[2])
    if os.path.isfile(os.path.join(path, 'MANIFEST.json')):
        print(path)
        break
EOF
)"
    [ -n "$src" ] || fail "dependency $dep ($spec) is not bundled in $VENV (install the pinned 'ansible' package)"
    mkdir -p "$COLL/ansible_collections/$ns"
    ln -sfn "$src" "$target"
    echo "dependency $dep ($spec): offered as installed from $src"
done < <(sed -n '3,$p' <<<"$manifest")

WORK="$(mktemp -d "${TMPDIR:-/tmp}/install-collection.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
if ! (cd "$WORK" && ANSIBLE_COLLECTIONS_PATH="$COLL" ansible-galaxy collection install --offline --force \
        -p "$COLL" "$TARBALL") >"$WORK/install.log" 2>&1; then
    cat "$WORK/install.log" >&2
    fail "ansible-galaxy collection install --offline -p $COLL $TARBALL"
fi
cat "$WORK/install.log"
[ -f "$COLL/ansible_collections/$NAMESPACE/$NAME/MANIFEST.json" ] || fail "$NAMESPACE.$NAME was not installed into $COLL"
echo "installed $NAMESPACE.$NAME from $(basename "$TARBALL") into $COLL/ansible_collections"
