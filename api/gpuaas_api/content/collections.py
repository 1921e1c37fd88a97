"""Collection tarballs from the content store, installed once per digest into a cache that every run
of that digest puts on ANSIBLE_COLLECTIONS_PATH.

Trust runs from the digest down to every installed byte: the stored tarball must hash to the digest;
its MANIFEST.json pins FILES.json by sha256, and FILES.json pins every file. The installed tree is
checked against that chain on every call (it is small: a few milliseconds), and a tree that no longer
matches is discarded and installed again from the verified tarball, once."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from .store import ContentError, ContentStore, parse_digest

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[a-z0-9][a-z0-9_]*$")  # a collection's namespace or name
_MAX_MEMBER_BYTES = 16 << 20
# The MANIFEST.json bytes of each digest whose tarball this process verified. A digest fixes its
# tarball's bytes, so an entry never goes stale; it spares later calls re-reading the tarball.
_MANIFESTS: dict[str, bytes] = {}


class CollectionError(ContentError):
    """The tarball is not a usable collection, or installing it failed."""


def cache_root(state_dir: Path) -> Path:
    """Where the service keeps installed collections, one directory per digest."""
    return Path(state_dir) / "collections"


def read_collection_file(tarball_path: Path, member_path: str, *, max_bytes: int = _MAX_MEMBER_BYTES) -> bytes:
    """One regular file of a collection tarball (e.g. `adapters/slurm.yml`), read without extracting
    anything. Refuses paths that leave the collection, links, and a name the archive holds twice."""
    wanted = PurePosixPath(member_path)
    if wanted.is_absolute() or ".." in wanted.parts or str(wanted) in ("", "."):
        raise CollectionError(f"not a path inside a collection: {member_path!r}")
    found = None
    try:
        with tarfile.open(tarball_path, "r:gz") as tar:
            for info in tar:
                if PurePosixPath(info.name) != wanted:
                    continue
                if found is not None:
                    raise CollectionError(f"{tarball_path.name} holds {member_path} more than once")
                if not info.isfile():
                    raise CollectionError(f"{member_path} in {tarball_path.name} is not a regular file")
                if info.size > max_bytes:
                    raise CollectionError(f"{member_path} in {tarball_path.name} exceeds {max_bytes} bytes")
                found = tar.extractfile(info).read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise CollectionError(f"{tarball_path.name} is not a readable collection tarball: {exc}") from None
    if found is None:
        raise CollectionError(f"{tarball_path.name} has no {member_path}")
    return found


def _manifest(manifest_bytes: bytes) -> dict:
    try:
        manifest = json.loads(manifest_bytes)
        info = manifest["collection_info"]
        manifest["file_manifest_file"]["chksum_sha256"]
    except (ValueError, KeyError, TypeError):
        raise CollectionError("MANIFEST.json is not a collection manifest") from None
    for key in ("namespace", "name"):
        if not isinstance(info.get(key), str) or not _NAME.fullmatch(info[key]):
            raise CollectionError(f"MANIFEST.json: invalid collection {key} {info.get(key)!r}")
    if not isinstance(info.get("version"), str):
        raise CollectionError("MANIFEST.json: the collection has no version")
    return manifest


def collection_manifest(tarball_path: Path) -> dict:
    """MANIFEST.json's collection_info (namespace, name, version, ...)."""
    return _manifest(read_collection_file(tarball_path, "MANIFEST.json"))["collection_info"]


