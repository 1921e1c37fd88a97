"""File artifacts: files addressed by their sha256 digest (model weights, a data set, a script) that an app's
version pins and every run places on the hosts (docs/control-service.md "File artifacts").

A file artifact is `<name>@sha256:<64 hex>`. Its bytes are in the content store (uploaded with
PUT /v1/content/{digest}, readable in the uploader's scope) or behind a source URL under one of the operator's
allowlisted prefixes (the file_artifact_sources setting). The adapter's `files:` names what a version needs; the
version pins one file artifact per name (table version_files); a run gets each one under the adapter's files
variable with the path on the host computed here from the digest alone, never from tenant values."""

from __future__ import annotations

import re
from urllib.parse import urlsplit
from uuid import UUID

import psycopg

from ..errors import unprocessable
from .adapter import AdapterSpec

# Where a file lives on a host, by digest: the collection's module places it there (plugins/module_utils/
# file_artifacts.py keeps the same root).
HOST_ROOT = "/var/lib/gpuaas/files"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SHA256 = re.compile(r"^sha256:[0-9a-f]{64}$")


def parse_file_reference(reference: str) -> tuple[str, str]:
    """(name, digest) of `<name>@sha256:<64 lowercase hex>`; files are pinned by sha256 alone, as the content
    store and the hosts hash them."""
    name, at, digest = reference.partition("@")
    if not at:
        raise unprocessable("reference_not_pinned", "a file artifact is pinned by digest: <name>@sha256:<64 hex>",
                            reference=reference)
    if not _SHA256.match(digest):
        raise unprocessable("invalid_digest", "a file is pinned by sha256:<64 lowercase hex>", reference=reference)
    if not _NAME.match(name):
        raise unprocessable("invalid_reference", "a file's name is 1 to 128 letters, digits, '.', '_' or '-', "
                            "starting with a letter or digit", reference=reference)
    return name, digest


def check_source(source: str, allowed: tuple[str, ...]) -> str:
    """The source URL, when it is a plain http(s) URL under one of the allowlisted prefixes (each ends in '/'):
    no user, no query or fragment, no '.' or '..' segment that could step out of the prefix."""
    try:
        parts = urlsplit(source)
        hostname = parts.hostname
    except ValueError:  # an unparsable authority (http://[x)
        hostname = None
    plain = (hostname and parts.scheme in ("http", "https") and "@" not in parts.netloc
             and not parts.query and not parts.fragment and not re.search(r"[\s\\%]", source)
             and not {".", ".."} & set(parts.path.split("/")))
    if not plain or not any(source.startswith(prefix) for prefix in allowed):
        raise unprocessable("file_source_not_allowed", "a file's source must be a plain http(s) URL (no user, "
                            "query, fragment, '%' escape or '..') under a prefix the operator allows (setting "
                            "file_artifact_sources); otherwise upload the file to the content store",
                            source=source, allowed=list(allowed))
    return source


def host_path(digest: str) -> str:
    """The file's place on every host: content-addressed, the same for every version and instance that pins it."""
    return f"{HOST_ROOT}/sha256/{digest.split(':', 1)[1]}"


def version_files(conn: psycopg.Connection, slug: str, spec: AdapterSpec, pinned: dict[str, UUID]) -> dict[str, dict]:
    """The file artifacts a new version pins, checked against the adapter's `files:`: each name declared, each
    artifact a `file` artifact of the same app and not retired, every required name pinned."""
    from .service import get_artifact  # service imports this module

    needs = spec.files.needs if spec.files else {}
    undeclared = sorted(set(pinned) - set(needs))
    if undeclared:
        raise unprocessable("file_not_declared", f"files names {', '.join(undeclared)}, which the adapter's files "
                            "section does not declare", names=undeclared)
    missing = sorted(name for name, need in needs.items() if need.required and name not in pinned)
    if missing:
        raise unprocessable("file_artifact_required", f"the adapter needs the file(s) {', '.join(missing)}: files "
                            "must name a file artifact for each", names=missing)
    artifacts = {}
    for name, artifact_id in pinned.items():
        field = f"files.{name}"
        artifact = get_artifact(conn, artifact_id)
        if artifact["app_slug"] != slug:
            raise unprocessable("artifact_mismatch", f"{field}: the artifact belongs to another app", field=field)
        if artifact["kind"] != "file":
            raise unprocessable("file_artifact_kind", f"{field}: the artifact is of kind {artifact['kind']}, not file",
                                field=field, kind=artifact["kind"])
        if artifact["status"] == "retired":
            raise unprocessable("artifact_retired", f"{field}: a retired artifact cannot back a new version",
                                field=field)
        artifacts[name] = artifact
    return artifacts


def run_files(version: dict, spec: AdapterSpec, allowed_sources: tuple[str, ...],
              local_path) -> tuple[dict[str, dict], list[str]]:
    """({name: what the run gets}, the content-store digests the worker must hold verified copies of) for the
    adapter's files variable. `local_path(digest)` is where the worker's verified copy will be. A source no longer
    under an allowlisted prefix refuses the run."""
    if not spec.files:
        return {}, []
    given, digests = {}, []
    for name, pinned in (version.get("files") or {}).items():
        if name not in spec.files.needs:
            continue  # the adapter no longer declares it (a spec stored past the checks): not the run's
        entry = {"name": name, "digest": pinned["digest"], "size": pinned["size"],
                 "media_type": pinned["media_type"], "path": host_path(pinned["digest"]),
                 "mount": spec.files.needs[name].mount}
        if pinned["source"]:
            entry["url"] = check_source(pinned["source"], allowed_sources)
        else:
            entry["src"] = str(local_path(pinned["digest"]))
            digests.append(pinned["digest"])
        given[name] = entry
    return given, digests
