"""The benchmark script runs (a short run; the figures are in
docs/PERFORMANCE.md and are not checked here: CI machines are noisy)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = str(Path(__file__).parent.parent / "bench" / "langgraph_bench.py")


def test_benchmark_runs_both_savers_and_reports_ratios(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    subprocess.run([sys.executable, BENCH, "--turns", "20", "--json", str(out)], check=True, capture_output=True)
    report = json.loads(out.read_text())
    cairn, sqlite = report["results"]
    assert (cairn["saver"], sqlite["saver"]) == ("cairn", "sqlite")
    assert 0 < report["bytes_ratio"] < 1
    assert cairn["growth"] > 0 and len(cairn["curve_ms"]) == 20
