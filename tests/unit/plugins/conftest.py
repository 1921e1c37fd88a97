"""The `live_slurm` fixture: a real Slurm 22.05 (munged, MariaDB, slurmdbd, slurmctld, slurmd) for the *_live
tests, on a test host of its own.

The host is a podman container that boots systemd and answers SSH (gpuaas_api.testhosts, the image with the
Slurm packages installed); slurm_local.py starts a private single-node cluster in it. The tests run the
modules there as Ansible does in production, over SSH, and read Slurm's state with its own commands.
"""

import subprocess
import uuid
from pathlib import Path

import live_ansible
import pytest
from gpuaas_api import testhosts
from slurm_local import NODE_NAME

HOST = "slurm"
CLUSTER_DIR = "/var/tmp/gpuaas-live-slurm"


class LiveSlurm:
    """The cluster on the test host: Slurm commands run there (`run`), modules run there over SSH (`module`)."""

    def __init__(self, container, inventory, conf, node):
        self.container = container
        self.inventory = inventory
        self.conf = conf
        self.node = node
        self.output = ""  # what the last module run printed before its result

    def run(self, *args, check=True):
        return subprocess.run(["podman", "exec", "-e", f"SLURM_CONF={self.conf}", self.container, *args],
                              capture_output=True, text=True, check=check, timeout=60)

    def module(self, name, args, check=False, diff=False):
        result, self.output = live_ansible.run(self.inventory, HOST, name, args, check=check, diff=diff)
        return result


@pytest.fixture(scope="session")
def live_slurm(tmp_path_factory):
    prefix = f"unit{uuid.uuid4().hex[:6]}"
    try:
        (host,) = testhosts.up(prefix, [HOST], "slurm")
        container = host["container"]
        subprocess.run(["podman", "cp", str(Path(__file__).with_name("slurm_local.py")), f"{container}:/root/"],
                       check=True, timeout=60)
        started = subprocess.run(["podman", "exec", container, "python3", "/root/slurm_local.py", "start",
                                  CLUSTER_DIR], capture_output=True, text=True, timeout=300, check=False)
        assert started.returncode == 0, f"the test host's Slurm did not start: {started.stdout}{started.stderr}"
        inventory = tmp_path_factory.mktemp("live-slurm") / "hosts.ini"
        inventory.write_text(testhosts.inventory([host]))
        yield LiveSlurm(container, inventory, started.stdout.strip(), NODE_NAME)
    finally:
        testhosts.down(prefix)
