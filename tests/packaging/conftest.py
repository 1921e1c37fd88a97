"""The service as an operator installs it: its wheel (and its dependencies' wheels), built from a copy
of the sources outside the checkout, once per test session."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def wheelhouse():
    """A directory of wheels: gpuaas-apps and everything it depends on (what packaging/Containerfile's
    build context holds). Built from pyproject.toml and api/ alone, so nothing else of the checkout
    can leak into the wheel."""
    tmp = Path(tempfile.mkdtemp(prefix="gpuaas-wheelhouse-"))
    try:
        src = tmp / "src"
        src.mkdir()
        shutil.copy(ROOT / "pyproject.toml", src)
        shutil.copytree(ROOT / "api", src / "api", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(tmp / "wheels"), str(src)],
                       check=True, capture_output=True, text=True, timeout=600)
        yield tmp / "wheels"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
