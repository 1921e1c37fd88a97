"""The pure parts of plugins/module_utils/oci_steps.py and oci.py's readiness wait: the request's problems as the
control node finds them (filter gpuaas.apps.oci_request_problems), and the wait's timing. The steps themselves run
on a real host in test_oci_service_diff.py and tests/integration/test_oci_lifecycle.py."""

import socket

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuaas.apps.plugins.filter.oci import oci_request_problems
from ansible_collections.gpuaas.apps.plugins.module_utils import oci
from ansible_collections.gpuaas.apps.plugins.module_utils.oci_steps import request_problems, workload_problems

DIGEST = "sha256:" + "ab" * 32
IMAGE = f"10.88.0.5:5000/apps/web@{DIGEST}"
# The options as the role gives them (roles/oci_workload/vars/main.yml), with the role's defaults.
GOOD = {"name": "web", "image": IMAGE, "auth": None, "public_key": "-----BEGIN PUBLIC KEY-----", "unsigned": False,
        "insecure_registries": ["10.88.0.5:5000"], "command": [], "env": {"A": "1"}, "network": "bridge",
        "ports": [{"host_port": 8080}], "volumes": [], "cpus": None, "memory": None, "cgroups": True,
        "restart": "on-failure", "stop_timeout": 10, "gpus": "auto", "devices": [], "probe": {"type": "none"},
        "keep_images": 1}


def test_a_good_request_has_no_problem():
    assert workload_problems(GOOD) == [] and oci_request_problems(GOOD) == []


def test_every_problem_of_a_request_is_named_at_once():
    bad = GOOD | {"image": "10.88.0.5:5000/apps/web:v1", "ports": [{"host_port": 70000}],
                  "probe": {"type": "http"}, "network": "overlay", "memory": "lots", "keep_images": -1}
    problems = oci_request_problems(bad)
    assert problems == [
        "image '10.88.0.5:5000/apps/web:v1' names a tag ('v1'); images are pulled by digest only: "
        "registry.example.com/team/app@sha256:<64 hex digits>",
        "port {'host_port': 70000}: host_port and container_port must be from 1 to 65535",
        "memory 'lots': a number of bytes with an optional unit b, k, m or g (e.g. 512m)",
        "probe type http needs a port (1-65535)",
        "keep_images, stop_timeout and restart_sec must not be negative",
        "network 'overlay': one of bridge, host",
    ], problems


@pytest.mark.parametrize(("change", "problem"), [
    ({"public_key": None}, "public_key is required"),
    ({"unsigned": True}, "give either public_key or unsigned=true, not both"),
    ({"insecure_registries": ["not a registry"]}, "'not a registry' is not a registry (host or host:port)"),
    ({"auth": {"registry": "other.example.com", "username": "u", "password": "s3cret-pw"}},
     f"the credentials are for registry other.example.com, but image {IMAGE} is in 10.88.0.5:5000"),
    ({"image": ""}, "no image: name the image to run by digest"),
])
def test_the_trust_and_the_credentials_are_checked_on_the_control_node_too(change, problem):
    problems = workload_problems(GOOD | change)
    assert len(problems) == 1 and problems[0].startswith(problem), problems
    assert "s3cret-pw" not in " ".join(problems)  # a password is never repeated


def test_a_value_of_the_wrong_shape_is_a_problem_not_a_crash():
    problems = request_problems(GOOD | {"ports": "8080", "env": ["A=1"]})
    assert problems[0] == "env must be a mapping of names to values", problems
    assert problems[1].startswith("ports: not of the expected shape ("), problems
    with pytest.raises(AnsibleFilterError, match="expects the options of gpuaas.apps.oci_workload as a dict"):
        oci_request_problems("web")


class Clock:
    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


class Podman:
    """Test double of oci.Podman: how often the readiness wait asks podman for the container."""

    def __init__(self):
        self.inspected = 0

    def container(self, name):
        self.inspected += 1
        return {"State": {"Status": "running"}}


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_wait_looks_again_soon_then_backs_off_to_the_interval_and_reports_the_container_at_the_end():
    clock, podman, running = Clock(), Podman(), []
    probe = oci.normalize_probe({"type": "tcp", "port": closed_port(), "interval": 0.5, "deadline": 2,
                                 "timeout": 0.2})
    ok, attempts, _seconds, detail = oci.wait_ready(podman, probe, "gpuaas-oci-web", clock=clock, sleep=clock.sleep,
                                                    unit_running=lambda: running.append(1) or True)
    assert not ok and "refused" in detail
    assert clock.sleeps[:5] == [0.05, 0.1, 0.2, 0.4, 0.5] and set(clock.sleeps[4:]) == {0.5}
    # Each look asked systemd (the callable), never podman; only the last word reads the container's state.
    assert len(running) == attempts and podman.inspected == 1
