"""bench/benchkit.py's shared round-and-ratio report (no lab needed)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def benchkit(monkeypatch):
    spec = importlib.util.spec_from_file_location("benchkit", REPO / "bench" / "benchkit.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "benchkit", module)
    spec.loader.exec_module(module)
    return module


def test_compare_rounds_alternates_the_runs_and_prints_medians_and_the_ratio(monkeypatch, capsys):
    calls = []
    small = iter([10.0, 30.0, 20.0])
    large = iter([15.0, 45.0, 30.0])

    def run(label, values):
        return lambda: calls.append(label) or next(values)

    got = benchkit(monkeypatch).compare_rounds(3, ("1 pair", run("small", small)), ("2 pairs", run("large", large)),
                                               "2-pair / 1-pair", "goal <= 1.5x")
    assert got == (20.0, 30.0)
    assert calls == ["small", "large"] * 3
    assert capsys.readouterr().out.splitlines() == [
        "round 1: 1 pair 10.0 s, 2 pairs 15.0 s",
        "round 2: 1 pair 30.0 s, 2 pairs 45.0 s",
        "round 3: 1 pair 20.0 s, 2 pairs 30.0 s",
        "median: 1 pair 20.0 s, 2 pairs 30.0 s",
        "ratio 2-pair / 1-pair wall time: 1.50x  (goal <= 1.5x)",
    ]
