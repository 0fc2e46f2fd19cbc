"""_pip_lock: what keeps a requirements file from being a lock pip installs with --require-hashes."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.dgxspark.vllm.plugins.filter.pip_lock_problems import pip_lock_problems
from ansible_collections.dgxspark.vllm.plugins.module_utils._pip_lock import entries, problems

H1, H2 = "a" * 64, "b" * 64
LOCK = f"""# a lock
ray==2.54.1 \\
    --hash=sha256:{H1} \\
    --hash=sha256:{H2}
    # via -r ray.in
aiohttp==3.14.5 ; python_full_version >= '3.11' \\
    --hash=sha256:{H1}
"""
REPO = Path(__file__).resolve().parents[4]


def test_entries_read_names_versions_and_hashes_across_continuations():
    assert entries(LOCK) == [("ray", "2.54.1", [H1, H2]), ("aiohttp", "3.14.5", [H1])]


def test_a_hashed_lock_that_pins_the_package_has_no_problem():
    assert problems(LOCK, "ray.txt", "ray", "2.54.1") == []


def test_an_unpinned_an_unhashed_and_an_option_line_are_each_named():
    text = LOCK + "requests>=2\nidna==3.21\n--index-url https://example.invalid/simple\n"
    assert problems(text, "x.txt") == [
        "x.txt: `requests>=2` is not pinned with == (a lock holds only name==version lines)",
        "x.txt: idna==3.21 has no --hash=sha256",
        "x.txt: `--index-url https://example.invalid/simple` is not pinned with == (a lock holds only name==version lines)",
    ]


def test_a_lock_of_another_ray_or_an_empty_file_is_refused():
    assert problems(LOCK, "ray.txt", "ray", "2.55.0") == ["ray.txt: pins ray at 2.54.1, not 2.55.0"]
    assert problems("# nothing\n", "ray.txt", "ray", "2.54.1") == [
        "ray.txt: holds no requirement", "ray.txt: pins ray at no version, not 2.54.1"]


def test_the_filter_and_the_shipped_ray_lock():
    shipped = (REPO / "roles" / "hybrid_image" / "files" / "ray-2.54.1.txt").read_text(encoding="utf-8")
    assert pip_lock_problems(shipped, source="ray-2.54.1.txt", package="ray", version="2.54.1") == []
    assert pip_lock_problems(shipped, package="ray", version="2.53.0") == ["the lock: pins ray at 2.54.1, not 2.53.0"]
