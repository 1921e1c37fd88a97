"""The filters gpuaas.apps.deb_request and deb_unsatisfied on dpkg-query lines as a Debian 12 Slurm host prints
them. The roles' use of them on real hosts (a pin moves every package of the family, a satisfied request never
reaches apt, an upgrade and a downgrade do) is proven by tests/integration and tests/e2e."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuaas.apps.plugins.filter.deb import deb_request, deb_unsatisfied

# dpkg-query --show --showformat='${source:Package} ${db:Status-Abbrev}${Package} ${Version}\n'
INSTALLED = [
    "slurm-wlm ii slurmd 22.05.8-4+deb12u3",
    "slurm-wlm ii slurm-client 22.05.8-4+deb12u3",
    "slurm-wlm ii slurm-wlm-basic-plugins 22.05.8-4+deb12u3",
    "slurm-wlm ii libslurm38 22.05.8-4+deb12u3",
    "slurm-wlm rc slurmctld 22.05.8-4+deb12u3",  # removed, configuration left: not installed
    "munge ii munge 0.5.15-2",
    "munge ii libmunge2 0.5.15-2",
    "apt un apt-doc ",  # known, never installed: no version
]
WORKER = ["slurmd", "slurm-client", "slurm-wlm-basic-plugins"]


def test_without_a_version_the_packages_are_the_request():
    assert deb_request(WORKER, INSTALLED, "slurm-wlm") == WORKER


def test_a_pin_moves_every_package_of_the_family_the_host_has():
    assert deb_request(WORKER + ["hwloc"], INSTALLED, "slurm-wlm", "22.05.8-4+gpuaas1", "slurm") == [
        "slurmd=22.05.8-4+gpuaas1", "slurm-client=22.05.8-4+gpuaas1", "slurm-wlm-basic-plugins=22.05.8-4+gpuaas1",
        "libslurm38=22.05.8-4+gpuaas1",  # installed, built from slurm-wlm, not asked for: moves too
        "hwloc",  # not of the family: unpinned
    ]


def test_an_empty_family_match_makes_every_requested_package_family():
    request = deb_request(["munge", "libmunge2"], INSTALLED, "munge", "0.5.15-2")
    assert request == ["munge=0.5.15-2", "libmunge2=0.5.15-2"]


def test_packages_must_be_a_list():
    with pytest.raises(AnsibleFilterError, match="packages must be a list"):
        deb_request("slurmd", INSTALLED, "slurm-wlm", "1")


@pytest.mark.parametrize(("request_", "missing"), [
    (WORKER, []),  # installed, no pin
    (["slurmd=22.05.8-4+deb12u3", "libslurm38=22.05.8-4+deb12u3"], []),  # installed at the pin
    (["slurmd=22.05.8-4+gpuaas1", "slurm-client"], ["slurmd=22.05.8-4+gpuaas1"]),  # another version
    (["slurmctld"], ["slurmctld"]),  # configuration files left only
    (["apt-doc", "slurmdbd"], ["apt-doc", "slurmdbd"]),  # never installed, unknown
])
def test_unsatisfied_entries(request_, missing):
    assert deb_unsatisfied(request_, INSTALLED) == missing
