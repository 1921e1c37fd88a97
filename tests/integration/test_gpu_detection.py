"""GPU detection and GRES rendering on a real test host.

This machine has no GPU, so a TEST DOUBLE stands in for nvidia-smi only: a script printing, for
`nvidia-smi -q -x`, a report derived from a real H100's (tests/unit/plugins/fixtures/nvidia-smi-q-x-h100.xml,
its <gpu> element copied): two GPUs with the minor numbers 0 and 2, as on a host where the GPU with minor 1 fell
off the bus, or 0 and 1. Everything else is real: the worker role's fact gathering (gpuaas.apps.host_facts) on a
systemd host over SSH, and the controller's own templates.
"""

import json
import subprocess
import uuid

import pytest

from .slurm_harness import ANSIBLE_PLAYBOOK, ROOT, Cluster, ansible_env

pytestmark = [pytest.mark.hosts]

HOLE_REPORT = (ROOT / "tests/unit/plugins/fixtures/nvidia-smi-q-x-h100-minors-0-2.xml").read_text()
REPORT_ON_HOST = "/usr/local/share/nvidia-smi-q-x.xml"
NVIDIA_SMI_DOUBLE = f"""#!/bin/sh
# Test double for nvidia-smi (no GPU on the test machine): prints the saved report for -q -x only.
[ "$*" = "-q -x" ] || {{ echo "called with: $*" >&2; exit 64; }}
cat {REPORT_ON_HOST}
"""


@pytest.fixture(scope="module")
def gpu_host(tmp_path_factory):
    cluster = Cluster.start(f"gpu{uuid.uuid4().hex[:6]}", tmp_path_factory.mktemp("gpu"), ["ctl", "g1"])
    try:
        yield cluster
    finally:
        cluster.stop()


def install_nvidia_smi(cluster, report):
    """Puts the test double on g1 as /usr/local/bin/nvidia-smi, printing `report`."""
    container = cluster.hosts["g1"]["container"]
    subprocess.run(["podman", "exec", "-i", container, "sh", "-c", f"cat > {REPORT_ON_HOST}"], input=report,
                   text=True, check=True, timeout=60)
    cluster.sh("g1", f"cat > /usr/local/bin/nvidia-smi <<'EOF'\n{NVIDIA_SMI_DOUBLE}EOF\n"
                     "chmod +x /usr/local/bin/nvidia-smi")


def render(cluster, tmp_path, **host_vars):
    """(node definition, slurm.conf, the lines of gres.conf that name nodes) for g1."""
    cluster.workers = ["g1"]
    overrides = {
        "g1": {
            "gpu_detect_output": str(tmp_path),
            "gpu_detect_templates": str(ROOT / "roles/slurm_controller/templates"),
            **host_vars,
        }
    }
    inventory = cluster.inventory(host_overrides=overrides, name=f"gpu-{tmp_path.name}.ini")
    proc = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", str(inventory), "--limit", "g1",
         str(ROOT / "tests/integration/playbooks/gpu_detect.yml")],
        capture_output=True,
        text=True,
        env=ansible_env(),
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    gres_lines = [line for line in (tmp_path / "gres.conf").read_text().splitlines() if line.startswith("NodeName=")]
    return json.loads((tmp_path / "definition.json").read_text()), (tmp_path / "slurm.conf").read_text(), gres_lines


def node_line(slurm_conf):
    return next(line for line in slurm_conf.splitlines() if line.startswith("NodeName=g1 "))


def test_gpus_reported_by_nvidia_smi_become_gres_one_line_per_device_file(gpu_host, tmp_path):
    minors_0_1 = HOLE_REPORT.replace("<minor_number>2</minor_number>", "<minor_number>1</minor_number>")
    install_nvidia_smi(gpu_host, minors_0_1)
    definition, slurm_conf, gres_lines = render(gpu_host, tmp_path)
    assert definition["gpus"] == 2 and definition["gpu_minors"] == [0, 1], definition
    assert " Gres=gpu:2 " in node_line(slurm_conf)
    assert "GresTypes=gpu" in slurm_conf.splitlines()
    assert gres_lines == ["NodeName=g1 Name=gpu File=/dev/nvidia0", "NodeName=g1 Name=gpu File=/dev/nvidia1"]


def test_a_gpu_gone_from_the_bus_leaves_a_hole_in_the_device_files(gpu_host, tmp_path):
    """nvidia-smi indexes the two GPUs 0 and 1; their device files are /dev/nvidia0 and /dev/nvidia2."""
    install_nvidia_smi(gpu_host, HOLE_REPORT)
    definition, slurm_conf, gres_lines = render(gpu_host, tmp_path)
    assert definition["gpus"] == 2 and definition["gpu_minors"] == [0, 2], definition
    assert " Gres=gpu:2 " in node_line(slurm_conf)
    assert gres_lines == ["NodeName=g1 Name=gpu File=/dev/nvidia0", "NodeName=g1 Name=gpu File=/dev/nvidia2"]


def test_a_host_without_nvidia_smi_gets_no_gres(gpu_host, tmp_path):
    gpu_host.sh("g1", "rm -f /usr/local/bin/nvidia-smi")
    definition, slurm_conf, gres_lines = render(gpu_host, tmp_path)
    assert definition["gpus"] == 0 and "gpu_minors" not in definition, definition
    assert "Gres=" not in slurm_conf
    assert "GresTypes" not in slurm_conf
    assert gres_lines == []


def test_an_explicit_gpu_count_overrides_detection(gpu_host, tmp_path):
    install_nvidia_smi(gpu_host, HOLE_REPORT)
    definition, slurm_conf, gres_lines = render(gpu_host, tmp_path, slurm_worker_gpus=1)
    assert definition["gpus"] == 1 and definition["gpu_minors"] == [0], definition
    assert " Gres=gpu:1 " in node_line(slurm_conf)
    assert gres_lines == ["NodeName=g1 Name=gpu File=/dev/nvidia0"]


def test_a_registry_entry_of_an_older_version_keeps_devices_0_to_n_minus_1(gpu_host, tmp_path):
    """An entry written before gpu_minors was recorded has only the count."""
    definition, slurm_conf, gres_lines = render(gpu_host, tmp_path, slurm_worker_gpus=2, gpu_detect_older_entry=True)
    assert " Gres=gpu:2 " in node_line(slurm_conf)
    assert gres_lines == ["NodeName=g1 Name=gpu File=/dev/nvidia0", "NodeName=g1 Name=gpu File=/dev/nvidia1"]
