"""Pull credentials issued per run (runtime secrets of purpose artifact_pull) and the registry token
service that honours them: pull of the run's own repository, while the run lasts, and nothing else.
The registry side (a real distribution registry with `auth: token`) is proven on real hosts in the
OCI end-to-end test; here the tokens are checked as such a registry checks them."""

from __future__ import annotations

import base64
from dataclasses import replace
from uuid import UUID

import jwt
import pytest
from cryptography import x509
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives.serialization import Encoding
from fastapi.testclient import TestClient
from gpuaas_api.app import create_app
from gpuaas_api.config import OperationSettings
from gpuaas_api.executor import plan as planner
from gpuaas_api.instances import service as instances
from gpuaas_api.registry import credentials, tokens

from .test_workloads import ADAPTER, artifact, create, image, publish, setup_app, version

REGISTRY = "registry.example.com:5000"


@pytest.fixture
def issued(world, database, app, tmp_path):
    """A run of a workload version from a registry this service authorizes, with its credential."""
    settings = OperationSettings(state_dir=tmp_path, pull_credential_registries=frozenset({REGISTRY}))
    app.state.operation_settings = settings
    setup_app(world)
    adapter = ADAPTER | {"workload": ADAPTER["workload"] | {"pull_credential_variable": "oci_workload_pull"}}
    version(world, "1.0", artifact(world, "oci", image("v1")), adapter=adapter)
    publish(world, "1.0", "active")
    inst = create(world, "web-1").json()
    op = world.call("service_account", "POST", f"/v1/instances/{inst['id']}/deploy", 202).json()
    with database.transaction() as conn:
        run = planner.build(conn, settings, {"id": UUID(op["id"]), "kind": "deploy", "params": {}, "member_ids": []},
                            instances.get_instance(conn, UUID(inst["id"])))
    return run, inst, op


def ask(world, credential: dict, scope: str = "repository:team/web:pull", service: str = "gpuaas-registry"):
    basic = base64.b64encode(f"{credential['username']}:{credential['password']}".encode()).decode()
    return world.client.get("/v1/registry/token", params={"service": service, "scope": scope},
                            headers={"Authorization": f"Basic {basic}"})


def claims(world, token: str) -> dict:
    config = world.call("platform_admin", "GET", "/v1/registry/certificate", 200).json()
    assert (config["service"], config["issuer"]) == ("gpuaas-registry", "gpuaas")
    cert = x509.load_pem_x509_certificate(config["rootcertbundle"].encode())
    header = jwt.get_unverified_header(token)
    assert base64.b64decode(header["x5c"][0]) == cert.public_bytes(Encoding.DER)
    return jwt.decode(token, cert.public_key(), algorithms=["ES256"], audience="gpuaas-registry", issuer="gpuaas")


def test_a_run_gets_a_credential_for_its_repository_alone(world, database, issued):
    run, inst, op = issued
    credential = run.secret_vars["oci_workload_pull"]
    assert (credential["registry"], set(credential)) == (REGISTRY, {"registry", "username", "password"})
    assert run.secret_strings == [credential["password"]]

    granted = ask(world, credential)
    assert granted.status_code == 200, granted.text
    assert claims(world, granted.json()["token"])["access"] == [
        {"type": "repository", "name": "team/web", "actions": ["pull"]}]
    # Push, or another repository, is not in the token: the registry refuses it.
    assert claims(world, ask(world, credential, "repository:team/web:pull,push").json()["token"])["access"] == [
        {"type": "repository", "name": "team/web", "actions": ["pull"]}]
    assert claims(world, ask(world, credential, "repository:team/other:pull").json()["token"])["access"] == []

    for wrong in (credential | {"password": "x" * 43}, credential | {"username": "gpuaas-run-0"}):
        assert ask(world, wrong).status_code == 401
    assert ask(world, credential, service="another-registry").status_code == 401
    assert world.client.get("/v1/registry/token", params={"service": "gpuaas-registry"}).status_code == 401

    # The password is nowhere but in the run's variables.
    events = world.call("service_account", "GET", f"/v1/instances/{inst['id']}/events?limit=200", 200).text
    assert credential["username"] in events and credential["password"] not in events
    with database.transaction() as conn:
        stored = conn.execute("SELECT * FROM runtime_secrets").fetchall()
        assert credential["password"].encode() not in b"".join(bytes(r["secret_sha256"]) for r in stored)
        assert credentials.revoke(conn, UUID(op["id"])) == 1
    assert ask(world, credential).status_code == 401


