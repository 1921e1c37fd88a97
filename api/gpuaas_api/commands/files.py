"""`gpuaas artifacts upload-file FILE --app APP`: a publisher's file artifact (docs/control-service.md "File
artifacts"): the file uploaded to the content store by its sha256 (unless the caller's scope holds it already) and
registered as a `file` artifact of the app, `<name>@sha256:<hex>`; with --source, registered as fetched from that URL
(under a prefix the operator allows) and nothing uploaded. It starts in draft, like every artifact.

Registered after commands/apps.py (modules register in name order), as a verb of its `artifacts` resource."""

from __future__ import annotations

import argparse
import hashlib
import re
from pathlib import Path

from ..client.cli import command, emit, output_option, structured, url_option

_CHUNK = 1 << 20


def register(sub: argparse._SubParsersAction) -> None:
    verbs = sub.choices["artifacts"]._subparsers._group_actions[0]
    p = verbs.add_parser("upload-file", help="upload a file to the content store and register it as a file "
                         "artifact of an app (publishers); or, with --source, register where hosts fetch it")
    p.add_argument("file", type=Path, help="the file (with --source: a local copy, to compute its digest and size)")
    p.add_argument("--app", required=True, metavar="APP", help="the app's slug")
    p.add_argument("--name", help="the artifact's name (default: the file's name)")
    p.add_argument("--media-type", help="what the bytes are (default: application/octet-stream)")
    p.add_argument("--source", metavar="URL", help="register the file as fetched from this URL (under a prefix of "
                   "the operator's file_artifact_sources) instead of uploading it")
    url_option(p)
    output_option(p)
    p.set_defaults(func=upload_file)


def file_digest(path: Path) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return "sha256:" + h.hexdigest(), size


def _chunks(path: Path):
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk


@command("content_head", "content_put", "catalog_artifacts_create")
def upload_file(args, client) -> int:
    import httpx

    from ..client.errors import ClientError
    from ..client.http import api_error

    if not args.file.is_file():
        raise ClientError(f"{args.file}: not a file")
    name = args.name or re.sub(r"[^A-Za-z0-9._-]", "_", args.file.name).lstrip("._-") or "file"
    digest, size = file_digest(args.file)
    body = {"kind": "file", "reference": f"{name}@{digest}"}
    if args.media_type:
        body["media_type"] = args.media_type
    if args.source:
        body |= {"source": args.source, "size": size}
    elif client.http.head(f"/v1/content/{digest}").status_code != 200:
        client.http.timeout = httpx.Timeout(120)  # an upload takes longer than a read
        stored = client.http.put(f"/v1/content/{digest}", content=_chunks(args.file),
                                 headers={"Content-Type": "application/octet-stream",
                                          "Content-Length": str(size)})
        if stored.status_code not in (200, 201):
            raise api_error(stored)
    artifact = client.post(f"/v1/catalog/apps/{args.app}/artifacts", body)
    if structured(args):
        emit(args, artifact)
    else:
        print(f"{artifact['app_slug']} {artifact['reference']}: {artifact['status']}, artifact {artifact['id']} "
              f"({artifact['size']} bytes{', from ' + artifact['source'] if artifact['source'] else ''})")
    return 0
