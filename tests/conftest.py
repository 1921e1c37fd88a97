"""Fixtures shared across test folders. Only what several folders use lives here."""

import json
import uuid

import pytest

OCI_HOST = "web1"


@pytest.fixture(scope="session")
def oci_demo():
    """The control service (serve and worker processes, as `gpuaas demo` starts them), a registry host
    that takes only tokens of the service, signed test images pushed there, and one Debian 13 test host
    running podman, registered as the allocation `pool-oci`. One per test session: tests/e2e drives an
    OCI workload through it, tests/security kills a worker during a run on it."""
    from gpuaas_api.demo import Demo

    lines = []
    d = Demo(prefix=f"ocie2e{uuid.uuid4().hex[:6]}", say=lines.append,
             worker_env={"GPUAAS_HEALTH_INTERVAL_SECONDS": "10"})
    d.lines = lines
    try:
        d.start_service(registry=True)
        d.setup_tenancy()
        # v3 is the canary; "forged" claims the demo's signer but is signed with another key.
        d.prepare_oci([OCI_HOST], signed=("v1", "v2", "v3"), forged=("forged",))
        d.register_oci_hosts("pool-oci", [OCI_HOST])
        d.policy_before = json.loads(d.host_sh(OCI_HOST, "cat /etc/containers/policy.json"))
        d.versions = {}
        yield d
    finally:
        d.close()
