"""What ``pip install .`` (the container image, deploy/Dockerfile) ships: every folder of the package."""

from __future__ import annotations

from pathlib import Path

import setuptools

ROOT = Path(__file__).resolve().parents[2]


def test_every_folder_with_modules_is_a_package_the_build_finds() -> None:
    """setuptools' ``packages.find`` (pyproject.toml) skips a folder without ``__init__.py``: its
    modules would be missing from the wheel and the image would fail at its first import."""
    found = set(setuptools.find_packages(where=str(ROOT), include=["gateway*"]))
    folders = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for path in (ROOT / "gateway").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert folders and folders <= found, sorted(folders - found)
