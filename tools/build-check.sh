#!/usr/bin/env bash
# Build the collection, check what the tarball ships, install it offline into a
# clean collections path and check that ansible-doc sees and renders its content.
#
# Usage: tools/build-check.sh [--venv DIR] [--keep] [--only NAME]...
#
# 1. ansible-galaxy collection build --output-path <tmp>/dist
# 2. the tarball must hold MANIFEST.json/FILES.json and nothing under FORBIDDEN
#    below (lab, bench, tests other than tests/sanity, dev tooling, venvs, caches)
# 3. tools/install-collection.sh <tarball> <tmp>/collections: an offline
#    install; the dependencies from galaxy.yml (community.docker, ansible.posix)
#    are offered to the resolver as the copies bundled in the venv's `ansible`
#    package, which checks the galaxy.yml version ranges against them.
# 4. with ANSIBLE_COLLECTIONS_PATH=<tmp>/collections (from a directory without an
#    ansible.cfg): `ansible-doc -l dgxspark.vllm` must list every
#    plugins/modules/*.py of the checkout, and the page of every module, and of
#    every other documented plugin and role of the collection, must render.
#    A page fails when ansible-doc exits non-zero, when its output is not the
#    page (no "> TYPE name" header), or when ansible-doc prints Ansible's own
#    [ERROR] or [WARNING] lines (how it reports documentation problems). Other
#    output on stderr (Python warnings of libraries) is shown as
#    "WARNING (not a rendering error)" and fails nothing.
#    --only NAME (repeatable; a full name such as dgxspark.vllm.image_sync or
#    the short one) renders only the pages of that name.
# Exit status 0 only if every check passes; prints the module list.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

VENV=".venv"
KEEP=0
ONLY=()
while [ $# -gt 0 ]; do
    case "$1" in
        --venv) VENV="$2"; shift 2 ;;
        --keep) KEEP=1; shift ;;
        --only) ONLY+=("$2"); shift 2 ;;
        -h|--help) sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-check.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$VENV" in /*) ;; *) VENV="$REPO_ROOT/$VENV" ;; esac
PY="$VENV/bin/python"
if [ ! -x "$VENV/bin/ansible-galaxy" ]; then
    echo "build-check.sh: $VENV/bin/ansible-galaxy not found; create the venv first (make venv)" >&2
    exit 2
fi
export PATH="$VENV/bin:$PATH"

# Paths the tarball must not contain (prefixes; a trailing / means a directory,
# "*/" prefixes match at any depth, "*.ext" matches a suffix anywhere).
FORBIDDEN=(
    lab/ bench/ molecule/ tools/ build/ dist/ collect_logs/ inventories/lab/
    tests/unit/ tests/lab/ tests/integration/ tests/output/
    .venv .collections/ .pytest_cache/ .ansible/ .git/ .github/ .ci/ .tox/ .mypy_cache/ .config/
    Makefile requirements-test.txt requirements-sanity-latest.txt requirements-test.in requirements-sanity-latest.in .gitignore
    changelogs/.plugin-cache.yaml
    "*/__pycache__/" "*.pyc" "*.tar.gz" "*.retry"
)

NAMESPACE="$("$PY" -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["namespace"])')"
NAME="$("$PY" -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["name"])')"
FQCN="$NAMESPACE.$NAME"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/build-check-$NAMESPACE-$NAME.XXXXXX")"
trap '[ "$KEEP" = 1 ] || rm -rf "$TMP"' EXIT
fail() { echo "BUILD-CHECK FAILED: $*" >&2; exit 1; }

# --- 1. build --------------------------------------------------------------------
ansible-galaxy collection build --output-path "$TMP/dist" . >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log" >&2; fail "ansible-galaxy collection build"; }
cat "$TMP/build.log"
if grep -q '\[WARNING\]' "$TMP/build.log"; then
    fail "ansible-galaxy collection build printed warnings (see above)"
fi
TARBALL="$(ls "$TMP/dist/$NAMESPACE-$NAME"-*.tar.gz)"

# --- 2. contents -----------------------------------------------------------------
"$PY" - "$TARBALL" "${FORBIDDEN[@]}" <<'EOF' || fail "tarball contents"
import sys, tarfile

