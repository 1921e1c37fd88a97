"""The collection content a run executes: the app version's artifact, by digest."""

from __future__ import annotations

from pathlib import Path

from ..config import OperationSettings
from ..content.collections import CollectionError, cache_root, installed_collection
from ..content.store import ContentMissing, ContentStore, DigestMismatch, embedded_store
from ..db import Database
from .plan import RunPlan


class ContentRefused(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def run_content(settings: OperationSettings, db: Database, plan: RunPlan) -> Path:
    """The installed collection the run executes: the version's artifact, fetched from the content
    store (the database, through this machine's copy) by digest and verified (every run) before any host
    is touched."""
    if plan.content_digest is None:
        raise ContentRefused("artifact_not_runnable", "the app version's artifact is not a collection build; "
                             "there is nothing to run")
    store = embedded_store(settings.state_dir, db)
    run_file_copies(store, plan)
    try:
        return installed_collection(store, plan.content_digest, cache_root(settings.state_dir))
    except ContentMissing:
        raise ContentRefused("artifact_content_missing", f"the content store has no {plan.content_digest}; "
                             "upload the collection build (gpuaas apps register)") from None
    except DigestMismatch as exc:
        raise ContentRefused("artifact_digest_mismatch", f"the stored content does not match the pinned "
                             f"digest {plan.content_digest}: {exc}") from None
    except CollectionError as exc:
        raise ContentRefused("artifact_not_runnable", f"{plan.content_digest} is not an installable "
                             f"collection: {exc}") from None


def run_file_copies(store: ContentStore, plan: RunPlan) -> None:
    """The version's content-store files, each as this machine's copy verified now (fetched again from the
    database when the local copy no longer hashes to its digest): the run hands exactly these bytes to the hosts,
    which verify them again."""
    for digest in plan.file_digests:
        try:
            store.verify(digest)
        except ContentMissing:
            raise ContentRefused("artifact_content_missing", f"the content store has no file {digest}") from None
        except DigestMismatch as exc:
            raise ContentRefused("artifact_digest_mismatch", f"the stored file does not match its pinned digest "
                                 f"{digest}: {exc}") from None
