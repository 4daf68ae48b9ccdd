"""Compose files checked against the Compose Specification's schema, as check-jsonschema vendors it.

check-jsonschema is a CLI only, "not a library for import" (its docs, FAQ: "How do I use
check-jsonschema in my application?"), so it runs as a process with the current interpreter, the way
that FAQ shows; ``--builtin-schema vendor.compose-spec`` names the vendored schema (its docs, Usage,
"--builtin-schema Choices") and ``--output-format json`` reports each error.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def compose_spec_errors(path: Path) -> list[str]:
    """``["$.services.x: message", …]``: where and how the YAML file ``path`` breaks the spec; ``[]``
    when it follows it."""
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
         "--output-format", "json", str(path)], capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 1), f"check-jsonschema did not run: {done.stderr}"
    report = json.loads(done.stdout)
    errors = [f"{e['path']}: {e['message']}" for e in report.get("errors", [])]
    errors += [e["message"] for e in report.get("parse_errors", [])]  # keys absent when "ok"
    assert (done.returncode == 0) == (report["status"] == "ok") == (not errors), done.stdout
    return errors