tarball, forbidden = sys.argv[1], sys.argv[2:]
with tarfile.open(tarball) as tar:
    names = [m.name[2:] if m.name.startswith('./') else m.name for m in tar.getmembers()]
    names = [n + '/' if m.isdir() else n for n, m in zip(names, tar.getmembers())]


def hit(name, pattern):
    if pattern.startswith('*/'):
        return ('/' + name).find('/' + pattern[2:]) != -1
    if pattern.startswith('*'):
        return name.rstrip('/').endswith(pattern[1:])
    if pattern.endswith('/'):
        return name.startswith(pattern) or name == pattern.rstrip('/')
    return name == pattern or name.startswith(pattern + '/') or name.startswith(pattern)


bad = sorted({n for n in names for p in forbidden if hit(n, p)})
missing = [f for f in ('MANIFEST.json', 'FILES.json') if f not in names]
files = [n for n in names if not n.endswith('/')]
print('tarball: %s, %d files' % (tarball.rsplit('/', 1)[-1], len(files)))
groups = {}
for name in bad:
    top = name.split('/', 1)[0] + ('/' if '/' in name else '')
    groups.setdefault(top, []).append(name)
for top, members in sorted(groups.items()):
    shown = ', '.join(members[:3]) + (', ... (%d in all)' % len(members) if len(members) > 3 else '')
    print('FORBIDDEN in tarball: %s' % shown, file=sys.stderr)
for name in missing:
    print('MISSING from tarball: ' + name, file=sys.stderr)
sys.exit(1 if bad or missing else 0)
EOF

# --- 3. offline install ------------------------------------------------------------
COLL="$TMP/collections"
"$REPO_ROOT/tools/install-collection.sh" --venv "$VENV" "$TARBALL" "$COLL" || fail "offline install"

# --- 4. ansible-doc ----------------------------------------------------------------
export ANSIBLE_COLLECTIONS_PATH="$COLL"
cd "$TMP"  # no ansible.cfg here, so the checkout's .collections link is not used
where="$(ansible-galaxy collection list "$FQCN" 2>/dev/null | sed -n 's/^# //p' | head -n 1)"
[ "$where" = "$COLL/ansible_collections" ] || fail "$FQCN resolves from '$where', not from $COLL/ansible_collections"

modules_json="$(ansible-doc -t module -l "$FQCN" -j 2>"$TMP/list.err")" || { cat "$TMP/list.err" >&2; fail "ansible-doc -l $FQCN"; }
listed="$(printf '%s' "$modules_json" | "$PY" -c 'import json, sys; print("\n".join(sorted(json.load(sys.stdin))))')"
echo "modules listed by ansible-doc -l $FQCN:"
if [ -n "$listed" ]; then
    printf '%s\n' "$modules_json" | "$PY" -c 'import json, sys; [print("  %-40s %s" % (k, v)) for k, v in sorted(json.load(sys.stdin).items())]'
else
    echo "  (none)"
fi

