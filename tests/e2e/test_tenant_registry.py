"""End to end: a tenant-private registry (issue 29 item 3) on real hosts. Beside the oci_demo world (its service,
worker, Debian 13 podman host and tenant acme), a second registry host takes only HTTP Basic credentials (htpasswd):
acme's own registry. The platform admin allowlists it, acme's tenant admin registers it with `gpuaas registries add`
(the password on stdin) and publishes a private version of the OCI app pinned to an image there (`gpuaas apps
publish --private`); acme's service account deploys it on the test host, which pulls with the registry's credentials
as the run got them, and the service answers. The password is then in no event, audit row, log, run artifact or
host journal. The test leaves the host as it found it: the instance decommissioned and deleted, the registry gone."""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest
import yaml
from gpuaas_api import testregistry as tr
from gpuaas_api.demo import OCI_TEST_HOST_PARAMETERS
from gpuaas_api.embedded_db import EmbeddedPostgres
from integration.oci_host import assert_no_workload_files

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

HOST = "web1"  # the one test host of the oci_demo fixture (tests/conftest.py)
SLUG = "acme-oci-service"  # the demo's tenant is acme: its private apps' slugs start with acme-
REPOSITORY = "acme/web"
REGISTRIES_CONF = "/etc/containers/registries.conf.d/51-tenant-registry.conf"
GPUAAS = str(Path(sys.executable).parent / "gpuaas")


