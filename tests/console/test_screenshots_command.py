"""``make screenshots`` (scripts/console_screenshots.py) runs as the README says: a gateway of its own,
traffic, Chromium, and a picture of each console page (here into the test's folder, not docs/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_screenshot_command_photographs_every_page(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "scripts/console_screenshots.py", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    names = sorted(path.name for path in tmp_path.glob("*.png"))
    assert names == [f"console-{page}.png" for page in sorted(
        ("overview", "keys", "key", "usage", "requests", "request", "audit")
    )]  # fmt: skip
    for path in tmp_path.glob("*.png"):
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, path.name
