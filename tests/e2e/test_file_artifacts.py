"""End to end: a file artifact reaches a host by digest, and a tampered copy is refused (issue 29 item 4).

On the oci_demo world (tests/conftest.py): a small file uploaded to the content store and registered as a `file`
artifact of the OCI app, a version of the app whose adapter needs it mounted at /www/site.txt (the test image's
busybox httpd serves /www), deployed on the test host. What the service serves back hashes to the artifact's digest.
Then the attack a real host faces: its copy altered in place (someone with write access on the host; the container
sees it read-only). The next run refuses it, naming the digest, and removes it; the run after that places a verified
copy again. The instance is decommissioned at the end, which removes the file from the host, leaving the world to
the other tests."""

import hashlib
import secrets
import urllib.request

import pytest
from gpuaas_api.demo import OCI_APP, OCI_PORT, OCI_TEST_HOST_PARAMETERS

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

HOST = "web1"  # the one test host of the oci_demo fixture
FILES = {"variable": "oci_workload_files",
         "needs": {"site": {"mount": "/www/site.txt", "description": "the page the service serves"}}}


def served(demo) -> bytes:
    url = f"http://{demo.hosts[HOST]['address']}:{OCI_PORT}/site.txt"
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - a test host of this demo
        return response.read()


def test_a_file_artifact_reaches_the_host_by_digest_and_a_tampered_copy_is_refused(oci_demo):
    demo = oci_demo
    base = demo.versions.get("v1") or demo.register_oci_app("v1")
    data = f"a file artifact, {secrets.token_hex(8)}\n".encode()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    stored = demo.admin.http.put(f"/v1/content/{digest}", content=data)
    assert stored.status_code == 201, stored.text
    site = demo.admin.post(f"/v1/catalog/apps/{OCI_APP}/artifacts", {
        "kind": "file", "reference": f"site.txt@{digest}", "media_type": "text/plain"})
    assert (site["size"], site["digest"]) == (len(data), digest)
    for status in ("staged", "canary", "active"):
        demo.admin.post(f"/v1/catalog/artifacts/{site['id']}/transitions", {"to": status, "reason": "e2e files"})
    name = f"{base['version']}.files"
    version = demo.admin.post(f"/v1/catalog/apps/{OCI_APP}/versions", {
        "version": name, "artifact_id": base["artifact_id"], "workload_artifact_id": base["workload_artifact_id"],
        "compatibility": base["compatibility"], "runtime_profile": base["runtime_profile"],
        "adapter": base["adapter"] | {"files": FILES}, "files": {"site": site["id"]}})
    assert version["files"]["site"]["digest"] == digest
    demo.admin.post(f"/v1/catalog/apps/{OCI_APP}/versions/{name}/transitions",
                    {"to": "active", "reason": "e2e: the gates are tests of their own", "skip_gates": True})

    instance = demo.sa.post(f"/v1/projects/{demo.ids['project']}/instances", {
        "name": "files", "app_slug": OCI_APP, "version": name, "allocation_ids": [demo.ids["pool-oci"]],
        "topology": [{"role": "replica", "count": 1}], "parameters": OCI_TEST_HOST_PARAMETERS})
    demo.ids["files"] = instance["id"]
    path = f"/var/lib/gpuaas/files/sha256/{digest.split(':')[1]}"
    try:
        op = demo.operate("/deploy", instance="files")
        assert op["status"] == "succeeded", op
        # The service serves the file's bytes: they hash to the artifact's digest.
        assert "sha256:" + hashlib.sha256(served(demo)).hexdigest() == digest
        assert demo.host_sh(HOST, f"stat -c %a {path}") == "444"
        mounts = demo.oci_container(HOST)["Mounts"]
        (mount,) = [m for m in mounts if m["Destination"] == "/www/site.txt"]
        assert (mount["Source"], mount["RW"]) == (path, False)

        # The host's copy altered in place: the next run refuses it, naming the digest, and removes it.
        demo.host_sh(HOST, f"chmod 644 {path} && echo tampered >> {path}")
        refused = demo.operate("/reconfigure", {"parameters": OCI_TEST_HOST_PARAMETERS}, instance="files")
        assert refused["status"] == "failed", refused
        failures = [e for e in demo.events("files", correlation_id=refused["correlation_id"])
                    if digest in str(e["payload"])]
        assert failures and "altered on this host" in str(failures), refused
        assert demo.host_sh(HOST, f"test -e {path} && echo present || echo gone") == "gone"
        # The run after it places a verified copy again.
        again = demo.operate("/reconfigure", {"parameters": OCI_TEST_HOST_PARAMETERS}, instance="files")
        assert again["status"] == "succeeded", again
        assert "sha256:" + hashlib.sha256(served(demo)).hexdigest() == digest
    finally:
        done = demo.operate("/decommission", instance="files")
        assert done["status"] == "succeeded", done
    # The tenant's file leaves the host with its workload.
    assert demo.host_sh(HOST, f"test -e {path} && echo present || echo gone") == "gone"
