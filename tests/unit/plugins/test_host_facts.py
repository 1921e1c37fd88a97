"""host_facts through `ansible -m` on the control node: each fact it sets has the value ansible.builtin.setup
gives it on the same machine; the GPUs by device minor number from a stand-in nvidia-smi (a test double: no GPU
on this machine) printing a real H100's `nvidia-smi -q -x` report (fixtures/nvidia-smi-q-x-h100.xml) or one
derived from it (fixtures/nvidia-smi-q-x-h100-minors-0-2.xml: its <gpu> element copied, the copy at another PCI
address with minor number 2, as on a host where the GPU with minor 1 fell off the bus); none without nvidia-smi,
none with a warning when it fails or prints no XML; the installed packages as dpkg says; the apt sources files.
The roles run it on real test hosts in the Slurm lifecycle and molecule suites."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import live_ansible
import pytest

FIXTURES = Path(__file__).parent / "fixtures"
H100_REPORT = (FIXTURES / "nvidia-smi-q-x-h100.xml").read_text()
HOLE_REPORT = (FIXTURES / "nvidia-smi-q-x-h100-minors-0-2.xml").read_text()
FACTS = ("ansible_hostname", "ansible_default_ipv4", "ansible_processor_vcpus", "ansible_memtotal_mb",
         "ansible_distribution", "ansible_distribution_version", "ansible_distribution_major_version")


@pytest.fixture
def node(tmp_path):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"node ansible_connection=local ansible_python_interpreter={sys.executable}\n")

    class Node:
        def run(self, module="host_facts", **args):
            return live_ansible.run(inventory, "node", module, args)

    return Node()


def stand_in_nvidia_smi(tmp_path, script):
    """A test double for nvidia-smi (no GPU on this machine): a shell script."""
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o700)
    return str(path)


def nvidia_smi_printing(tmp_path, report):
    """The test double printing `report` for `nvidia-smi -q -x`, and refusing any other call."""
    saved = tmp_path / "report.xml"
    saved.write_text(report)
    return stand_in_nvidia_smi(
        tmp_path, f'[ "$*" = "-q -x" ] || {{ echo "called with: $*" >&2; exit 64; }}\ncat {shlex.quote(str(saved))}\n')


def setup_facts(tmp_path):
    inventory = tmp_path / "setup.ini"
    inventory.write_text(f"node ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    cmd = [str(live_ansible.ANSIBLE), "node", "-i", str(inventory), "-m", "ansible.builtin.setup", "-a",
           "gather_subset=!all,network,hardware", "-o"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300).stdout
    return json.loads(out.split(" => ", 1)[1])["ansible_facts"]


def test_each_fact_is_the_one_setup_gives(node, tmp_path):
    result, dummy = node.run(gpus=False)  # `ansible -a '{}'` would be raw parameters
    assert not result.get("failed") and result["changed"] is False, result
    ours, theirs = result["ansible_facts"], setup_facts(tmp_path)
    for fact in FACTS:
        if fact == "ansible_default_ipv4":
            want = {k: theirs[fact][k] for k in ("address", "interface", "gateway") if k in theirs[fact]}
            assert ours[fact] == want and want.get("address"), (ours[fact], theirs[fact])
        else:
            assert ours[fact] == theirs[fact], (fact, ours[fact], theirs[fact])
    assert set(ours) == set(FACTS), "only the facts it documents, and nothing read with gpus or packages off"
    assert "gpu_count" not in result and "gpu_minors" not in result and "installed_packages" not in result


def test_each_gpu_is_listed_by_its_minor_number_not_its_index(node, tmp_path):
    """Minors 0 and 2 (nvidia-smi indexes them 0 and 1): the device files are /dev/nvidia0 and /dev/nvidia2."""
    result, dummy = node.run(gpus=True, nvidia_smi=nvidia_smi_printing(tmp_path, HOLE_REPORT))
    assert not result.get("failed") and not result.get("warnings"), result
    assert result["gpu_minors"] == [0, 2] and result["gpu_count"] == 2, result
    assert "gpu_minors" not in result["ansible_facts"] and "gpu_count" not in result["ansible_facts"], \
        "return values, not facts a cache would keep"


def test_the_real_h100_report_is_one_gpu_with_minor_0(node, tmp_path):
    result, dummy = node.run(gpus=True, nvidia_smi=nvidia_smi_printing(tmp_path, H100_REPORT))
    assert result["gpu_minors"] == [0] and result["gpu_count"] == 1, result


def test_a_gpu_without_a_minor_number_is_left_out_with_a_warning(node, tmp_path):
    report = HOLE_REPORT.replace("<minor_number>2</minor_number>", "<minor_number>N/A</minor_number>")
    result, dummy = node.run(gpus=True, nvidia_smi=nvidia_smi_printing(tmp_path, report))
    assert not result.get("failed") and result["gpu_minors"] == [0] and result["gpu_count"] == 1, result
    assert any("00000000:00:08.0" in w and "'N/A'" in w and "not counted" in w
               for w in result.get("warnings", [])), result


def test_a_host_without_nvidia_smi_has_no_gpu(node):
    result, dummy = node.run(gpus=True, nvidia_smi="gpuaas-no-such-nvidia-smi")
    assert not result.get("failed") and result["gpu_count"] == 0 and result["gpu_minors"] == [], result


def test_a_failing_nvidia_smi_counts_no_gpu_and_says_why(node, tmp_path):
    double = stand_in_nvidia_smi(tmp_path, 'echo "NVIDIA-SMI has failed: driver not loaded" >&2\nexit 9\n')
    result, dummy = node.run(gpus=True, nvidia_smi=double)
    assert not result.get("failed") and result["gpu_count"] == 0 and result["gpu_minors"] == [], result
    assert any("rc 9" in w and "driver not loaded" in w for w in result.get("warnings", [])), result


def test_a_report_cut_short_counts_no_gpu_and_says_why(node, tmp_path):
    """nvidia-smi exits 0 but its XML stops half way."""
    report = HOLE_REPORT[:len(HOLE_REPORT) // 2]
    result, dummy = node.run(gpus=True, nvidia_smi=nvidia_smi_printing(tmp_path, report))
    assert not result.get("failed") and result["gpu_count"] == 0 and result["gpu_minors"] == [], result
    assert any("-q -x printed no XML" in w for w in result.get("warnings", [])), result


def test_packages_are_dpkgs_answer_and_the_apt_sources_files_are_listed(node):
    result, dummy = node.run(packages=True)
    version = subprocess.run(["dpkg-query", "--show", "--showformat=${Version}", "dpkg"], check=True,
                             capture_output=True, text=True).stdout
    assert f"dpkg ii dpkg {version}" in result["installed_packages"], result.get("msg")
    listed = sorted(os.path.join("/etc/apt/sources.list.d", n) for n in os.listdir("/etc/apt/sources.list.d"))
    assert result["apt_source_files"] == listed


def test_read_returns_each_record_and_none_for_a_missing_one(node, tmp_path):
    record = tmp_path / "nodes.json"
    record.write_text('{"nodes": {"w1": {}}}\n')
    missing = tmp_path / "none.json"
    result, dummy = node.run(read=[str(record), str(missing)])
    assert not result.get("failed") and result["changed"] is False, result
    assert result["file_contents"] == {str(record): '{"nodes": {"w1": {}}}\n', str(missing): None}


def test_read_fails_on_a_record_it_cannot_read_rather_than_call_it_missing(node, tmp_path):
    """A registry that passed for an empty one would be rewritten with the new nodes alone."""
    directory = tmp_path / "a-directory"
    directory.mkdir()
    result, dummy = node.run(read=[str(directory)])
    assert result.get("failed") and result["msg"].startswith(f"cannot read {directory}:"), result
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe\x00")
    result, dummy = node.run(read=[str(binary)])
    assert result.get("failed") and result["msg"].startswith(f"{binary} is not UTF-8 text"), result


def test_read_refuses_a_relative_path(node):
    result, dummy = node.run(read=["etc/slurm/gpuaas-nodes.json"])
    assert result.get("failed") and result["msg"] == "read: etc/slurm/gpuaas-nodes.json is not an absolute path"
