"""gpuaas.apps.slurm_preflight's distribution check (tasks/os.yml) with this machine's real facts: accepted when
its distribution is in the supported list, refused with a message that names host, distribution and the
supported list otherwise. tests/integration/test_slurm_lifecycle.py proves that slurm_deploy refuses before
anything changes on real hosts."""

import platform

import pytest

from .ansible_run import PLAYBOOKS, local_inventory, run_playbook


@pytest.fixture(scope="module")
def this_os():
    release = platform.freedesktop_os_release()
    return release["NAME"].split()[0], release["VERSION_ID"].split(".")[0]


def check(tmp_path, **extra):
    return run_playbook(PLAYBOOKS / "os_check.yml", local_inventory(tmp_path / "hosts.ini", {"slurm_workers": ["n1"]}),
                        extra)


def test_the_supported_list_accepts_this_host(tmp_path, this_os):
    rc, output = check(tmp_path, slurm_supported_distributions=["Plan9 4", " ".join(this_os)])
    assert rc == 0, output[-3000:]


def test_an_unsupported_distribution_is_refused_naming_it(tmp_path, this_os):
    rc, output = check(tmp_path, slurm_supported_distributions=["Plan9 4"])
    assert rc != 0
    flat = " ".join(output.split())
    assert f"n1 runs {this_os[0]} {this_os[1]}" in flat and "they support Plan9 4" in flat, output[-3000:]
    assert "Nothing has been changed on any host." in flat


def test_debian_12_and_13_are_the_default(tmp_path, this_os):
    rc, output = check(tmp_path)
    assert (rc == 0) == (this_os in {("Debian", "12"), ("Debian", "13")}), output[-3000:]
    if rc:
        assert "they support Debian 12, Debian 13" in " ".join(output.split())