def test_a_credential_expires_with_its_run_timeout(world, database, issued):
    run, _, _ = issued
    credential = run.secret_vars["oci_workload_pull"]
    with database.transaction() as conn:
        conn.execute("UPDATE runtime_secrets SET expires_at = now() - interval '1 second'")
    assert ask(world, credential).status_code == 401


def test_no_credential_for_a_registry_the_service_does_not_authorize(database, app, issued):
    _, inst, op = issued
    settings = replace(app.state.operation_settings, pull_credential_registries=frozenset({"elsewhere:5000"}))
    with database.transaction() as conn:
        run = planner.build(conn, settings, {"id": UUID(op["id"]), "kind": "deploy", "params": {}, "member_ids": []},
                            instances.get_instance(conn, UUID(inst["id"])))
    assert "oci_workload_pull" not in run.secret_vars and run.extravars["oci_workload_image"].startswith(REGISTRY)


def replica(database, tmp_path, name: str, secret_key: str | None) -> TestClient:
    """Another serve replica on the same database, with a disk of its own."""
    other = create_app(database)
    other.state.operation_settings = OperationSettings(state_dir=tmp_path / name, secret_key=secret_key)
    return TestClient(other, raise_server_exceptions=False)


def test_every_replica_signs_with_the_one_key_in_the_database(world, database, tmp_path):
    key = Fernet.generate_key().decode()
    token = world.tokens["platform_admin"]
    bundles = []
    for name in ("replica-a", "replica-b"):
        with replica(database, tmp_path, name, key) as client:
            got = client.get("/v1/registry/certificate", headers={"Authorization": f"Bearer {token}"})
            assert got.status_code == 200, got.text
            bundles.append(got.json()["rootcertbundle"])
        assert not (tmp_path / name / "registry-token.pem").exists()  # nothing of it on a replica's disk
    assert bundles[0] == bundles[1]
    with database.transaction() as conn:
        (row,) = conn.execute("SELECT sealed FROM service_keys WHERE name = 'registry_token_signer'").fetchall()
    assert b"PRIVATE KEY" not in bytes(row["sealed"])  # sealed with the secret key

    # A replica with another secret key cannot read it: it says so rather than sign with a key of its own.
    with replica(database, tmp_path, "replica-c", Fernet.generate_key().decode()) as client:
        got = client.get("/v1/registry/certificate", headers={"Authorization": f"Bearer {token}"})
    assert got.status_code == 503 and got.json()["error"]["code"] == "service_misconfigured"
    assert "same GPUAAS_SECRET_KEY" in got.json()["error"]["message"]


def test_a_key_made_before_the_database_kept_it_stays_the_key(world, database, tmp_path):
    earlier = tmp_path / "replica-a" / "registry-token.pem"
    earlier.parent.mkdir()
    earlier.write_bytes(tokens._new_pem())
    with replica(database, tmp_path, "replica-a", Fernet.generate_key().decode()) as client:
        got = client.get("/v1/registry/certificate",
                         headers={"Authorization": f"Bearer {world.tokens['platform_admin']}"})
    assert got.status_code == 200
    assert got.json()["rootcertbundle"] == x509.load_pem_x509_certificate(earlier.read_bytes()).public_bytes(
        Encoding.PEM).decode()
