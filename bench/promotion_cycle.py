"""A full promotion cycle on test hosts, each step timed: publish -> staged -> canary -> active.

    .venv/bin/python bench/promotion_cycle.py [--json PATH] [--cold-sanity]

The world is the oci_demo one (gpuaas_api.demo.Demo, as tests/conftest.py sets it up): `gpuaas serve` and one
`gpuaas worker` (subprocesses, embedded PostgreSQL), a registry host that takes only the service's tokens, one
Debian 13 podman test host (pool-oci), the testregistry's image v1 pushed and signed. The worker's ansible-test
HOME is build/sanity-home (GPUAAS_PROMOTION_SANITY_HOME), the venvs `make lint` built, so that the staging gate
does not install them from PyPI first (about 2 minutes once; `--cold-sanity` measures that instead).

Steps, as a publisher does them with the CLI (the platform admin's token here; no --skip-gates anywhere):

1. publish: `gpuaas apps publish BUILD --workload oci-service=V1 --signed-by oci-service=KEY`: the build
   uploaded by digest, the app, the collection and image artifacts and the version created, all draft.
2. staged: `gpuaas apps promote oci-service --artifact COLLECTION --to staged --wait`: the staging gate on the
   real worker (descriptor, ansible-lint production profile, ansible-test sanity on the exact build); the gate
   record's queue wait and run time are reported beside the command's wall time. The image artifact moves to
   staged by hand (only collection builds have a staging gate).
3. canary and 4. active: the smoke run and a canary instance (catalog/smoke.py), smoke_steps below.

It prints one line per step and writes them as JSON with --json. At the end it removes the hosts, the registry
and the service's state."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "api"))

from gpuaas_api.demo import OCI_APP, Demo  # noqa: E402

HOST = "promo1"


def smoke_steps(d: Demo, version: dict, say: Callable[[str], None]) -> dict[str, float]:
    """canary and active (catalog/smoke.py): the artifacts moved staged -> canary by hand; `gpuaas apps smoke
    --wait` as a developer of the demo's tenant who publishes to the platform catalog and is the research project's
    admin (a smoke run is made in a project the publisher may use); then a tenant's canary instance deployed (the
    one successful canary instance promotion_canary_instances asks by default), the artifacts and the version moved
    to active, and the canary instance decommissioned (not counted)."""
    from gpuaas_api.demo import OCI_TEST_HOST_PARAMETERS

    timings: dict[str, float] = {}
    a = d.admin
    user = a.post(f"/v1/tenants/{d.ids['tenant']}/users", {"email": "appdev@acme.example"})["id"]
    for binding in ({"role": "catalog_publisher"}, {"role": "project_admin", "project_id": d.ids["project"]}):
        a.post("/v1/role-bindings", {"principal_kind": "user", "principal_id": user} | binding)
    token = a.post(f"/v1/users/{user}/tokens", {"name": "bench", "expires_in_days": 1})["token"]
    a.post(f"/v1/projects/{d.ids['project']}/entitlements", {"app_slug": OCI_APP})
    pinned = (version["artifact_id"], version["workload_artifact_id"])

    started = time.monotonic()
    for artifact in pinned:
        a.post(f"/v1/catalog/artifacts/{artifact}/transitions", {"to": "canary", "reason": "bench"})
    params = [arg for k, v in OCI_TEST_HOST_PARAMETERS.items() for arg in ("--param", f"{k}={json.dumps(v)}")]
    done = subprocess.run([str(Path(sys.executable).parent / "gpuaas"), "apps", "smoke", OCI_APP, version["version"],
                           "--project", d.ids["project"], "--allocation", d.ids["pool-oci"], "--topology", "replica=1",
                           *params, "--reason", "bench", "--wait", "-o", "json"],
                          env=d.env() | {"GPUAAS_TOKEN": token, "GPUAAS_API": a.base_url}, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"smoke gate: {done.stdout[-2000:]} {done.stderr[-800:]}")
    gate = json.loads(done.stdout)
    timings["canary (apps smoke --wait)"] = time.monotonic() - started
    for op in gate["smoke"]["operations"]:
        row = a.as_(token).get(f"/v1/operations/{op['id']}")
        timings[f"smoke gate: {op['kind']}"] = seconds(row["created_at"], row["finished_at"])
    timings["smoke gate: created -> passed"] = seconds(gate["created_at"], gate["finished_at"])
    say(f"smoke gate {gate['status']}: " + ", ".join(f"{o['kind']} {o['status']}" for o in gate["smoke"]["operations"]))

    started = time.monotonic()
    early = d.sa.post(f"/v1/projects/{d.ids['project']}/instances", {
        "name": "early", "app_slug": OCI_APP, "version": version["version"], "allocation_ids": [d.ids["pool-oci"]],
        "topology": [{"role": "replica", "count": 1}], "parameters": OCI_TEST_HOST_PARAMETERS, "canary": True})
    d.ids["early"] = early["id"]
    op = d.operate("/deploy", instance="early")
    if op["status"] != "succeeded":
        raise RuntimeError(f"canary instance: {op}")
    timings["canary instance: deploy"] = seconds(op["created_at"], op["finished_at"])
    for artifact in pinned:
        a.post(f"/v1/catalog/artifacts/{artifact}/transitions", {"to": "active", "reason": "bench"})
    a.post(f"/v1/catalog/apps/{OCI_APP}/versions/{version['version']}/transitions",
           {"to": "active", "reason": "bench: one canary instance ran it"})
    timings["active (canary instance, moves)"] = time.monotonic() - started
    d.operate("/decommission", instance="early")
    return timings


def gpuaas(d: Demo, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    """`gpuaas ARGS` as the platform admin against the demo's service: (wall seconds, the process)."""
    started = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).parent / "gpuaas"), *args],
                          env=d.env() | {"GPUAAS_TOKEN": d.admin.token, "GPUAAS_API": d.admin.base_url},
                          capture_output=True, text=True)
    return time.monotonic() - started, done