def installed_collection(store: ContentStore, digest: str, cache_root: Path) -> Path:
    """A directory for ANSIBLE_COLLECTIONS_PATH holding exactly the collection stored under `digest`
    (`<dir>/ansible_collections/<ns>/<name>/...`). Raises DigestMismatch or ContentMissing (from the
    store) before anything is installed, CollectionError when the content is not a usable collection."""
    hexdigest = parse_digest(digest)
    manifest_bytes = _MANIFESTS.get(digest)
    if manifest_bytes is None:
        manifest_bytes = read_collection_file(store.verify(digest), "MANIFEST.json")
        _manifest(manifest_bytes)
        _MANIFESTS[digest] = manifest_bytes
    root = Path(cache_root)
    target = root / hexdigest
    if not _differences(target, manifest_bytes):
        return target
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f".{hexdigest}.lock"):
        differences = _differences(target, manifest_bytes)  # another worker may have installed it meanwhile
        if not differences:
            return target
        tarball = store.verify(digest)  # installs only ever come from bytes proven to be the digest's
        if target.exists():
            log.warning("installed collection %s was altered (%s); reinstalling it from the verified tarball",
                        digest, "; ".join(differences[:5]))
            _discard(target, root)
        _install(tarball, target, root)
        differences = _differences(target, manifest_bytes)
        if differences:
            _discard(target, root)
            raise CollectionError(f"a fresh install of {digest} does not match its FILES.json: "
                                  f"{'; '.join(differences[:5])}")
    return target


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """An exclusive flock: each call opens its own file description, so it serializes threads of one
    process as well as processes."""
    with open(lock_path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _install(tarball: Path, target: Path, root: Path) -> None:
    staging = Path(tempfile.mkdtemp(dir=root, prefix=f".install-{target.name[:12]}-"))
    try:
        # Only the staging directory is a collections path, so no collection installed elsewhere makes
        # ansible-galaxy skip this one; it checks every file against FILES.json while extracting.
        env = os.environ | {"ANSIBLE_COLLECTIONS_PATH": str(staging), "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
                            "ANSIBLE_NOCOLOR": "1"}
        galaxy = Path(sys.executable).parent / "ansible-galaxy"
        done = subprocess.run([str(galaxy), "collection", "install", "--no-deps", "--offline", "--force",
                               "-p", str(staging), str(tarball)],
                              cwd=staging, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise CollectionError(f"ansible-galaxy collection install failed: {done.stderr.strip()[-800:]}")
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _discard(target: Path, root: Path) -> None:
    # Renamed first so the digest's path never shows a half-deleted tree.
    doomed = Path(tempfile.mkdtemp(dir=root, prefix=f".discard-{target.name[:12]}-"))
    os.rename(target, doomed / "tree")
    shutil.rmtree(doomed, ignore_errors=True)


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _differences(target: Path, manifest_bytes: bytes) -> list[str]:
    """How the tree at `target` differs from the collection MANIFEST.json describes (empty: identical,
    apart from Python's own __pycache__/*.pyc)."""
    manifest = json.loads(manifest_bytes)
    info = manifest["collection_info"]
    top = PurePosixPath("ansible_collections", info["namespace"], info["name"])
    collection = target / top
    try:
        if (collection / "MANIFEST.json").read_bytes() != manifest_bytes:
            return ["MANIFEST.json differs"]
        files_json = (collection / "FILES.json").read_bytes()
    except FileNotFoundError:
        return ["not installed"]
    if hashlib.sha256(files_json).hexdigest() != manifest["file_manifest_file"]["chksum_sha256"]:
        return ["FILES.json differs"]
    expected = {str(top / "MANIFEST.json"): None, str(top / "FILES.json"): None}  # checked above
    dirs = {".", "ansible_collections", str(top.parent), str(top)}
    for entry in json.loads(files_json)["files"]:
        name = str(top / entry["name"]) if entry["name"] != "." else str(top)
        if entry["ftype"] == "dir":
            dirs.add(name)
        else:
            expected[name] = entry["chksum_sha256"]
    differences, seen = [], set()
    for dirpath, dirnames, filenames in os.walk(target):
        here = PurePosixPath(os.path.relpath(dirpath, target))
        seen.add(str(here))
        if here.name == "__pycache__":  # Python's byte code, written when Ansible imports a plugin
            differences += [f"unexpected {here / n}" for n in dirnames + filenames if not n.endswith(".pyc")]
            dirnames[:] = []
            continue
        for name in list(dirnames):
            path, full = str(here / name), Path(dirpath, name)
            if full.is_symlink():
                # ansible-galaxy keeps a link to a directory of the collection as a link (FILES.json lists it as a
                # directory, nothing beneath it); what it points to is checked where it lies, so it is not followed.
                seen.add(path)
                dirnames.remove(name)
                if path not in dirs or not full.resolve().is_relative_to(collection.resolve()):
                    differences.append(f"unexpected directory link {path}")
            elif path not in dirs and name != "__pycache__":
                differences.append(f"unexpected directory {path}")
                dirnames.remove(name)
        for name in filenames:
            path, full = str(here / name), Path(dirpath, name)
            seen.add(path)
            if path not in expected:
                differences.append(f"unexpected file {path}")
            elif full.is_symlink() and not full.resolve().is_relative_to(collection.resolve()):
                differences.append(f"{path} links outside the collection")
            elif expected[path] is not None and _sha256(full) != expected[path]:
                differences.append(f"{path} differs")
    differences += [f"missing {path}" for path in sorted((dirs | set(expected)) - seen)]
    return differences
