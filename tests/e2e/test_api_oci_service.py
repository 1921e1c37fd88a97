"""End to end: an OCI workload through the HTTP API on real hosts. The control service and a worker
process (as `gpuaas demo` starts them), a Debian 13 test host running podman, and a real registry that
takes only tokens of the service's registry token service: every pull needs the `artifact_pull`
credential the platform issued for that one run, scoped to the image's repository.

A project service account drives the instance through the API alone; after each step the test reads
the host itself (podman inspect, the HTTP service, the files of the workload). This is the `gpuaas demo`
OCI flow with its checks, then trust enforced on the host, canary opt-in, decommission, and a search for
the pull credentials in everything the service keeps. The tests run in order and share one host.
"""

import hashlib
import io
import json
import re
import secrets
import tarfile
import time
import urllib.error
import urllib.request

import psycopg
import pytest
from gpuaas_api.demo import OCI_APP, OCI_CONTAINER, OCI_REPOSITORY
from gpuaas_api.embedded_db import EmbeddedPostgres
from integration.oci_host import assert_no_workload_files

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

HOST = "web1"  # the one test host of the oci_demo fixture (tests/conftest.py)


@pytest.fixture(scope="module")
def demo(oci_demo):
    return oci_demo


def digest(demo, image: str) -> str:
    return demo.images[image].split("@")[1]


def instance(demo) -> dict:
    return demo.sa.get(f"/v1/instances/{demo.ids['web']}")


def running_image(demo) -> str:
    """The digest of the image the workload's container runs on the host."""
    container = demo.oci_container(HOST)
    assert container is not None, "no workload container on the host"
    assert container["State"]["Running"], container["State"]
    return container["ImageDigest"]


def test_the_registry_takes_only_tokens_of_the_service(demo):
    url = f"http://{demo.registry.address}/v2/{OCI_REPOSITORY}/manifests/{digest(demo, 'v1')}"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=5)  # noqa: S310 - the test's own registry host
    assert refused.value.code == 401
    challenge = refused.value.headers["WWW-Authenticate"]
    assert challenge.startswith(f'Bearer realm="{demo.admin.base_url}/v1/registry/token"'), challenge


def test_register_pins_each_image_by_its_own_digest(demo):
    for image in ("v1", "v2"):
        version = demo.register_oci_app(image)
        assert version["status"] == "active"
        assert version["workload_artifact_reference"] == demo.images[image]
        assert version["version"].endswith(f"+{digest(demo, image).split(':')[1][:12]}")
        demo.versions[image] = version
    artifacts = demo.admin.get(f"/v1/catalog/apps/{OCI_APP}/artifacts?limit=200")["items"]
    oci = {a["digest"]: a for a in artifacts if a["kind"] == "oci"}
    for image in ("v1", "v2"):
        assert oci[digest(demo, image)]["signer_public_key"].strip() == demo.signing_key.public_pem.decode().strip()
    # The collection build is another artifact, with its own digest.
    assert {a["kind"] for a in artifacts} == {"oci", "collection"}
    assert not {a["digest"] for a in artifacts if a["kind"] == "collection"} & set(oci)


def test_deploy_runs_the_image_until_its_probe_answers(demo):
    demo.create_oci_instance("pool-oci", demo.versions["v1"]["version"])
    op = demo.operate("/deploy", instance="web")
    assert op["status"] == "succeeded", op
    assert instance(demo)["status"] == "running"
    assert [m["status"] for m in demo.members("web")] == ["active"]
    assert running_image(demo) == digest(demo, "v1")
    assert demo.call_oci(HOST) == "v1"
    assert demo.host_sh(HOST, f"systemctl is-active {OCI_CONTAINER}") == "active"
    types = [e["type"] for e in demo.events("web", correlation_id=op["correlation_id"])]
    for expected in ("runtime_secret.issued", "start_completed", "apps.instance.running"):
        assert expected in types, f"{expected} missing from {types}"
    # healthy is the health check's to say (its first check is due at once after a deploy): what it read
    # of the replica is the member's runtime detail, the digest podman runs and the probe's answer.
    deadline = time.monotonic() + 90
    while not demo.events("web", type="healthy"):
        assert time.monotonic() < deadline, "no healthy event from a health check within 90 s"
        time.sleep(1)
    (healthy,) = demo.events("web", type="healthy")
    assert healthy["payload"]["module"] == "gpuaas.apps.oci_info" and healthy["payload"]["members"] == 1
    runtime = demo.members("web")[0]["runtime"]
    assert runtime["reachable"] and runtime["observed"] == "active"
    assert digest(demo, "v1") in str(runtime["details"].values()), runtime
    (issued,) = demo.events("web", correlation_id=op["correlation_id"], type="runtime_secret.issued")
    assert (issued["payload"]["registry"], issued["payload"]["repository"]) == (demo.registry.address,
                                                                               OCI_REPOSITORY)
    # The host pulled with it: the token service granted that credential pull of the repository.
    granted = f"registry token for {issued['payload']['username']}: [{{'type': 'repository', 'name': " \
              f"'{OCI_REPOSITORY}', 'actions': ['pull']}}]"
    assert granted in (demo.state_dir / "serve.log").read_text()
    # Signature enforcement is the host's: its policy requires the signer's key for this repository.
    policy = json.loads(demo.host_sh(HOST, "cat /etc/containers/policy.json"))
    (requirement,) = policy["transports"]["docker"][f"{demo.registry.address}/{OCI_REPOSITORY}"]
    assert requirement["type"] == "sigstoreSigned"


