"""GPU detection and GRES rendering on a real test host.

This machine has no GPU, so a TEST DOUBLE stands in for nvidia-smi only: a script printing what
`nvidia-smi --query-gpu=index,name --format=csv,noheader` prints on a two-GPU host. Everything else is
real: the worker role's fact gathering on a systemd host over SSH, and the controller's own templates.
"""

import uuid

import pytest

from .slurm_harness import ROOT, Cluster

pytestmark = [pytest.mark.hosts]

FAKE_NVIDIA_SMI = """#!/bin/sh
# Test double for nvidia-smi (no GPU on the test machine): two H100s.
printf '0, NVIDIA H100 80GB HBM3\\n1, NVIDIA H100 80GB HBM3\\n'
"""


@pytest.fixture(scope="module")
def gpu_host(tmp_path_factory):
    cluster = Cluster.start(f"gpu{uuid.uuid4().hex[:6]}", tmp_path_factory.mktemp("gpu"), ["ctl", "g1"])
    try:
        yield cluster
    finally:
        cluster.stop()


def render(cluster, tmp_path, **host_vars):
    cluster.workers = ["g1"]
    overrides = {
        "g1": {
            "gpu_detect_output": str(tmp_path),
            "gpu_detect_templates": str(ROOT / "roles/slurm_controller/templates"),
            **host_vars,
        }
    }
    inventory = cluster.inventory(host_overrides=overrides, name=f"gpu-{tmp_path.name}.ini")
    import subprocess

    from .slurm_harness import ANSIBLE_PLAYBOOK, ansible_env

    proc = subprocess.run(
        [
            ANSIBLE_PLAYBOOK,
            "-i",
            str(inventory),
            "--limit",
            "g1",
            str(ROOT / "tests/integration/playbooks/gpu_detect.yml"),
        ],
        capture_output=True,
        text=True,
        env=ansible_env(),
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return (tmp_path / "slurm.conf").read_text(), (tmp_path / "gres.conf").read_text()


def test_gpus_reported_by_nvidia_smi_become_gres(gpu_host, tmp_path):
    install = f"cat > /usr/local/bin/nvidia-smi <<'EOF'\n{FAKE_NVIDIA_SMI}EOF\nchmod +x /usr/local/bin/nvidia-smi"
    gpu_host.sh("g1", install)
    slurm_conf, gres_conf = render(gpu_host, tmp_path)
    node_line = next(line for line in slurm_conf.splitlines() if line.startswith("NodeName=g1 "))
    assert " Gres=gpu:2 " in node_line
    assert "GresTypes=gpu" in slurm_conf.splitlines()
    assert "NodeName=g1 Name=gpu File=/dev/nvidia[0-1]" in gres_conf.splitlines()


def test_a_host_without_nvidia_smi_gets_no_gres(gpu_host, tmp_path):
    gpu_host.sh("g1", "rm -f /usr/local/bin/nvidia-smi")
    slurm_conf, gres_conf = render(gpu_host, tmp_path)
    assert "Gres=" not in slurm_conf
    assert "GresTypes" not in slurm_conf
    assert "NodeName=" not in gres_conf


def test_an_explicit_gpu_count_overrides_detection(gpu_host, tmp_path):
    slurm_conf, gres_conf = render(gpu_host, tmp_path, slurm_worker_gpus=1)
    assert " Gres=gpu:1 " in next(line for line in slurm_conf.splitlines() if line.startswith("NodeName=g1 "))
    assert "NodeName=g1 Name=gpu File=/dev/nvidia0" in gres_conf.splitlines()
