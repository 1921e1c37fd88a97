"""End to end: a version's smoke gate and canary instances (issue 29 item 2; docs/control-service.md "Smoke runs and
canary instances") on the oci_demo world (tests/conftest.py): the control service, its worker (whose gate thread
drives smoke gates), the registry and signed images, on a Debian 13 podman host.

The smoke instance gets a host of its own, smoke1, started here with the world's prefix (the world's close removes
it): the OCI app's versions do not share hosts (one workload container per host), and web1 carries the instances
of the other OCI modules. A developer of the demo's tenant, a platform publisher who is also the research project's
admin, smoke-tests a version pinned to a signed image (it passes: canary), then a tenant's canary instance makes it
active; a version pinned to the forged image (signed with another key: the host refuses it) fails its gate and
stays draft, with nothing left on the host."""

import json
import time

import pytest
from gpuaas_api import testhosts
from gpuaas_api.demo import OCI_APP, OCI_SITE_REGISTRIES_CONF, OCI_TEST_HOST_PARAMETERS
from integration.oci_host import assert_no_workload_files

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

HOST = "smoke1"
POOL = "pool-smoke"


@pytest.fixture(scope="module")
def demo(oci_demo):
    d = oci_demo
    if POOL not in d.ids:
        (host,) = testhosts.up(d.prefix, [HOST], "oci-trixie")
        d.hosts[HOST] = host
        d.host_sh(HOST, f"cat > {OCI_SITE_REGISTRIES_CONF} <<'EOF'\n{d.registry.registries_conf()}EOF")
        d.register_oci_hosts(POOL, [HOST])
        d.smoke_policy_before = json.loads(d.host_sh(HOST, "cat /etc/containers/policy.json"))
    if "v1" not in d.versions:
        d.versions["v1"] = d.register_oci_app("v1")
    if "publisher" not in d.ids:
        a = d.admin
        user = a.post(f"/v1/tenants/{d.ids['tenant']}/users", {"email": "appdev@acme.example"})["id"]
        for binding in ({"role": "catalog_publisher"}, {"role": "project_admin", "project_id": d.ids["project"]}):
            a.post("/v1/role-bindings", {"principal_kind": "user", "principal_id": user} | binding)
        d.publisher = a.as_(a.post(f"/v1/users/{user}/tokens", {"name": "smoke", "expires_in_days": 1})["token"])
        d.ids["publisher"] = user
    return d


def oci_artifact(demo, image: str) -> str:
    """The id of the image's artifact in the catalog, registered (signed by the demo's key, it claims) and made
    active by the platform admin where the world has none yet."""
    digest = demo.images[image].split("@")[1]
    artifacts = demo.admin.get(f"/v1/catalog/apps/{OCI_APP}/artifacts?limit=200")["items"]
    found = next((a for a in artifacts if a["kind"] == "oci" and a["digest"] == digest), None)
    if found is None:
        found = demo.admin.post(f"/v1/catalog/apps/{OCI_APP}/artifacts", {
            "kind": "oci", "reference": demo.images[image],
            "signer_public_key": demo.signing_key.public_pem.decode()})
        for target in ("staged", "canary", "active"):
            demo.admin.post(f"/v1/catalog/artifacts/{found['id']}/transitions", {"to": target, "reason": "smoke e2e"})
    return found["id"]


def draft(demo, version: str, image: str) -> dict:
    """A new draft version of the OCI app on the world's collection build, pinned to `image`."""
    base = demo.versions["v1"]
    return demo.publisher.post(f"/v1/catalog/apps/{OCI_APP}/versions", {
        "version": version, "artifact_id": base["artifact_id"], "workload_artifact_id": oci_artifact(demo, image),
        "compatibility": base["compatibility"], "runtime_profile": base["runtime_profile"],
        "adapter": base["adapter"]})


