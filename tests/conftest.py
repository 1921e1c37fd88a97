"""Fixtures shared across test folders. Only what several folders use lives here."""

import json
import os
import tempfile
import uuid
from pathlib import Path

import pytest

OCI_HOST = "web1"
# The session fixtures that hold a world of test hosts (or a slow build): every module using one runs on the same
# worker of the test command (pytest-xdist), so each is made once per run.
SHARED_WORLDS = ("oci_demo", "live_slurm", "wheelhouse")


def pytest_configure(config):
    """Each worker of the test command gets a temp directory of its own (TMPDIR, which the service's processes
    and their runs inherit): tests that prove a run left no scratch file behind look in their own."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        own = Path(tempfile.gettempdir()) / f"pytest-worker-{worker}"
        own.mkdir(exist_ok=True)
        os.environ["TMPDIR"] = tempfile.tempdir = str(own)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(config, items):
    """Groups for the test command's `--dist loadgroup`: a module's tests run on one worker, in order (their
    module fixtures are clusters the tests step through), together with every module that shares one of
    SHARED_WORLDS. The groups that hold slow tests or test hosts are queued first, so that none of them starts
    last. Every worker sorts the same items the same way, as xdist requires."""
    parent: dict[str, str] = {}

    def root(node: str) -> str:
        while parent.setdefault(node, node) != node:
            node = parent[node]
        return node

    for item in items:
        module = root(item.nodeid.split("::")[0])
        for world in SHARED_WORLDS:
            if world in item.fixturenames:
                parent[module] = module = root(world)
    group = {item: root(item.nodeid.split("::")[0]) for item in items}
    first: dict[str, int] = {}
    slow: set[str] = set()
    for index, item in enumerate(items):
        first.setdefault(group[item], index)
        if "slow" in item.keywords or "hosts" in item.keywords:
            slow.add(group[item])
    order = {item: index for index, item in enumerate(items)}
    items.sort(key=lambda item: (group[item] not in slow, first[group[item]], order[item]))
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group[item]))


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