def private_build(source: Path, out: Path) -> Path:
    """The demo's collection build with the OCI app alone, its descriptor naming acme's private slug; FILES.json and
    MANIFEST.json carry the new checksums (ansible-galaxy checks every file it installs against them)."""
    with tarfile.open(source) as tar:
        files = {m.name: (m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()}
    dropped = {n for n in files if n.startswith("adapters/") and n != "adapters/oci_service.yml"}
    descriptor = yaml.safe_load(files["adapters/oci_service.yml"][1])
    descriptor["app"]["slug"] = SLUG
    changed = {"adapters/oci_service.yml": yaml.safe_dump(descriptor).encode()}
    listing = json.loads(files["FILES.json"][1])
    listing["files"] = [f | ({"chksum_sha256": hashlib.sha256(changed[f["name"]]).hexdigest()} if f["name"] in changed
                             else {}) for f in listing["files"] if f["name"] not in dropped]
    changed["FILES.json"] = json.dumps(listing, indent=4).encode()
    manifest = json.loads(files["MANIFEST.json"][1])
    manifest["file_manifest_file"]["chksum_sha256"] = hashlib.sha256(changed["FILES.json"]).hexdigest()
    changed["MANIFEST.json"] = json.dumps(manifest, indent=4).encode()
    built = out / source.name
    with tarfile.open(built, "w:gz") as tar:
        for name, (member, data) in files.items():
            if name in dropped:
                continue
            data = changed.get(name, data)
            if data is not None:
                member.size = len(data)
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
    return built


def gpuaas(demo, token: str, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run([GPUAAS, *args], env=demo.env() | {"GPUAAS_API": demo.admin.base_url, "GPUAAS_TOKEN": token},
                          input=stdin, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (args, done.stdout, done.stderr[-2000:])
    demo.lines.append(done.stdout + done.stderr)  # searched for the password below, with everything else
    return done.stdout


def tenant_admin(demo) -> str:
    """A token of acme's tenant admin (the demo has a project admin and a service account only)."""
    a, tenant = demo.admin, demo.ids["tenant"]
    user = a.post(f"/v1/tenants/{tenant}/users", {"email": "admin@acme.example"})["id"]
    a.post("/v1/role-bindings", {"principal_kind": "user", "principal_id": user, "role": "tenant_admin",
                                 "tenant_id": tenant})
    return a.post(f"/v1/users/{user}/tokens", {"name": "e2e", "expires_in_days": 1})["token"]


def database(demo) -> psycopg.Connection:
    return psycopg.connect(EmbeddedPostgres(demo.state_dir / "postgres").start())


def promote_past_the_gates(demo, tenant, version: dict) -> None:
    """The private version active, as passed promotion gates leave it. The gates are item 2's subject (tests/e2e/
    test_smoke_gate.py) and a tenant's publisher cannot skip them: the collection build's staging gate (ansible-lint,
    ansible-test sanity) alone takes minutes, so the build and the version are set active here; the image goes
    through its transitions as its publisher moves it."""
    for to in ("staged", "canary", "active"):
        tenant.post(f"/v1/catalog/artifacts/{version['workload_artifact_id']}/transitions",
                    {"to": to, "reason": "acme e2e"})
    with database(demo) as conn:
        conn.execute("UPDATE artifacts SET status = 'active' WHERE id = %s", (version["artifact_id"],))
        conn.execute("UPDATE app_versions SET status = 'active' WHERE id = %s", (version["id"],))


def stored_text(demo) -> str:
    """Every event, audit row, operation and tenant registry row the service keeps, as text."""
    with database(demo) as conn:
        return "\n".join(row[0] for table in ("instance_events", "audit_log", "operations", "tenant_registries")
                         for row in conn.execute(f"SELECT row_to_json(t)::text FROM {table} t").fetchall())  # noqa: S608


def test_a_tenants_private_registry_backs_its_private_app_on_the_host(oci_demo, tmp_path):
    demo = oci_demo
    password = secrets.token_urlsafe(24)
    registry = tr.Registry.start(demo.prefix, name="acme-registry")
    instance_id = None
    try:
        image = tr.push(registry, REPOSITORY, "private", tr.build_image("private"), sign_with=demo.signing_key)
        registry.set_credentials("acme-puller", password)  # from now on every request needs them
        with pytest.raises(urllib.error.HTTPError) as anonymous:
            urllib.request.urlopen(f"http://{registry.address}/v2/", timeout=5)  # noqa: S310 - the test's registry
        assert anonymous.value.code == 401
        demo.host_sh(HOST, f"cat > {REGISTRIES_CONF} <<'EOF'\n{registry.registries_conf()}EOF")

        admin = tenant_admin(demo)
        gpuaas(demo, demo.admin.token, "registries", "allowlist", "add", registry.address, "--note", "acme e2e")
        added = gpuaas(demo, admin, "registries", "add", "acme-images", "--host", registry.address, "--username",
                       "acme-puller", "--password-stdin", stdin=password + "\n")
        assert "acme-images" in added and "set" in added, added
        key_file = tmp_path / "signer.pub"
        key_file.write_bytes(demo.signing_key.public_pem)
        published = gpuaas(demo, admin, "apps", "publish", str(private_build(demo.collection(), tmp_path)),
                           "--private", "--workload", f"{SLUG}={image}", "--signed-by", f"{SLUG}={key_file}",
                           "--reason", "acme's own image")
        assert published.startswith(f"{SLUG} "), published
        tenant = demo.admin.as_(admin)
        (version,) = tenant.get(f"/v1/catalog/apps/{SLUG}/versions")["items"]
        assert version["workload_artifact_reference"] == image
        promote_past_the_gates(demo, tenant, version)
        tenant.post(f"/v1/projects/{demo.ids['project']}/entitlements", {"app_slug": SLUG})

        created = demo.sa.post(f"/v1/projects/{demo.ids['project']}/instances", {
            "name": "acme-web", "app_slug": SLUG, "version": version["version"],
            "allocation_ids": [demo.ids["pool-oci"]], "topology": [{"role": "replica", "count": 1}],
            "parameters": OCI_TEST_HOST_PARAMETERS})
        instance_id = demo.ids["acme-web"] = created["id"]
        op = demo.operate("/deploy", instance="acme-web")
        assert op["status"] == "succeeded", op
        assert demo.call_oci(HOST) == "private"
        assert demo.oci_container(HOST)["ImageDigest"] == image.split("@")[1]
        (issued,) = demo.events("acme-web", correlation_id=op["correlation_id"],
                                type="tenant_registry.credential_issued")
        assert (issued["payload"]["registry"], issued["payload"]["username"]) == (registry.address, "acme-puller")

        decommissioned = demo.operate("/decommission", instance="acme-web")
        assert decommissioned["status"] == "succeeded", decommissioned
        assert_no_workload_files(lambda command: demo.host_sh(HOST, command), demo.policy_before)

        # The password is nowhere the service or the host keeps anything.
        haystacks = {"database": stored_text(demo), "serve log": (demo.state_dir / "serve.log").read_text(),
                     "worker log": (demo.state_dir / "worker.log").read_text(), "cli and demo output": "\n".join(
                         demo.lines), "host journal": demo.host_sh(HOST, "journalctl --no-pager -o cat")}
        for done in (op, decommissioned):
            response = demo.sa.http.get(f"/v1/operations/{done['id']}/artifacts")
            assert response.status_code == 200, response.text
            with tarfile.open(fileobj=io.BytesIO(response.content)) as tar:
                for member in (m for m in tar.getmembers() if m.isfile()):
                    haystacks[f"{done['kind']} artifact {member.name}"] = tar.extractfile(member).read().decode(
                        "utf-8", "replace")
        assert "acme-puller" in haystacks["database"]  # the search looks where the registry is named
        assert not [where for where, text in haystacks.items() if password in text]
    finally:
        if instance_id is not None:
            if demo.sa.get(f"/v1/instances/{instance_id}")["status"] not in ("stopped", "created"):
                demo.operate("/decommission", instance="acme-web")
            demo.sa.call("DELETE", f"/v1/instances/{instance_id}", expect=(204,))
        demo.host_sh(HOST, f"rm -f {REGISTRIES_CONF}")
        registry.stop()