errors=0
expected=0
for file in "$REPO_ROOT"/plugins/modules/*.py; do
    [ -e "$file" ] || continue
    base="$(basename "$file" .py)"
    [ "$base" = "__init__" ] && continue
    expected=$((expected + 1))
    if ! grep -qx "$FQCN.$base" <<<"$listed"; then
        echo "NOT LISTED: $FQCN.$base (plugins/modules/$base.py)" >&2
        errors=$((errors + 1))
    fi
done

# Render every module plus every other documented plugin and role of the collection (only the --only pages when
# given). A page fails on a non-zero exit, on output that is not the page, or on Ansible's own [ERROR]/[WARNING]
# lines; anything else on stderr (a library's Python warning at import) is shown and fails nothing.
rendered=0
declare -A MATCHED=() NOISE=()
noise_pages=0
wanted() {  # name: true when no --only was given or NAME is one of them (full or short name)
    [ "${#ONLY[@]}" = 0 ] && return 0
    local n
    for n in "${ONLY[@]}"; do
        if [ "$n" = "$1" ] || [ "$FQCN.$n" = "$1" ]; then MATCHED["$n"]=1; return 0; fi
    done
    return 1
}
DEPRECATION_HINT="[WARNING]: Deprecation warnings can be disabled by setting \`deprecation_warnings=False\` in ansible.cfg."
render() {  # type name
    local type="$1" name="$2" rc=0 problems=() key
    wanted "$name" || return 0
    ansible-doc -t "$type" "$name" >"$TMP/page.out" 2>"$TMP/page.err" || rc=$?
    sed -i 's/\x1b\[[0-9;]*m//g' "$TMP/page.out" "$TMP/page.err"
    # A plugin the collection deprecates (meta/runtime.yml) is announced as deprecated when its page is shown, with
    # Ansible's hint on how to silence such warnings: that hint is expected there, and only there.
    if grep -Fq "[DEPRECATION WARNING]: $name has been deprecated." "$TMP/page.err"; then
        grep -vxF -- "$DEPRECATION_HINT" "$TMP/page.err" >"$TMP/page.err.kept" || true
        mv "$TMP/page.err.kept" "$TMP/page.err"
    fi
    [ "$rc" = 0 ] || problems+=("ansible-doc exited $rc")
    # the page's header: "> MODULE dgxspark.vllm.image_sync (path)", "> ROLE: dgxspark.vllm.preflight (path)"
    grep -Eq "^> [A-Z]+:? ${name//./\\.}( |\$)" "$TMP/page.out" || problems+=("no page for $name on stdout")
    grep -Eq '^\[(ERROR|WARNING)\]' "$TMP/page.err" && problems+=("Ansible reported problems on stderr")
    if [ "${#problems[@]}" != 0 ]; then
        joined="$(IFS=';'; echo "${problems[*]}")"
        echo "DOES NOT RENDER: ansible-doc -t $type $name: ${joined//;/; }" >&2
        sed 's/^/    /' "$TMP/page.err" >&2
        errors=$((errors + 1))
    elif [ -s "$TMP/page.err" ]; then
        noise_pages=$((noise_pages + 1))
        key="$(md5sum <"$TMP/page.err" | cut -c1-32)"
        if [ -z "${NOISE[$key]:-}" ]; then
            NOISE["$key"]=1
            echo "WARNING (not a rendering error): ansible-doc -t $type $name printed on stderr:" >&2
            sed 's/^/    /' "$TMP/page.err" >&2
        fi
    fi
    rendered=$((rendered + 1))
}
# the listed modules and the checkout's module files (a file ansible-doc -l skips is rendered too, to show why)
modules="$( (printf '%s\n' "$listed"; for file in "$REPO_ROOT"/plugins/modules/*.py; do
    [ -e "$file" ] && [ "$(basename "$file")" != __init__.py ] && echo "$FQCN.$(basename "$file" .py)"; done) | sort -u)"
while IFS= read -r name; do [ -n "$name" ] && render module "$name"; done <<<"$modules"
for type in filter test lookup inventory callback connection become cache strategy vars; do
    [ -d "$REPO_ROOT/plugins/$type" ] || continue
    names="$(ansible-doc -t "$type" -l "$FQCN" -j 2>/dev/null | "$PY" -c 'import json, sys; print("\n".join(sorted(json.load(sys.stdin))))' || true)"
    while IFS= read -r name; do [ -n "$name" ] && render "$type" "$name"; done <<<"$names"
done
if [ -d "$REPO_ROOT/roles" ]; then
    for role in "$REPO_ROOT"/roles/*/meta/argument_specs.yml; do
        [ -e "$role" ] || continue
        render role "$FQCN.$(basename "$(dirname "$(dirname "$role")")")"
    done
fi

for n in "${ONLY[@]}"; do
    if [ -z "${MATCHED[$n]:-}" ]; then
        echo "NO SUCH PAGE: --only $n names no module, plugin or role of $FQCN" >&2
        errors=$((errors + 1))
    fi
done
if [ "$noise_pages" != 0 ]; then
    echo "WARNING (not a rendering error): $noise_pages of $rendered page(s) printed other output on stderr (shown once above per distinct text)" >&2
fi
[ "$KEEP" = 1 ] && echo "build-check.sh: kept $TMP"
if [ "$errors" != 0 ]; then
    fail "$errors problem(s); $expected module file(s), $rendered doc page(s) checked"
fi
echo "BUILD-CHECK PASSED: $(basename "$TARBALL"): $expected module(s) listed, $rendered doc page(s) rendered, installed offline"
