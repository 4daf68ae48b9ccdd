"""docs/performance.md's figures are the benchmarks' JSON as ``python -m bench.report`` writes them:
the page as committed is what its JSON gives, and a new run's JSON changes the page."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench import report


def test_the_performance_page_is_what_its_json_gives() -> None:
    page = report.PAGE.read_text()
    assert page.count("<!-- bench:") == len(report.BLOCKS)
    assert report.rewrite(page) == page, "run: .venv/bin/python -m bench.report"
    assert report.main(["--check"]) == 0


def test_a_new_run_rewrites_only_its_own_block(tmp_path: Path) -> None:
    for path in report.DOCS.glob("performance-*.json"):
        shutil.copy(path, tmp_path / path.name)
    latest = tmp_path / "performance-latest.json"
    run = json.loads(latest.read_text())
    run["targets"][0] = {**run["targets"][0], "figure": "+9.99 ms vs direct", "met": False}
    latest.write_text(json.dumps(run))
    page = report.PAGE.read_text()
    written = report.rewrite(page, tmp_path)
    changed = [(a, b) for a, b in zip(page.splitlines(), written.splitlines(), strict=True) if a != b]
    assert len(changed) == 1 and "+9.99 ms vs direct" in changed[0][1] and "| no |" in changed[0][1]
