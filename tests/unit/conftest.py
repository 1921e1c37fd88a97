"""Make `ansible_collections.gpuaas.apps` importable when pytest runs from the repository root.

ansible-test places the collection under ansible_collections/gpuaas/apps itself; a plain checkout relies on
build/collections (made by scripts/setup.sh) or, failing that, a symlink tree in a temporary directory.
"""

import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _collections_root():
    if REPO.parent.name == "apps" or (REPO.parent.name == "gpuaas" and REPO.parents[1].name == "ansible_collections"):
        return REPO.parents[2]
    built = REPO / "build" / "collections"
    if (built / "ansible_collections" / "gpuaas" / "apps" / "galaxy.yml").exists():
        return built
    tmp = Path(tempfile.mkdtemp(prefix="gpuaas-collections-"))
    (tmp / "ansible_collections" / "gpuaas").mkdir(parents=True)
    os.symlink(REPO, tmp / "ansible_collections" / "gpuaas" / "apps")
    return tmp


_root = str(_collections_root())
if _root not in sys.path:
    sys.path.insert(0, _root)
