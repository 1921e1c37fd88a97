"""Catalog versions of this collection that pin their own package builds, for upgrade and rollback tests
through the API.

A variant is a copy of what the collection build of this checkout includes (galaxy.yml's build_ignore
honoured), with its own galaxy version, descriptor version and catalog `vars`, and optionally other role
defaults: registering it uploads a build whose content differs from the checkout's, so a run that shows
that content ran that build. The package versions it pins come from a flat apt repository built inside
each test host from its installed packages (tests/integration/local_repo.py).
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
from pathlib import Path

import yaml
from gpuaas_api.demo import COLLECTION

LOCAL_REPO_SCRIPT = Path(__file__).resolve().parents[1] / "integration" / "local_repo.py"
REPO_DIR = "/srv/gpuaas-repo"
REPO_LINE = f"deb [trusted=yes] file:{REPO_DIR} ./"
# Packages of one source package share a version; the Slurm and munge pins move each group together.
PINNED_GROUPS = [
    ["munge", "libmunge2"],
    ["slurm-wlm-basic-plugins", "slurm-client", "slurmctld", "slurmd", "slurmdbd", "slurm-wlm-mysql-plugin"],
]
PINNED_PACKAGES = [p for group in PINNED_GROUPS for p in group]
# What `ansible-galaxy collection build` leaves out besides galaxy.yml's build_ignore: paths matching
# these patterns (relative to the collection), and directories of these names anywhere.
GALAXY_IGNORES = ["*.pyc", "*.retry", "tests/output", ".git", "MANIFEST.json", "FILES.json"]
GALAXY_IGNORED_DIRS = {"CVS", ".bzr", ".hg", ".git", ".svn", "__pycache__", ".tox"}


def copy_collection(dest: Path, source: Path = COLLECTION) -> Path:
    """Copies the files of `source` that its collection build includes into `dest`."""
    patterns = yaml.safe_load((source / "galaxy.yml").read_text()).get("build_ignore", []) + GALAXY_IGNORES

    def ignored(directory: str, names: list[str]) -> set[str]:
        rel = Path(directory).relative_to(source)
        return {n for n in names if any(fnmatch.fnmatch((rel / n).as_posix(), p) for p in patterns)
                or (n in GALAXY_IGNORED_DIRS and Path(directory, n).is_dir())}

    shutil.copytree(source, dest, ignore=ignored, symlinks=True)
    return dest


def variant(dest: Path, suffix: str, pins: dict, role_defaults: dict[str, dict] | None = None) -> Path:
    """A copy of the collection as its own catalog version: galaxy version "<shipped>-<suffix>" (the
    artifact reference carries it as an OCI tag, which has no "+"), descriptor version
    "<shipped>+<suffix>", `pins` merged into the Slurm descriptor's vars, and each
    `role_defaults[role]` merged into roles/<role>/defaults/main.yml. Only the Slurm descriptor is kept."""
    copy_collection(dest)
    galaxy = _load(dest / "galaxy.yml")
    galaxy["version"] = f"{galaxy['version']}-{suffix}"
    _dump(dest / "galaxy.yml", galaxy)
    for other in (dest / "adapters").iterdir():
        if other.name != "slurm.yml":
            other.unlink()
    descriptor = _load(dest / "adapters/slurm.yml")
    descriptor["version"] = f"{descriptor['version']}+{suffix}"
    descriptor["vars"] = descriptor.get("vars", {}) | pins
    _dump(dest / "adapters/slurm.yml", descriptor)
    for role, values in (role_defaults or {}).items():
        path = dest / "roles" / role / "defaults/main.yml"
        _dump(path, _load(path) | values)
    return dest


def local_repo(container: str, suffixes: list[str]) -> dict[str, str]:
    """Rebuilds the host's installed Slurm and munge packages as "<version>+<suffix>" into REPO_DIR on
    the host; returns the installed version of each package."""
    request = json.dumps({"repo": REPO_DIR, "suffixes": suffixes, "groups": PINNED_GROUPS})
    proc = subprocess.run(["podman", "exec", "-i", container, "python3", "-", request],
                          input=LOCAL_REPO_SCRIPT.read_text(), capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"{container}: building the local repository failed: {proc.stdout}{proc.stderr}")
    return json.loads(proc.stdout)


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def _dump(path: Path, data: dict) -> None:
    path.write_text("---\n" + yaml.safe_dump(data, sort_keys=False))
