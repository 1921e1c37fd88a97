"""The `live_slurm` fixture: a real Slurm 22.05 for the *_live tests, or a skip that says why not.

GPUAAS_SLURM_CONF=/path/slurm.conf (and GPUAAS_SLURM_NODE=<node>) points the tests at an existing cluster they
may drain and add accounts to. Otherwise, when the Slurm packages are installed and we are root, a private
throwaway cluster is started for the session (slurm_local.py) and stopped afterwards.
"""

import os
import subprocess
import tempfile

import pytest
from slurm_local import NODE_NAME, Cluster, missing_requirements


class LiveSlurm:
    def __init__(self, conf, node):
        self.conf = conf
        self.node = node

    def run(self, *args, check=True):
        return subprocess.run(
            args, env=dict(os.environ, SLURM_CONF=self.conf), capture_output=True, text=True, check=check, timeout=60
        )


@pytest.fixture(scope="session")
def live_slurm():
    conf = os.environ.get("GPUAAS_SLURM_CONF")
    if conf:
        live = LiveSlurm(conf, os.environ.get("GPUAAS_SLURM_NODE", NODE_NAME))
        if live.run("scontrol", "ping", check=False).returncode != 0:
            pytest.skip(f"GPUAAS_SLURM_CONF={conf} is set but `scontrol ping` fails")
        yield live
        return
    reason = missing_requirements()
    if reason:
        pytest.skip(f"no real Slurm to run against: {reason}; set GPUAAS_SLURM_CONF to use an existing cluster")
    with tempfile.TemporaryDirectory(prefix="gpuaas-live-slurm-") as tmp:
        cluster = Cluster(tmp)
        try:
            cluster.start()
            yield LiveSlurm(str(cluster.conf), NODE_NAME)
        finally:
            cluster.stop()
