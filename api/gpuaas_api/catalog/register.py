"""`gpuaas apps publish` (`register`): puts a collection build into the catalog through the public API.

The collection ships one descriptor per app (`adapters/<app>.yml`). For each, with the caller's own token (a
publisher's: docs/control-service.md "Publishers"): the build is uploaded to the content store by its sha256,
then the app (in the platform catalog, or with `tenant_id` as that tenant's private app), an artifact of kind
`collection` pinned by that digest, and the version the descriptor names are created (what already exists with
the same content is kept), and with `activate` promoted to active. A run of that version executes exactly this
build."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml
from pydantic import ValidationError

from ..content.collections import collection_manifest, read_collection_file
from .adapter import AppDescriptor

PROMOTION = ("draft", "staged", "canary", "active")


class RegisterError(RuntimeError):
    pass


@dataclass
class Registered:
    app: str
    version: str
    digest: str
    artifact_id: str
    version_id: str
    status: str


def build(source: Path, out: Path) -> Path:
    """The collection tarball: `source` itself, or `ansible-galaxy collection build` of a directory."""
    if source.is_file():
        return source
    galaxy = Path(sys.executable).parent / "ansible-galaxy"
    done = subprocess.run([str(galaxy), "collection", "build", "--force", "--output-path", str(out), str(source)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RegisterError(f"ansible-galaxy collection build {source} failed: {done.stderr.strip()[-800:]}")
    (tarball,) = out.glob("*.tar.gz")
    return tarball


def descriptors(tarball: Path) -> list[AppDescriptor]:
    """Every adapters/*.yml of the build, validated, and each checked against the build's content: the
    playbooks, the status module and the credential modules it names are in this collection."""
    manifest = collection_manifest(tarball)
    fqcn = f"{manifest['namespace']}.{manifest['name']}."
    with tarfile.open(tarball) as tar:
        names = sorted(m.name for m in tar.getmembers() if m.isfile())
    paths = [n for n in names if n.startswith("adapters/") and n.endswith((".yml", ".yaml"))]
    if not paths:
        raise RegisterError(f"{tarball.name} ships no adapter descriptor (adapters/<app>.yml)")
    out = []
    for path in paths:
        try:
            descriptor = AppDescriptor.model_validate(yaml.safe_load(read_collection_file(tarball, path)))
        except (ValidationError, yaml.YAMLError) as exc:
            raise RegisterError(f"{path}: {exc}") from None
        wanted = {f"playbooks/{p.removeprefix(fqcn)}.yml": p for p in descriptor.actions.values()}
        modules = [descriptor.status.module] if descriptor.status else []
        modules += [c.module for c in descriptor.credentials.values()]
        wanted |= {f"plugins/modules/{m.removeprefix(fqcn)}.py": m for m in modules}
        missing = sorted(name for file, name in wanted.items() if not name.startswith(fqcn) or file not in names)
        if missing:
            raise RegisterError(f"{path} names content this collection ({fqcn[:-1]}) does not ship: "
                                f"{', '.join(missing)}")
        out.append(descriptor)
    return out


def register(api: httpx.Client, source: Path, *, activate: bool = False, canary: bool = False,
             workloads: dict[str, str] | None = None, signers: dict[str, str] | None = None,
             reason: str = "registered", tenant_id: str | None = None) -> list[Registered]:
    """Register every app the collection at `source` (a tarball or a directory) describes; `api` carries
    the base URL and a publisher's token; `tenant_id`: as private apps of that tenant (the token's own).
    An app whose versions pin a workload (its image) gets a version only for the image `workloads[slug]`
    names, as `<descriptor version>+<digest>` (12 hex digits); without one, only the app is created.
    `signers[slug]` is the PEM public key that image's signature verifies with (its hosts enforce it).
    `activate` promotes what it registers to active, `canary` to canary (only instances that opted in may
    bind it)."""
    if activate and canary:
        raise RegisterError("choose --activate or --canary, not both")
    target = "active" if activate else "canary" if canary else None
    with tempfile.TemporaryDirectory() as out:
        tarball = build(source, Path(out))
        digest = "sha256:" + hashlib.sha256(tarball.read_bytes()).hexdigest()
        apps = descriptors(tarball)
        manifest = collection_manifest(tarball)
        _call(api, "PUT", f"/v1/content/{digest}", (200, 201), content=tarball.read_bytes(),
              headers={"Content-Type": "application/octet-stream"})
    # The version is the reference's tag; OCI tags have no "+", so semver build metadata keeps Helm's "_".
    tag = manifest["version"].replace("+", "_")
    reference = f"collections/{manifest['namespace']}.{manifest['name']}:{tag}@{digest}"
    workloads, signers = workloads or {}, signers or {}
    unknown = set(workloads) - {d.app.slug for d in apps if d.workload}
    if unknown:
        raise RegisterError(f"--workload names {sorted(unknown)}, which no descriptor of this build declares "
                            "with a workload")
    if set(signers) - set(workloads):
        raise RegisterError(f"--signed-by names {sorted(set(signers) - set(workloads))} without a --workload image")
    return [_register_app(api, d, digest, reference, workloads.get(d.app.slug), signers.get(d.app.slug), target,
                          reason, tenant_id) for d in apps]


def _register_app(api: httpx.Client, d: AppDescriptor, digest: str, reference: str, image: str | None,
                  signer: str | None, target: str | None, reason: str, tenant_id: str | None) -> Registered:
    slug = d.app.slug
    found = _call(api, "GET", f"/v1/catalog/apps/{slug}", (200, 404))
    if found.status_code == 404:
        _call(api, "POST", "/v1/catalog/apps", (201,), json=d.app.model_dump() | {"tenant_id": tenant_id})
    elif found.json()["tenant_id"] != tenant_id:
        where = "the platform catalog" if found.json()["tenant_id"] is None else "your tenant's private catalog"
        raise RegisterError(f"{slug} is in {where}: publish it there (--private publishes to your tenant's)")
    artifact = _artifact(api, slug, "collection", reference, target, reason)
    name, body = d.version, {"artifact_id": artifact["id"], "adapter": d.spec().model_dump(mode="json")}
    if d.workload:
        if image is None:
            return Registered(slug, "", digest, artifact["id"], "", "needs_workload")
        pinned = _artifact(api, slug, d.workload.artifact_kind, image, target, reason, signer)
        name = f"{d.version}+{pinned['digest'].split(':')[1][:12]}"
        body["workload_artifact_id"] = pinned["id"]
    found = _call(api, "GET", f"/v1/catalog/apps/{slug}/versions/{name}", (200, 404))
    if found.status_code == 200:
        version = found.json()
        if (version["artifact_id"], version["workload_artifact_id"]) != (artifact["id"], body.get(
                "workload_artifact_id")):
            raise RegisterError(f"{slug} {name} is already registered with another build "
                                f"({version['artifact_reference']}); give this build a new version")
    else:
        version = _call(api, "POST", f"/v1/catalog/apps/{slug}/versions", (201,), json={"version": name} | body).json()
    if target and version["status"] != target and version["status"] != "active":
        version = _call(api, "POST", f"/v1/catalog/apps/{slug}/versions/{name}/transitions", (200,),
                        json={"to": target, "reason": reason}).json()
    return Registered(slug, name, digest, artifact["id"], version["id"], version["status"])


def _artifact(api: httpx.Client, slug: str, kind: str, reference: str, target: str | None, reason: str,
              signer: str | None = None) -> dict:
    """The app's artifact of `kind` for `reference` (by digest), created when missing, promoted up to
    `target`; one that is further along already stays where it is."""
    digest = reference.rpartition("@")[2]
    artifacts = _call(api, "GET", f"/v1/catalog/apps/{slug}/artifacts", (200,), params={"limit": 200}).json()["items"]
    artifact = next((a for a in artifacts if a["digest"] == digest and a["kind"] == kind), None)
    if artifact is None:
        artifact = _call(api, "POST", f"/v1/catalog/apps/{slug}/artifacts", (201,),
                         json={"kind": kind, "reference": reference, "signer_public_key": signer}).json()
    elif (artifact["signer_public_key"] or "").strip() != (signer or "").strip():
        raise RegisterError(f"{reference} is already registered with another signer key")
    if target and artifact["status"] in PROMOTION:
        for step in PROMOTION[PROMOTION.index(artifact["status"]) + 1:PROMOTION.index(target) + 1]:
            artifact = _call(api, "POST", f"/v1/catalog/artifacts/{artifact['id']}/transitions", (200,),
                             json={"to": step, "reason": reason}).json()
    return artifact


def _call(api: httpx.Client, method: str, path: str, expect: tuple[int, ...], **kw) -> httpx.Response:
    response = api.request(method, path, **kw)
    if response.status_code not in expect:
        raise RegisterError(f"{method} {path} -> {response.status_code}: {response.text[:800]}")
    return response