def smoke_run(demo, version: str, timeout: float = 240) -> dict:
    """Start the version's smoke gate on smoke1 and wait for its end; the finished gate."""
    gate = demo.publisher.post(f"/v1/catalog/apps/{OCI_APP}/versions/{version}/gates", {
        "kind": "smoke", "project_id": demo.ids["project"], "allocation_ids": [demo.ids[POOL]],
        "topology": [{"role": "replica", "count": 1}], "parameters": OCI_TEST_HOST_PARAMETERS,
        "reason": "smoke run on the test host"}, expect=(202,))
    deadline = time.monotonic() + timeout
    while gate["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, f"smoke gate still {gate['status']} after {timeout} s: {gate}"
        time.sleep(1)
        gate = demo.publisher.get(f"/v1/catalog/gates/{gate['id']}")
    return gate


def version_status(demo, version: str) -> str:
    return demo.publisher.get(f"/v1/catalog/apps/{OCI_APP}/versions/{version}")["status"]


def test_a_smoke_run_promotes_a_version_and_canary_instances_make_it_active(demo):
    draft(demo, "9.1.0", "v1")
    gate = smoke_run(demo, "9.1.0")
    assert gate["status"] == "passed" and gate["smoke"]["promoted"], gate
    assert version_status(demo, "9.1.0") == "canary"
    cid = gate["correlation_id"]
    # What ran is recorded on the gate, and the smoke instance's operations carry the gate's correlation id.
    # Torn down, the smoke instance is deleted (out of the project's quota); what it ran stays readable.
    instance_id = gate["smoke"]["instance_id"]
    assert gate["smoke"]["instance_name"].startswith("smoke-9-1-0-") and gate["smoke"]["instance_deleted"], gate
    assert demo.sa.http.get(f"/v1/instances/{instance_id}").status_code == 404
    ops = demo.sa.get(f"/v1/instances/{instance_id}/operations")["items"]
    assert [(o["kind"], o["status"], o["correlation_id"]) for o in ops] == [
        ("deploy", "succeeded", cid), ("decommission", "succeeded", cid)], ops
    assert [o["id"] for o in ops] == [o["id"] for o in gate["smoke"]["operations"]]
    events = demo.publisher.get(f"/v1/catalog/apps/{OCI_APP}/events?version=9.1.0&limit=100")["items"]
    assert [(e["type"], e["correlation_id"]) for e in events if e["gate_id"] == gate["id"]] == [
        ("gate.started", cid), ("gate.passed", cid)], events
    assert demo.oci_container(HOST) is None

    # canary -> active waits for a tenant's canary instance that deployed successfully.
    refused = demo.publisher.http.post(f"/v1/catalog/apps/{OCI_APP}/versions/9.1.0/transitions",
                                       json={"to": "active", "reason": "canary went well"})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "canary_instances_short"
    assert refused.json()["error"]["details"] == {"have": 0, "need": 1}
    early = demo.sa.post(f"/v1/projects/{demo.ids['project']}/instances", {
        "name": "early", "app_slug": OCI_APP, "version": "9.1.0", "allocation_ids": [demo.ids[POOL]],
        "topology": [{"role": "replica", "count": 1}], "parameters": OCI_TEST_HOST_PARAMETERS, "canary": True})
    demo.ids["early"] = early["id"]
    assert demo.operate("/deploy", instance="early")["status"] == "succeeded"
    active = demo.publisher.post(f"/v1/catalog/apps/{OCI_APP}/versions/9.1.0/transitions",
                                 {"to": "active", "reason": "canary went well"})
    assert active["status"] == "active"
    assert demo.operate("/decommission", instance="early")["status"] == "succeeded"
    assert demo.oci_container(HOST) is None


def test_a_failing_smoke_run_keeps_the_version_out(demo):
    draft(demo, "9.2.0", "forged")
    gate = smoke_run(demo, "9.2.0")
    assert gate["status"] == "failed", gate
    assert version_status(demo, "9.2.0") == "draft"
    # The failing operation's reason is the gate's, and its decommission cleaned up what the deploy left.
    assert gate["reason"].startswith("deploy failed: "), gate
    assert f"refused image {demo.images['forged']}" in " ".join(gate["reason"].split()), gate["reason"]
    assert [(o["kind"], o["status"]) for o in gate["smoke"]["operations"]] == [("deploy", "failed"),
                                                                                ("decommission", "succeeded")]
    events = demo.publisher.get(f"/v1/catalog/apps/{OCI_APP}/events?version=9.2.0&type=gate.failed")["items"]
    assert [e["payload"]["reason"] for e in events] == [gate["reason"]]
    assert demo.oci_container(HOST) is None
    assert_no_workload_files(lambda command: demo.host_sh(HOST, command), demo.smoke_policy_before)
    # A canary move by hand is the gate's: the publisher cannot move the version past it.
    refused = demo.publisher.http.post(f"/v1/catalog/apps/{OCI_APP}/versions/9.2.0/transitions",
                                       json={"to": "canary", "reason": "anyway"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "gate_required", refused.text