def test_upgrade_changes_the_running_image_exactly(demo):
    op = demo.operate("/upgrade", {"app_version_id": demo.versions["v2"]["id"]}, instance="web")
    assert op["status"] == "succeeded", op
    assert running_image(demo) == digest(demo, "v2")
    assert demo.call_oci(HOST) == "v2"
    assert instance(demo)["app_version_id"] == demo.versions["v2"]["id"]
    (upgraded,) = demo.events("web", correlation_id=op["correlation_id"], type="apps.instance.upgraded")
    assert upgraded["payload"] == {"from": demo.versions["v1"]["version"], "to": demo.versions["v2"]["version"]}


def test_rollback_returns_exactly_the_old_image(demo):
    op = demo.operate("/rollback", instance="web")
    assert op["status"] == "succeeded", op
    assert running_image(demo) == digest(demo, "v1")
    assert demo.call_oci(HOST) == "v1"
    assert instance(demo)["app_version_id"] == demo.versions["v1"]["id"]


def test_an_image_signed_by_another_key_is_refused_on_the_host(demo):
    before = demo.oci_container(HOST)["Id"]
    forged = demo.register_oci_app("forged")
    assert forged["status"] == "active"  # the catalog cannot tell: the host verifies the signature
    op = demo.operate("/upgrade", {"app_version_id": forged["id"]}, instance="web")
    assert op["status"] == "failed", op
    message = " ".join(op["error"]["message"].split())
    assert f"refused image {demo.images['forged']}" in message, message
    assert "signature" in message, message
    (recorded,) = demo.events("web", correlation_id=op["correlation_id"], type="operation.failed")
    assert recorded["payload"]["reason"] == op["error"]["message"]
    # Truthful: the instance still runs v1, and so does the host, in the same container.
    now = instance(demo)
    assert (now["status"], now["app_version_id"]) == ("running", demo.versions["v1"]["id"])
    assert demo.oci_container(HOST)["Id"] == before and running_image(demo) == digest(demo, "v1")
    assert demo.call_oci(HOST) == "v1"
    assert demo.host_sh(HOST, f"podman image exists {demo.images['forged']} || echo absent") == "absent"


def test_a_canary_version_deploys_only_where_the_instance_opted_in(demo):
    canary = demo.register_oci_app("v3", canary=True)
    assert canary["status"] == "canary"
    upgrade = f"/v1/instances/{demo.ids['web']}/upgrade"
    refused = demo.sa.http.post(upgrade, json={"app_version_id": canary["id"]})
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "version_not_usable" and "opted in to canary" in error["message"], error
    assert running_image(demo) == digest(demo, "v1")

    assert demo.sa.call("PATCH", f"/v1/instances/{demo.ids['web']}", {"canary": True})["canary"] is True
    op = demo.operate("/upgrade", {"app_version_id": canary["id"]}, instance="web")
    assert op["status"] == "succeeded", op
    assert running_image(demo) == digest(demo, "v3")
    assert demo.call_oci(HOST) == "v3"
    assert instance(demo)["app_version_id"] == canary["id"]


def test_decommission_leaves_nothing_on_the_host(demo):
    op = demo.operate("/decommission", instance="web")
    assert op["status"] == "succeeded", op
    assert instance(demo)["status"] == "stopped"
    assert {m["status"] for m in demo.members("web")} == {"removed"}
    assert demo.oci_container(HOST) is None
    assert_no_workload_files(lambda command: demo.host_sh(HOST, command), demo.policy_before)


# token_urlsafe(32): what registry/credentials.py issues as a password.
PASSWORD_RUN = re.compile(r"[A-Za-z0-9_-]{43,}")


def leaked(text: str, digests: set[bytes]) -> bool:
    """Whether text holds a string whose SHA-256 is one of digests (each stored pull password's): the
    database keeps only that, so the search looks at every 43-character window of URL-safe runs."""
    return any(hashlib.sha256(run[i:i + 43].encode()).digest() in digests
               for run in PASSWORD_RUN.findall(text) for i in range(len(run) - 42))


def test_no_pull_credential_leaves_the_run(demo):
    with psycopg.connect(EmbeddedPostgres(demo.state_dir / "postgres").start()) as conn:
        rows = conn.execute("SELECT operation_id, repository, secret_sha256, revoked_at FROM runtime_secrets"
                            ).fetchall()
    ops = demo.sa.get(f"/v1/instances/{demo.ids['web']}/operations?limit=100")["items"]
    # One credential per run, for the image's repository alone, and every one ended with its run.
    assert sorted(str(r[0]) for r in rows) == sorted(op["id"] for op in ops), (rows, ops)
    assert {r[1] for r in rows} == {OCI_REPOSITORY} and all(r[3] is not None for r in rows)
    digests = {bytes(r[2]) for r in rows}
    planted = secrets.token_urlsafe(32)  # the search finds a password of the issued shape inside a longer run
    assert leaked(f"auth: -{planted}_x.", {hashlib.sha256(planted.encode()).digest()})

    haystacks = {"events": json.dumps(demo.events("web")), "serve log": (demo.state_dir / "serve.log").read_text(),
                 "worker log": (demo.state_dir / "worker.log").read_text(), "demo output": "\n".join(demo.lines),
                 "host journal": demo.host_sh(HOST, "journalctl --no-pager -o cat")}
    for op in ops:
        response = demo.sa.http.get(f"/v1/operations/{op['id']}/artifacts")
        assert response.status_code == 200, response.text
        with tarfile.open(fileobj=io.BytesIO(response.content)) as tar:
            files = [m for m in tar.getmembers() if m.isfile()]
            assert files, f"{op['kind']} kept no artifacts"
            for member in files:
                haystacks[f"{op['kind']} artifact {member.name}"] = tar.extractfile(member).read().decode(
                    "utf-8", "replace")
    leaks = [where for where, text in haystacks.items() if leaked(text, digests)]
    assert not leaks, f"a pull credential appears in: {leaks}"

