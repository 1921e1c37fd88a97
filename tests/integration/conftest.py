import shutil
import uuid

import pytest

from .slurm_harness import ANSIBLE_PLAYBOOK, Cluster


def pytest_collection_modifyitems(config, items):
    if shutil.which("podman") and ANSIBLE_PLAYBOOK:
        return
    skip = pytest.mark.skip(
        reason="needs podman and ansible-playbook: run `make test` (scripts/setup.sh installs them)"
    )
    for item in items:
        if "hosts" in item.keywords:
            item.add_marker(skip)


# The Debian releases the Slurm lifecycle runs on, and the test host flavor of each.
SLURM_RELEASES = {"debian12": "slurm", "debian13": "slurm-trixie"}


@pytest.fixture(scope="module")
def cluster(request, tmp_path_factory):
    """Five fresh test hosts: a controller, three workers and a spare for replace; Debian 12 unless a test module
    parametrizes it with a release of SLURM_RELEASES."""
    release = getattr(request, "param", "debian12")
    prefix = f"it{uuid.uuid4().hex[:6]}"
    c = Cluster.start(prefix, tmp_path_factory.mktemp(f"cluster-{release}"), ["ctl", "w1", "w2", "w3", "w4"],
                      SLURM_RELEASES[release])
    try:
        yield c
    finally:
        c.stop()
