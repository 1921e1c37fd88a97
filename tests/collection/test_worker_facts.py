"""gpuaas.apps.slurm_worker's facts (tasks/facts.yml) evaluated twice in one run give the same node definition.

This machine has no GPU, so a TEST DOUBLE stands in for nvidia-smi only: a script that prints what
`nvidia-smi --query-gpu=index,name --format=csv,noheader` prints on a two-GPU host. The role, its variables
and ansible-playbook are real.
"""

import json

from .ansible_run import PLAYBOOKS, local_inventory, run_playbook

FAKE_NVIDIA_SMI = """#!/bin/sh
# Test double for nvidia-smi (no GPU on the test machine): two H100s, whatever the arguments.
printf '0, NVIDIA H100 80GB HBM3\\n1, NVIDIA H100 80GB HBM3\\n'
"""


def test_a_second_evaluation_keeps_the_gpu_count(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI)
    smi.chmod(0o755)
    out = tmp_path / "facts.json"
    # Hardware given, not gathered: only the GPU count is under test.
    inventory = local_inventory(tmp_path / "hosts.ini", {"slurm_workers": ["gpu1"]}, {
        "slurm_worker_nvidia_smi": str(smi), "slurm_worker_cpus": 8, "slurm_worker_real_memory": 64000,
        "slurm_worker_addr": "192.0.2.10"})
    rc, output = run_playbook(PLAYBOOKS / "worker_facts_twice.yml", inventory, {"facts_out": str(out)})
    assert rc == 0, output[-3000:]
    written = json.loads(out.read_text())
    expected = {"name": "gpu1", "addr": "192.0.2.10", "cpus": 8, "real_memory": 64000, "features": [], "gpus": 2}
    assert written["first"] == expected
    assert written["second"] == expected, "the second evaluation of the facts changed the node definition"
