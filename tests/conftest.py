"""Fixtures shared across test folders. Only what several folders use lives here."""

import functools
import json
import os
import re
import tempfile
import uuid
from pathlib import Path

import pytest

OCI_HOST = "web1"
# The session fixtures that hold a world of test hosts (or a slow build): every module that names one runs on the
# same worker of the test command (pytest-xdist), so each is made once per run.
SHARED_WORLDS = ("oci_demo", "live_slurm", "wheelhouse")
ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    """Each worker of the test command gets a temp directory of its own (TMPDIR, which the service's processes
    and their runs inherit): tests that prove a run left no scratch file behind look in their own."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        # Short: runs put SSH control sockets in it, and a socket's path has at most 107 bytes.
        own = Path(tempfile.gettempdir()) / worker
        own.mkdir(exist_ok=True)
        os.environ["TMPDIR"] = tempfile.tempdir = str(own)


@functools.cache
def scope(module: str) -> str:
    """The unit of work the test command hands one worker: a module, whose tests then run in order (module
    fixtures are clusters the tests step through), or the world of SHARED_WORLDS the module names, with every
    other module that names it."""
    text = (ROOT / module).read_text() if module.endswith(".py") else ""
    return next((world for world in SHARED_WORLDS if re.search(rf"\b{world}\b", text)), module)


def pytest_xdist_make_scheduler(config, log):
    """The test command's scheduler: xdist's load-by-scope, with scope() as the scope. (xdist's own
    `--dist loadgroup` marks no longer reach its scheduler under pytest 9, whose node ids it cannot extend.)"""
    from xdist.scheduler import LoadScopeScheduling

    class WorldScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope(nodeid.split("::")[0])

    return WorldScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """Modules with slow tests or test hosts first (the scheduler hands out scopes in collection order), so that
    none of them starts last; a module's tests keep their order. Every worker sorts alike, as xdist requires."""
    first_heavy = set()
    for item in items:
        if "slow" in item.keywords or "hosts" in item.keywords:
            first_heavy.add(scope(item.nodeid.split("::")[0]))
    order = {item: index for index, item in enumerate(items)}
    items.sort(key=lambda item: (scope(item.nodeid.split("::")[0]) not in first_heavy, order[item]))


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