def seconds(a: str, b: str) -> float:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def run(say: Callable[[str], None], cold_sanity: bool) -> dict[str, float]:
    timings: dict[str, float] = {}
    worker_env = {} if cold_sanity else {"GPUAAS_PROMOTION_SANITY_HOME": str(ROOT / "build" / "sanity-home")}
    d = Demo(prefix=f"promo{uuid.uuid4().hex[:6]}", say=say, worker_env=worker_env)
    try:
        d.start_service(registry=True)
        d.setup_tenancy()
        d.prepare_oci([HOST], signed=("v1",))
        d.register_oci_hosts("pool-oci", [HOST])
        key = d.state_dir / "signer.pub"
        key.write_bytes(d.signing_key.public_pem)

        took, done = gpuaas(d, "apps", "publish", str(d.collection()), "--url", d.admin.base_url, "--workload",
                            f"{OCI_APP}={d.images['v1']}", "--signed-by", f"{OCI_APP}={key}")
        if done.returncode != 0:
            raise RuntimeError(f"publish: {done.stderr[-800:]}")
        timings["publish"] = took
        artifacts = d.admin.get(f"/v1/catalog/apps/{OCI_APP}/artifacts?limit=200")["items"]
        collection = next(a for a in artifacts if a["kind"] == "collection")
        image = next(a for a in artifacts if a["kind"] == "oci")
        version = next(v for v in d.admin.get(f"/v1/catalog/apps/{OCI_APP}/versions?limit=200")["items"]
                       if v["workload_artifact_id"] == image["id"])

        took, done = gpuaas(d, "apps", "promote", OCI_APP, "--artifact", collection["id"], "--to", "staged", "--wait",
                            "--reason", "bench")
        say(done.stdout.strip())
        (gate,) = d.admin.get(f"/v1/catalog/apps/{OCI_APP}/gates?artifact_id={collection['id']}")["items"]
        if gate["status"] != "passed":
            raise RuntimeError(f"staging gate {gate['status']}: {done.stdout[-2000:]} {done.stderr[-800:]}")
        timings["staged (promote --wait)"] = took
        timings["staging gate: queued"] = seconds(gate["created_at"], gate["started_at"])
        timings["staging gate: checks"] = seconds(gate["started_at"], gate["finished_at"])
        d.admin.post(f"/v1/catalog/artifacts/{image['id']}/transitions", {"to": "staged", "reason": "bench"})

        timings |= smoke_steps(d, version, say)
        return timings
    finally:
        d.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the timings there")
    parser.add_argument("--cold-sanity", action="store_true", help="let the staging gate install ansible-test's "
                        "venvs into the worker's state directory first (measures the first gate of a new worker)")
    args = parser.parse_args()
    os.environ.setdefault("ANSIBLE_COLLECTIONS_PATH", str(ROOT / "build" / "collections"))
    timings = run(print, args.cold_sanity)
    for step, value in timings.items():
        print(f"{step:32} {value:8.1f} s")
    if args.json:
        args.json.write_text(json.dumps(timings, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
