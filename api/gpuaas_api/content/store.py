"""A content store addressed by sha256, one immutable blob per digest.

The database holds every blob (tables content_blobs and content_chunks, in 1 MiB chunks), so that every
serve replica and worker, on any machine, reads the same content, and a standby replicates it with the rest.
`root/sha256/<64 hex>` on the local disk is this machine's verified copy: a blob is fetched from the database
once, hashed on the way, and only a copy that hashes to its digest becomes visible (atomic rename). Without a
database (`db=None`) the local directory is the whole store.

Writes stream into a temporary file in the same directory while hashing and are kept only once the bytes hash
to the digest they were sent under, so a reader never sees a partial or wrong blob."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg

    from ..db import Database

DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
_DIGEST = re.compile(DIGEST_PATTERN)
_HEX = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 1 << 20
log = logging.getLogger(__name__)


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

    def __init__(self, store: ContentStore, directory: Path, expected: str | None, max_bytes: int | None):
        self._store = store
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

    def commit(self, conn: psycopg.Connection | None = None) -> tuple[str, bool]:
        """(digest, created): created is False when the store already held this digest. With a database,
        the blob is saved there in `conn`'s transaction (or a transaction of its own)."""
        digest = "sha256:" + self._hash.hexdigest()
        if self._expected is not None and digest != self._expected:
            raise DigestMismatch(self._expected, digest)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        created = self._store._save(self._tmp, digest, self.size, conn)
        final = self._dir / parse_digest(digest)
        if final.exists():
            return digest, created
        os.chmod(self._tmp, 0o444)  # immutable by intent: nothing edits a blob in place
        os.replace(self._tmp, final)
        return digest, created if self._store.db is not None else True

    def commit_local(self) -> None:
        """Keep the bytes as this machine's copy, once they hash to the expected digest (a fetch from
        the database: nothing to save back)."""
        digest = "sha256:" + self._hash.hexdigest()
        if digest != self._expected:
            raise DigestMismatch(self._expected, digest)
        self._file.flush()
        os.fsync(self._file.fileno())  # a crash leaves no truncated copy under the digest's name
        self._file.close()
        os.chmod(self._tmp, 0o444)
        os.replace(self._tmp, self._dir / parse_digest(digest))

    def __enter__(self) -> Upload:
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()
        self._tmp.unlink(missing_ok=True)


class ContentStore:
    def __init__(self, root: Path, db: Database | None = None):
        self.root = Path(root)
        self.db = db
        self._blobs = self.root / "sha256"

    def _blob(self, digest: str) -> Path:
        return self._blobs / parse_digest(digest)

    def local_path(self, digest: str) -> Path:
        """Where this machine's verified copy of `digest` is (or will be, once path() or verify() fetched it)."""
        return self._blob(digest)

    def upload(self, expected_digest: str | None = None, *, max_bytes: int | None = None) -> Upload:
        """Start a streamed write; with `expected_digest` the commit refuses other bytes."""
        if expected_digest is not None:
            parse_digest(expected_digest)
        self._blobs.mkdir(parents=True, exist_ok=True)
        return Upload(self, self._blobs, expected_digest, max_bytes)

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
        # With a database, only what it holds is stored: a local copy whose save was rolled back is not.
        if self.db is not None:
            return self._size(digest) is not None
        return self._blob(digest).is_file()

    def size(self, digest: str) -> int:
        """The stored blob's size in bytes, without fetching it. Raises ContentMissing."""
        size = self._size(digest) if self.db is not None else None
        if self.db is None and self._blob(digest).is_file():
            size = self._blob(digest).stat().st_size
        if size is None:
            raise ContentMissing(digest)
        return size

    def path(self, digest: str) -> Path:
        """The stored file on this machine (read it, never write it), fetched from the database first
        if this machine has no copy yet. Raises ContentMissing, or DigestMismatch when the database's
        bytes do not hash to the digest (nothing is kept then)."""
        blob = self._blob(digest)
        if blob.is_file():
            return blob
        if self.db is None:
            raise ContentMissing(digest)
        return self._fetch(digest)

    def verify(self, digest: str) -> Path:
        """Re-hash the stored bytes; returns the path when they still match. Raises DigestMismatch or
        ContentMissing. A local copy that no longer matches is discarded and fetched again from the
        database, once: only the database's bytes are the store's."""
        blob = self.path(digest)
        actual = file_digest(blob)
        if actual != digest and self.db is not None:
            log.warning("the local copy of %s hashes to %s; fetching it again from the database", digest, actual)
            blob.unlink(missing_ok=True)
            blob = self._fetch(digest)
            actual = file_digest(blob)
        if actual != digest:
            raise DigestMismatch(digest, actual)
        return blob

    def publish_local(self) -> list[str]:
        """Save into the database every verified local blob it lacks (a store kept on disk before the
        database held content); returns their digests. A local blob that does not hash to its name is
        left alone, unsaved."""
        if self.db is None or not self._blobs.is_dir():
            return []
        local = {f"sha256:{p.name}": p for p in self._blobs.iterdir() if _HEX.fullmatch(p.name)}
        if not local:
            return []
        with self.db.transaction() as conn:
            known = {row["digest"] for row in conn.execute(
                "SELECT digest FROM content_blobs WHERE digest = ANY(%s)", (list(local),))}
        saved = []
        for digest, path in sorted(local.items()):
            if digest in known:
                continue
            if file_digest(path) != digest:
                log.warning("local content %s does not hash to its name; not saved", path)
                continue
            if self._save(path, digest, path.stat().st_size, None):
                saved.append(digest)
        return saved

    # The database side ---------------------------------------------------------------------------

    def _size(self, digest: str) -> int | None:
        parse_digest(digest)
        with self.db.transaction() as conn:
            row = conn.execute("SELECT size FROM content_blobs WHERE digest = %s", (digest,)).fetchone()
        return None if row is None else row["size"]

    def _save(self, path: Path, digest: str, size: int, conn: psycopg.Connection | None) -> bool:
        """Save a verified file's bytes under `digest`: True if saved now, False if already there (or no
        database)."""
        if self.db is None:
            return False
        if conn is None:
            with self.db.transaction() as own:
                return self._save(path, digest, size, own)
        if conn.execute("INSERT INTO content_blobs (digest, size) VALUES (%s, %s) ON CONFLICT DO NOTHING "
                        "RETURNING digest", (digest, size)).fetchone() is None:
            return False
        with open(path, "rb") as f, conn.cursor() as cur:
            seq = 0
            while chunk := f.read(_CHUNK):
                cur.execute("INSERT INTO content_chunks (digest, seq, data) VALUES (%s, %s, %s)",
                            (digest, seq, chunk))
                seq += 1
        return True

    def _fetch(self, digest: str) -> Path:
        self._blobs.mkdir(parents=True, exist_ok=True)
        with self.upload(digest) as upload, self.db.transaction() as conn:
            if conn.execute("SELECT 1 FROM content_blobs WHERE digest = %s", (digest,)).fetchone() is None:
                raise ContentMissing(digest)
            with conn.cursor(name="content_fetch") as chunks:
                chunks.itersize = 8  # a few MiB in memory at a time
                chunks.execute("SELECT data FROM content_chunks WHERE digest = %s ORDER BY seq", (digest,))
                for row in chunks:
                    upload.write(bytes(row["data"]))
            upload.commit_local()
        return self._blob(digest)


def embedded_store(state_dir: Path, db: Database | None = None) -> ContentStore:
    """The service's store: the database's blobs, with this machine's copies under the state dir."""
    return ContentStore(Path(state_dir) / "content", db)
