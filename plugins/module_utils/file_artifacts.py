# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Files addressed by digest on a host (file artifacts of the control service): each lives at
``<root>/sha256/<64 hex>``, read-only, and only bytes that hash to that digest ever appear there.

New bytes (a copy the controller transferred, or a download from a source URL) stream into a temporary file in
the same directory while they are hashed; the temporary file is renamed into place only when the digest matches,
so a wrong or partial file never sits at a digest's path. A file already there is hashed again on every run:
one that no longer matches (altered on the host) is removed and the run fails, naming both digests; the next run
places a verified copy again. gpuaas.apps.file_artifact places them, gpuaas.apps.oci_workload mounts them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import re
import shutil
import tempfile

ROOT = "/var/lib/gpuaas/files"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_CHUNK = 1 << 20


class FileArtifactError(Exception):
    pass


def check_digest(digest):
    if not isinstance(digest, str) or not _DIGEST.match(digest):
        raise FileArtifactError("file digest %r: must be sha256:<64 lowercase hex>" % (digest,))
    return digest


def file_path(digest, root=ROOT):
    """The file's place on the host, from its digest alone."""
    return os.path.join(root, "sha256", check_digest(digest)[len("sha256:"):])


def hash_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def _write_verified(chunks, digest, path, max_bytes=None):
    """Streams ``chunks`` into a temporary file beside ``path``, hashing; renames it to ``path`` (mode 0444) only
    when the bytes hash to ``digest``. Raises FileArtifactError naming both digests otherwise."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    fd, tmp = tempfile.mkstemp(prefix=".incoming-", dir=directory)
    try:
        h, size = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                size += len(chunk)
                if max_bytes is not None and size > max_bytes:
                    raise FileArtifactError("file %s: more than its declared %d bytes; refused" % (digest, max_bytes))
                h.update(chunk)
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        found = "sha256:" + h.hexdigest()
        if found != digest:
            raise FileArtifactError("file refused: expected %s, found %s (the bytes it was given hash to that); "
                                    "nothing was placed at %s" % (digest, found, path))
        os.chmod(tmp, 0o444)
        os.rename(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return size


def _read_chunks(path):
    with open(path, "rb") as f:
        yield from iter(lambda: f.read(_CHUNK), b"")


def place(digest, src=None, fetch=None, size=None, root=ROOT, check=False):
    """Makes the file ``digest`` present at file_path(digest): left alone when a copy there hashes to the digest;
    otherwise written from ``src`` (a path on this host) or ``fetch()`` (an iterator of chunks: a download), verified
    before it appears. Returns {path, digest, changed, placed, size}. A copy at the path that hashes to another digest
    is removed and FileArtifactError raised: the host altered a verified file, which is never used."""
    path = file_path(digest, root)
    result = dict(digest=digest, path=path, changed=False, placed=False)
    if os.path.lexists(path):
        found = hash_file(path) if os.path.isfile(path) and not os.path.islink(path) else "(not a regular file)"
        if found == digest:
            if (os.stat(path).st_mode & 0o777) != 0o444 and not check:
                os.chmod(path, 0o444)
                result["changed"] = True
            result["size"] = os.path.getsize(path)
            return result
        if not check:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        raise FileArtifactError("the copy of file %s at %s was altered on this host: it hashes to %s (expected %s, "
                                "found %s); removed, the next run places a verified copy"
                                % (digest, path, found, digest, found))
    result.update(changed=True, placed=True)
    if check:
        return result
    if src is not None:
        chunks = _read_chunks(src)
    elif fetch is not None:
        chunks = fetch()
    else:
        raise FileArtifactError("file %s is not on this host and no source was given" % digest)
    result["size"] = _write_verified(chunks, digest, path, size)
    return result
