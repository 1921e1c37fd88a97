"""A content store addressed by sha256: `root/sha256/<64 hex>`, one immutable file per digest.

Writes stream into a temporary file in the same directory while hashing and become visible only by an
atomic rename once the bytes hash to the digest they were sent under, so a reader never sees a partial
or wrong blob. The class is deliberately small (put, has, path, verify) so a registry-backed store can
offer the same methods."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
_DIGEST = re.compile(DIGEST_PATTERN)
_CHUNK = 1 << 20


class ContentError(Exception):
    """Base of the errors a caller maps to its own answers."""


class InvalidDigest(ContentError, ValueError):
    def __init__(self, value: str):
        super().__init__(f"not a digest of the form sha256:<64 lowercase hex>: {value[:80]!r}")


class DigestMismatch(ContentError):
    def __init__(self, expected: str, actual: str):
        super().__init__(f"content hashes to {actual}, not {expected}")
        self.expected = expected
        self.actual = actual


class ContentMissing(ContentError):
    def __init__(self, digest: str):
        super().__init__(f"no content stored for {digest}")
        self.digest = digest


class ContentTooLarge(ContentError):
    def __init__(self, max_bytes: int):
        super().__init__(f"content exceeds {max_bytes} bytes")
        self.max_bytes = max_bytes


def parse_digest(value: str) -> str:
    """The 64 hex characters of `sha256:<64 lowercase hex>`; anything else raises InvalidDigest."""
    if not isinstance(value, str) or not _DIGEST.fullmatch(value):
        raise InvalidDigest(str(value))
    return value[len("sha256:"):]


def file_digest(path: Path) -> str:
    with open(path, "rb") as f:
        return "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()


class Upload:
    """Bytes on their way into the store. Use as a context manager: `write` chunks, then `commit`;
    leaving the block without a commit (or after a failed one) removes the temporary file."""

    def __init__(self, directory: Path, expected: str | None, max_bytes: int | None):
        self._dir = directory
        self._expected = expected
        self._max_bytes = max_bytes
        self._hash = hashlib.sha256()
        self.size = 0
        fd, name = tempfile.mkstemp(dir=directory, prefix=".upload-")
        self._tmp = Path(name)
        self._file = os.fdopen(fd, "wb")

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self._max_bytes is not None and self.size > self._max_bytes:
            raise ContentTooLarge(self._max_bytes)
        self._hash.update(chunk)
        self._file.write(chunk)

    def commit(self) -> tuple[str, bool]:
        """(digest, created): created is False when the store already held this digest."""
        digest = "sha256:" + self._hash.hexdigest()
        if self._expected is not None and digest != self._expected:
            raise DigestMismatch(self._expected, digest)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        final = self._dir / parse_digest(digest)
        if final.exists():
            return digest, False
        os.chmod(self._tmp, 0o444)  # immutable by intent: nothing edits a blob in place
        os.replace(self._tmp, final)
        return digest, True

    def __enter__(self) -> Upload:
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()
        self._tmp.unlink(missing_ok=True)


class ContentStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self._blobs = self.root / "sha256"

    def _blob(self, digest: str) -> Path:
        return self._blobs / parse_digest(digest)

    def upload(self, expected_digest: str | None = None, *, max_bytes: int | None = None) -> Upload:
        """Start a streamed write; with `expected_digest` the commit refuses other bytes."""
        if expected_digest is not None:
            parse_digest(expected_digest)
        self._blobs.mkdir(parents=True, exist_ok=True)
        return Upload(self._blobs, expected_digest, max_bytes)

    def put_stream(self, chunks: Iterable[bytes], expected_digest: str, *, max_bytes: int | None = None) -> bool:
        """Store the bytes under `expected_digest`. True if stored now, False if it was already there.
        Raises DigestMismatch (nothing stored) or ContentTooLarge."""
        with self.upload(expected_digest, max_bytes=max_bytes) as upload:
            for chunk in chunks:
                upload.write(chunk)
            return upload.commit()[1]

    def put_file(self, path: Path) -> str:
        """Store a file's bytes; returns their digest."""
        with open(path, "rb") as f, self.upload() as upload:
            while chunk := f.read(_CHUNK):
                upload.write(chunk)
            return upload.commit()[0]

    def has(self, digest: str) -> bool:
        return self._blob(digest).is_file()

    def path(self, digest: str) -> Path:
        """The stored file (read it, never write it). Raises ContentMissing."""
        blob = self._blob(digest)
        if not blob.is_file():
            raise ContentMissing(digest)
        return blob

    def verify(self, digest: str) -> Path:
        """Re-hash the stored bytes; returns the path when they still match. Raises DigestMismatch or
        ContentMissing."""
        blob = self.path(digest)
        actual = file_digest(blob)
        if actual != digest:
            raise DigestMismatch(digest, actual)
        return blob


def embedded_store(state_dir: Path) -> ContentStore:
    """The default store: a directory under the service's state dir."""
    return ContentStore(Path(state_dir) / "content")
