"""What an AWX project update does with this repository, for the tests that run a job as AWX would: the
collection installed from collections/requirements.yml, run from the project's root into a fresh directory."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def project_update(dest: Path) -> Path:
    """Installs the collection into `dest` as AWX's project update does; returns the installed collection
    (dest/ansible_collections/gpuaas/apps). Jobs then run with ANSIBLE_COLLECTIONS_PATH=dest."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(dest))
    done = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "-r", "collections/requirements.yml",
                           "-p", str(dest)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return dest / "ansible_collections" / "gpuaas" / "apps"
