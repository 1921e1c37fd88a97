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
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from ..content.collections import collection_manifest
from . import staging
from .adapter import AppDescriptor
from .staging import DescriptorError

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
    """Every descriptor of the build, checked against its content (the staging gate's descriptor check)."""
    try:
        return staging.descriptors(tarball)
    except DescriptorError as exc:
        raise RegisterError(str(exc)) from None


def register(api: httpx.Client, source: Path, *, activate: bool = False, canary: bool = False,
             workloads: dict[str, str] | None = None, signers: dict[str, str] | None = None,
             reason: str = "registered", tenant_id: str | None = None, skip_gates: bool = False,
             say: Callable[[str], None] = lambda _line: None, gate_timeout: float = 1800) -> list[Registered]:
    """Register every app the collection at `source` (a tarball or a directory) describes; `api` carries
    the base URL and a publisher's token; `tenant_id`: as private apps of that tenant (the token's own).
    An app whose versions pin a workload (its image) gets a version only for the image `workloads[slug]`
    names, as `<descriptor version>+<digest>` (12 hex digits); without one, only the app is created.
    `signers[slug]` is the PEM public key that image's signature verifies with (its hosts enforce it).
    `activate` promotes what it registers to active, `canary` to canary (only instances that opted in may
    bind it). A collection build becomes staged through its staging gate, which this starts and follows (each
    check's outcome goes to `say`); a version that needs a smoke run stops the promotion with a message saying
    so. `skip_gates` (platform admins: the platform's own collection, whose CI ran the checks) moves past every
    gate, recorded."""
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
    promote = _Promotion(api, reason, skip_gates, say, gate_timeout)
    return [_register_app(api, d, digest, reference, workloads.get(d.app.slug), signers.get(d.app.slug), target,
                          promote, tenant_id) for d in apps]


def _register_app(api: httpx.Client, d: AppDescriptor, digest: str, reference: str, image: str | None,
                  signer: str | None, target: str | None, promote: _Promotion, tenant_id: str | None) -> Registered:
    slug = d.app.slug
    found = _call(api, "GET", f"/v1/catalog/apps/{slug}", (200, 404))
    if found.status_code == 404:
        _call(api, "POST", "/v1/catalog/apps", (201,), json=d.app.model_dump() | {"tenant_id": tenant_id})
    elif found.json()["tenant_id"] != tenant_id:
        where = "the platform catalog" if found.json()["tenant_id"] is None else "your tenant's private catalog"
        raise RegisterError(f"{slug} is in {where}: publish it there (--private publishes to your tenant's)")
    artifact = _artifact(api, slug, "collection", reference, target, promote)
    name, body = d.version, {"artifact_id": artifact["id"], "adapter": d.spec().model_dump(mode="json")}
    if d.workload:
        if image is None:
            return Registered(slug, "", digest, artifact["id"], "", "needs_workload")
        pinned = _artifact(api, slug, d.workload.artifact_kind, image, target, promote, signer)
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
        version = promote.version(slug, name, target)
    return Registered(slug, name, digest, artifact["id"], version["id"], version["status"])


def _artifact(api: httpx.Client, slug: str, kind: str, reference: str, target: str | None, promote: _Promotion,
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
            artifact = promote.artifact(artifact, step)
    return artifact


@dataclass
class _Promotion:
    """The moves a registration makes, through their gates (or past them with skip_gates)."""
    api: httpx.Client
    reason: str
    skip_gates: bool
    say: Callable[[str], None]
    gate_timeout: float

    def _move(self, path: str, to: str) -> httpx.Response:
        return _call(self.api, "POST", path, (200, 409),
                     json={"to": to, "reason": self.reason, "skip_gates": self.skip_gates})

    def artifact(self, artifact: dict, to: str) -> dict:
        moved = self._move(f"/v1/catalog/artifacts/{artifact['id']}/transitions", to)
        if moved.status_code == 200:
            return moved.json()
        if _error(moved).get("details", {}).get("gate") != "staging":
            raise RegisterError(f"{artifact['reference']} -> {to}: {moved.text[:800]}")
        gate = _call(self.api, "POST", f"/v1/catalog/artifacts/{artifact['id']}/gates", (200, 202),
                     json={"kind": "staging", "reason": self.reason}).json()
        self.say(f"{artifact['app_slug']}: staging gate {gate['id']} on {artifact['digest']} "
                 f"({', '.join(c['name'] for c in gate['checks'])})")
        deadline = time.monotonic() + self.gate_timeout
        while gate["status"] not in ("passed", "failed"):
            if time.monotonic() > deadline:
                raise RegisterError(f"staging gate {gate['id']} is still {gate['status']} after "
                                    f"{self.gate_timeout:.0f} s (is a worker running?)")
            time.sleep(1)
            gate = _call(self.api, "GET", f"/v1/catalog/gates/{gate['id']}", (200,)).json()
        for check in gate["checks"]:
            self.say(f"  {check['name']}: {check['status']}: {check.get('summary', '')}")
            for f in check.get("findings", [])[:20]:
                self.say(f"    {f['rule']} {f['path'] or ''}{':' + str(f['line']) if f['path'] else ''} "
                         f"{f['message']}")
        if gate["status"] == "failed":
            raise RegisterError(f"staging gate {gate['id']} failed: {gate['reason']}")
        return _call(self.api, "GET", f"/v1/catalog/artifacts/{artifact['id']}", (200,)).json()

    def version(self, slug: str, name: str, to: str) -> dict:
        moved = self._move(f"/v1/catalog/apps/{slug}/versions/{name}/transitions", to)
        if moved.status_code == 200:
            return moved.json()
        error = _error(moved)
        if error.get("details", {}).get("gate") == "smoke":
            raise RegisterError(f"{slug} {name} is registered (draft); it becomes {to} after a smoke run: promote "
                                f"with `gpuaas apps smoke {slug} {name} --project P --allocation A --wait`, then "
                                f"`gpuaas apps promote {slug} --version {name} --to {to}`")
        raise RegisterError(f"{slug} {name} -> {to}: {error.get('message') or moved.text[:800]}")


def _error(response: httpx.Response) -> dict:
    try:
        return response.json().get("error") or {}
    except ValueError:
        return {}


def _call(api: httpx.Client, method: str, path: str, expect: tuple[int, ...], **kw) -> httpx.Response:
    response = api.request(method, path, **kw)
    if response.status_code not in expect:
        raise RegisterError(f"{method} {path} -> {response.status_code}: {response.text[:800]}")
    return response
