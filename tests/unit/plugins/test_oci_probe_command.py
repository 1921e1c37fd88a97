"""oci_probe's command probe executed for real: `ansible -m gpuaas.apps.oci_probe` on the control node (local
connection) against a real podman container of this machine, the testregistry's busybox httpd image under a tag
of this file's own (removed afterwards). The command runs in the container through `podman exec`: a command
that starts to succeed after some failed looks, one that keeps failing fast (well within its timeout), and one
that hangs past its timeout, which must be stopped in the container, not left running there."""

import subprocess
import sys
import time
import uuid

import live_ansible
import pytest
from gpuaas_api import testregistry as tr

VERSION = "probe-command"  # the image tag of this file alone: removed after it


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    """A running container named as oci_service names one (gpuaas-oci-<name>), and how to probe it."""
    image = tr.build_image(VERSION)
    name = f"probe-{uuid.uuid4().hex[:8]}"
    container = f"gpuaas-oci-{name}"
    inventory = tmp_path_factory.mktemp("probe") / "hosts.ini"
    inventory.write_text(f"node ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    try:
        subprocess.run(["podman", "run", "--detach", "--name", container, "--network", "none", image],
                       capture_output=True, text=True, check=True, timeout=60)

        class Workload:
            def probe(self, command, **probe):
                args = dict(name=name, probe=dict(type="command", command=command, **probe))
                return live_ansible.run(inventory, "node", "oci_probe", args)[0]

            def exec(self, *command):
                return subprocess.run(["podman", "exec", container, *command], capture_output=True, text=True,
                                      check=False, timeout=60)

            def processes(self):
                return subprocess.run(["podman", "top", container, "args"], capture_output=True, text=True,
                                      check=True, timeout=60).stdout

        yield name, Workload()
    finally:
        subprocess.run(["podman", "rm", "--force", "--ignore", "--time", "0", container], capture_output=True,
                       check=False, timeout=60)
        subprocess.run(["podman", "rmi", "--ignore", f"{tr.IMAGE_NAME}:{VERSION}-8080"], capture_output=True,
                       check=False, timeout=60)


def test_a_command_that_starts_to_succeed_makes_the_workload_ready(workload):
    name, container = workload
    # Not ready at the first look (which leaves a mark), ready at the second: the probe must look again.
    command = ["sh", "-c", "[ -e /www/looked ] || { : > /www/looked; echo not yet; exit 3; }; echo up"]
    result = container.probe(command, interval=0.2, timeout=5, deadline=20)
    assert not result.get("failed") and result["ready"], result.get("msg") or result
    assert result["attempts"] == 2 and result["detail"] == f"command {' '.join(command)}: rc=0: up", result
    assert result["probe"]["command"] == command and not result["changed"]


def test_a_command_that_fails_fails_the_probe_at_the_deadline_naming_its_exit_status_and_error(workload):
    name, container = workload
    result = container.probe(["cat", "/www/missing"], interval=0.2, timeout=10, deadline=1)
    assert result.get("failed") and not result["ready"], result
    assert result["msg"].startswith(f"workload {name} was not ready within 1s ({result['attempts']} probes); last: "
                                    "command cat /www/missing: rc=1: cat: can't open '/www/missing': "
                                    "No such file or directory"), result["msg"]
    # Each look failed at once, not after its 10 s timeout. (Counting looks within the one-second deadline would
    # measure how busy the machine is: a podman exec takes over half a second on a loaded one.)
    assert result["seconds"] < 3, result


def test_a_command_that_hangs_is_given_up_after_its_timeout_and_stopped_in_the_container(workload):
    name, container = workload
    started = time.monotonic()
    result = container.probe(["busybox", "sleep", "37"], timeout=1, deadline=0)
    took = time.monotonic() - started
    assert result.get("failed") and not result["ready"] and result["attempts"] == 1, result
    assert result["msg"].startswith(f"workload {name} was not ready within 0s (1 probes); last: "
                                    "command busybox sleep 37: no answer within 1s"), result["msg"]
    assert 1 <= result["seconds"] < 5 and took < 15, (result, took)
    # A look that timed out ends its command: it is not left running in the workload.
    assert "sleep 37" not in container.processes()
