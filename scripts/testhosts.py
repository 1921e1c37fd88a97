#!/usr/bin/env python3
"""Test hosts from a checkout, without installing the package: same as `gpuaas testhosts`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))

from gpuaas_api.testhosts import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
