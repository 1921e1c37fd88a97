"""The OCI workload playbooks on real hosts: podman inside test hosts that boot systemd, a real registry, real
signed images (gpuaas_api.testhosts, gpuaas_api.testregistry).

Two replicas: r1 runs Debian 13 (podman 5.4, which verifies sigstore signatures), r2 Debian 12 (podman 4.3.1
as Debian ships it: it cannot verify them, so r2 accepts unsigned images explicitly, oci_trust_unsigned). The
tests run in order and share the hosts: a tag refused, deploy, refused images, member add, a rolling upgrade
with registry credentials, a failed pull, rollback, the health read-back (a killed and a deaf replica, then
recovery), a forced member remove while r2's host is paused, the cleanup of r2 once it answers, decommission.

Test hosts are containers: their inner containers get no cgroups (oci_workload_cgroups=false) and only host
networking. They have no GPU either: a CDI spec for `nvidia.com/gpu=all` that only sets an environment
variable stands in for one (GPU_DOUBLE below).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ansible_runner
import pytest
import yaml
from gpuaas_api import testhosts
from gpuaas_api import testregistry as tr

from .oci_host import assert_no_workload_files
from .slurm_harness import ANSIBLE, ANSIBLE_PLAYBOOK, ROOT, PlaybookRun, ansible_env

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

REPO = "apps/web"
PORT = 8080
PASSWORD = "pw-Only-For-This-Test-7f3a"
# Test double for a GPU: the CDI spec nvidia-ctk would write for all GPUs, reduced to an environment variable
# the container gets when podman applies it.
GPU_DOUBLE = """\
# gpuaas test double: stands in for nvidia-ctk's spec on a host without GPUs.
cdiVersion: "0.3.0"
kind: nvidia.com/gpu
devices:
  - name: all
    containerEdits:
      env: [GPUAAS_TEST_GPU_DOUBLE=all]
"""
HOST_VARS = {
    "ansible_user": "root",
    "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
    "ansible_python_interpreter": "/usr/bin/python3",
    # Test hosts are containers: no cgroups and only host networking for the containers inside.
    "oci_workload_cgroups": False,
    "oci_workload_network": "host",
    "oci_workload_probe": {"type": "http", "port": PORT, "path": "/version.txt", "interval": 0.5, "deadline": 60},
    "oci_workload_env": {"GREETING": "hello world", "PERCENT": "100%"},
    "gpuaas_apt_cache_valid_time": 31536000,
}


class Replicas:
    """The registry, the replica hosts, the images, and the inventory of the workload on them."""

    def __init__(self, prefix: str, workdir: Path):
        self.prefix, self.workdir = prefix, workdir
        self.hosts: dict[str, dict] = {}
        self.replicas: list[str] = []

    def inventory(self, replicas: list[str] | None = None) -> Path:
        hosts = {}
        for name in self.replicas if replicas is None else replicas:
            hosts[name] = {"ansible_host": self.hosts[name]["address"]}
            if name == "r2":  # Debian 12's podman has sigstore verification patched out
                hosts[name] |= {"oci_trust_unsigned": True, "oci_trust_public_key": ""}
        key_file = next(iter(self.hosts.values()))["ssh_private_key_file"]
        inventory = {"all": {"vars": HOST_VARS | {
            "ansible_ssh_private_key_file": key_file,
            "oci_trust_public_key": self.key.public_pem.decode(),
            "oci_trust_insecure_registries": [self.registry.address],
            "oci_workload_stop_timeout": 2}, "children": {"oci_replicas": {"hosts": hosts}}}}
        path = self.workdir / "hosts.yml"
        path.write_text(json.dumps(inventory, indent=1))
        return path

    def playbook(self, name: str, *args: str, inventory: Path | None = None, timeout: float = 600,
                 **extra) -> PlaybookRun:
        cmd = [ANSIBLE_PLAYBOOK, "-i", str(inventory or self.inventory()), f"gpuaas.apps.{name}", *args]
        for key, value in extra.items():
            cmd += ["-e", json.dumps({key: value})]
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=oci_env(), timeout=timeout, check=False)
        output = proc.stdout + proc.stderr
        recap = {m[1]: {"changed": int(m[3]), "failed": int(m[5])} for m in RECAP.finditer(output)}
        (self.workdir / f"{name}-{int(time.time() * 1000)}.log").write_text(output)
        return PlaybookRun(proc.returncode, output, time.monotonic() - started, recap)

    def module(self, host: str, module: str, options: dict, *args: str) -> tuple[dict, str]:
        """gpuaas.apps.<module> run on one replica by `ansible`: (its result, failed or not; all it printed)."""
        cmd = [ANSIBLE, "-i", str(self.inventory()), host, "-o", "-m", f"gpuaas.apps.{module}", "-a",
               json.dumps(options), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=oci_env(), timeout=300, check=False)
        head, _, result = proc.stdout.partition(" => ")
        if not result:
            raise AssertionError(f"{module} on {host} gave no result ({proc.returncode}): {proc.stdout}{proc.stderr}")
        return json.loads(result) | {"failed": "SUCCESS" not in head}, proc.stdout + proc.stderr

    def sh(self, host: str, command: str, check: bool = True) -> str:
        proc = subprocess.run(["podman", "exec", self.hosts[host]["container"], "bash", "-c", command],
                              capture_output=True, text=True, timeout=120, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{host}: `{command}` failed ({proc.returncode}): {proc.stdout}{proc.stderr}")
        return proc.stdout.strip()

    def container(self, host: str) -> dict | None:
        """podman inspect of the workload's container on a host, or None."""
        out = self.sh(host, "podman container inspect gpuaas-oci-workload 2>/dev/null || true")
        return json.loads(out)[0] if out and out != "[]" else None

    def version(self, host: str, timeout: float = 3) -> str:
        url = f"http://{self.hosts[host]['address']}:{PORT}/version.txt"
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - our own test host
            return response.read().decode().strip()

    def status(self, replicas: list[str], **extravars) -> dict[str, dict]:
        """The adapter's status read-back, run the way the platform's refresh and health check run it:
        ansible-runner, the status module with the descriptor's options plus the members, on every host of the
        status role, the run's variables (the pinned image) in a vars file."""
        descriptor = yaml.safe_load((ROOT / "adapters" / "oci_service.yml").read_text())
        status = descriptor["status"]
        group = next(r for r in descriptor["roles"] if r["name"] == status["role"])["groups"][0]
        inventory = json.loads(self.inventory().read_text())
        results: dict[str, dict] = {}

        def collect(event):
            if event.get("event") in ("runner_on_ok", "runner_on_failed"):
                results[event["event_data"]["host"]] = event["event_data"]["res"]

        private = self.workdir / f"refresh-{int(time.time() * 1000)}"
        private.mkdir()
        (private / "vars.json").write_text(json.dumps(extravars))
        ansible_runner.run(
            private_data_dir=str(private), inventory=inventory, cmdline=f"-e @{private / 'vars.json'}",
            module=status["module"], module_args=json.dumps(status["options"] | {"members": replicas}),
            host_pattern=group, envvars=oci_env(), quiet=True, event_handler=collect,
        )
        return results


RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def oci_env() -> dict[str, str]:
    env = ansible_env()
    # ansible-runner finds `ansible` on PATH: the one of the Python running the tests, as the platform does.
    return env | {"ANSIBLE_PIPELINING": "True", "PATH": f"{Path(ANSIBLE).parent}:{env.get('PATH', '')}"}


@pytest.fixture(scope="module")
def oci(tmp_path_factory):
    prefix = f"ocilc{uuid.uuid4().hex[:6]}"
    replicas = Replicas(prefix, tmp_path_factory.mktemp("oci"))
    try:
        for flavor in ("registry", "oci-trixie", "oci"):
            testhosts.build(flavor)  # one at a time: two flavors share the Debian 13 base image
        testhosts.ensure_ssh_key()
        testhosts.ensure_network()
        with ThreadPoolExecutor(3) as pool:
            registry = pool.submit(tr.Registry.start, prefix)
            r1 = pool.submit(testhosts.up, prefix, ["r1"], "oci-trixie")
            r2 = pool.submit(testhosts.up, prefix, ["r2"], "oci")
            replicas.registry = registry.result()
            replicas.hosts = {h["name"]: h for h in r1.result() + r2.result()}
        replicas.key, other_key = tr.SigningKey.generate(), tr.SigningKey.generate()
        reg = replicas.registry
        replicas.refs = {
            "v1": tr.push(reg, REPO, "v1", tr.build_image("v1"), sign_with=replicas.key),
            "v2": tr.push(reg, REPO, "v2", tr.build_image("v2"), sign_with=replicas.key),
            "unsigned": tr.push(reg, REPO, "v3", tr.build_image("v3")),
            "other_key": tr.push(reg, REPO, "v4", tr.build_image("v4"), sign_with=other_key),
        }
        replicas.sh("r1", f"mkdir -p /etc/cdi && cat > /etc/cdi/gpuaas-test-gpu-double.yaml <<'EOF'\n{GPU_DOUBLE}EOF")
        replicas.policy_before = {h: json.loads(replicas.sh(h, "cat /etc/containers/policy.json"))
                                  for h in ("r1", "r2")}
        yield replicas
    finally:
        testhosts.down(prefix)


def untouched(run: PlaybookRun) -> None:
    assert all(c["changed"] == 0 for c in run.recap.values()), f"a refused run changed something: {run.recap}"


def test_an_image_named_by_tag_is_refused_before_anything_changes(oci):
    """The control node refuses it, naming every problem of the request that shows without the host."""
    oci.replicas = ["r1"]
    run = oci.playbook("oci_deploy", oci_workload_image=f"{oci.registry.address}/{REPO}:v1",
                       oci_workload_probe={"type": "http", "path": "/version.txt"})
    assert run.rc != 0
    assert (f"image '{oci.registry.address}/{REPO}:v1' names a tag ('v1'); images are pulled by digest only"
            in run.output), run.output[-3000:]
    assert "probe type http needs a port (1-65535)" in run.output, run.output[-3000:]
    untouched(run)
    assert oci.sh("r1", "ls /etc/containers/registries.d /var/lib/gpuaas-oci 2>/dev/null || true") == ""
    assert json.loads(oci.sh("r1", "cat /etc/containers/policy.json")) == oci.policy_before["r1"]


def test_deploy_runs_the_signed_image_until_its_probe_answers_and_a_second_run_changes_nothing(oci):
    run = oci.playbook("oci_deploy", oci_workload_image=oci.refs["v1"])
    assert run.rc == 0, run.output[-4000:]
    print(f"\noci_deploy (1 replica): {run.seconds:.1f} s")
    assert oci.version("r1") == "v1"
    container = oci.container("r1")
    assert container["ImageDigest"] == oci.refs["v1"].split("@")[1]
    assert oci.sh("r1", "systemctl is-active gpuaas-oci-workload; systemctl is-enabled gpuaas-oci-workload") \
        == "active\nenabled"
    env = dict(e.split("=", 1) for e in container["Config"]["Env"])
    # The environment file keeps values literal; the CDI spec standing in for a GPU was applied.
    assert env["GREETING"] == "hello world" and env["PERCENT"] == "100%"
    assert env["GPUAAS_TEST_GPU_DOUBLE"] == "all"
    assert oci.sh("r1", "stat -c %a /etc/gpuaas-oci/workload.env") == "600"
    policy = json.loads(oci.sh("r1", "cat /etc/containers/policy.json"))
    (requirement,) = policy["transports"]["docker"][f"{oci.registry.address}/{REPO}"]
    assert requirement["type"] == "sigstoreSigned" and requirement["signedIdentity"] == {"type": "matchRepository"}

    again = oci.playbook("oci_deploy", oci_workload_image=oci.refs["v1"])
    assert again.rc == 0, again.output[-3000:]
    assert set(again.changed.values()) == {0}, f"second oci_deploy changed something: {again.changed}"
    assert oci.container("r1")["Id"] == container["Id"], "a second run restarted the container"


def test_an_unsigned_image_is_refused_and_the_running_one_stays(oci):
    before = oci.container("r1")["Id"]
    run = oci.playbook("oci_upgrade", oci_workload_image=oci.refs["unsigned"])
    assert run.rc != 0
    assert (f"the trust policy /etc/containers/policy.json (transports.docker['{oci.registry.address}/{REPO}']) "
            f"refused image {oci.refs['unsigned']}: Error: Source image rejected: A signature was required, but no "
            "signature exists") in " ".join(run.output.split()), run.output[-3000:]
    assert oci.sh("r1", f"podman image exists {oci.refs['unsigned']} || echo absent") == "absent"
    assert oci.container("r1")["Id"] == before and oci.version("r1") == "v1"


def test_an_image_signed_with_another_key_is_refused(oci):
    result, _ = oci.module("r1", "oci_image", {"name": oci.refs["other_key"]})
    assert result["failed"]
    assert result["msg"].startswith(f"the trust policy /etc/containers/policy.json (transports.docker['"
                                    f"{oci.registry.address}/{REPO}']) refused image {oci.refs['other_key']}: ")
    assert "cryptographic signature verification failed" in result["msg"]
    assert oci.sh("r1", f"podman image exists {oci.refs['other_key']} || echo absent") == "absent"


def test_member_add_sets_up_only_the_new_replica(oci):
    oci.replicas = ["r1", "r2"]
    before = oci.container("r1")["Id"]
    run = oci.playbook("oci_member_add", oci_members="r2", oci_workload_image=oci.refs["v1"])
    assert run.rc == 0, run.output[-4000:]
    assert run.hosts_touched == {"r2"}
    assert oci.version("r2") == "v1" and oci.container("r1")["Id"] == before
    # Debian 12's podman 4.3.1 runs the same unit; it has no GPU double, so no GPU.
    assert "GPUAAS_TEST_GPU_DOUBLE=all" not in oci.container("r2")["Config"]["Env"]
    states = oci.status(["r1", "r2"])
    assert {h: r["member_states"] for h, r in states.items()} == {"r1": {"r1": "active"}, "r2": {"r2": "active"}}


def test_upgrade_pulls_with_credentials_then_restarts_one_replica_at_a_time(oci):
    oci.registry.set_credentials("puller", PASSWORD)
    credential = {"registry": oci.registry.address, "username": "puller", "password": PASSWORD}
    answers: list[tuple[str, str]] = []
    done = threading.Event()

    def watch():  # what clients see during the rollout
        while not done.is_set():
            for host in ("r1", "r2"):
                try:
                    answers.append((host, oci.version(host, timeout=1)))
                except OSError:
                    answers.append((host, "down"))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        run = oci.playbook("oci_upgrade", "-v", oci_workload_image=oci.refs["v2"],
                           oci_workload_registry_credential=credential)
    finally:
        done.set()
        watcher.join()
    assert run.rc == 0, run.output[-4000:]
    print(f"\noci_upgrade (2 replicas, one at a time): {run.seconds:.1f} s")
    assert PASSWORD not in run.output
    for host in ("r1", "r2"):
        assert oci.container(host)["ImageDigest"] == oci.refs["v2"].split("@")[1]
        assert oci.version(host) == "v2"
        assert oci.sh(host, "ls /run | grep gpuaas-oci-auth || true") == ""
        # The image it replaced stays for a rollback.
        assert oci.sh(host, f"podman image exists {oci.refs['v1']} && echo kept") == "kept"
    # Never both down at once: while one replica restarted, the other answered.
    samples = [answers[i:i + 2] for i in range(0, len(answers) - 1, 2)]
    assert not [s for s in samples if all(v == "down" for _, v in s)], samples
    assert [("r1", "v2"), ("r2", "v1")] in samples, "no sample caught the rollout half-way"


def test_a_failed_pull_leaves_no_credentials_behind(oci):
    credential = {"registry": oci.registry.address, "username": "puller", "password": PASSWORD + "-wrong"}
    try:
        result, output = oci.module("r2", "oci_image", {"name": oci.refs["unsigned"], "service": "workload",
                                                        "auth": credential}, "-vvv")
    finally:
        oci.registry.clear_credentials()
    assert result["failed"]
    assert result["msg"].startswith(f"registry {oci.registry.address} refused to serve image {oci.refs['unsigned']} "
                                    "without valid credentials: "), result["msg"]
    assert PASSWORD not in output
    assert oci.sh("r2", "ls /run | grep gpuaas-oci-auth || true") == ""


def test_rollback_returns_every_replica_to_the_kept_image(oci):
    run = oci.playbook("oci_rollback", oci_workload_image=oci.refs["v1"])
    assert run.rc == 0, run.output[-4000:]
    for host in ("r1", "r2"):
        assert oci.container(host)["ImageDigest"] == oci.refs["v1"].split("@")[1]
        assert oci.version(host) == "v1"


def test_a_replica_that_does_not_become_ready_stops_the_rollout(oci):
    """A changed environment restarts the first replica, whose probe then never answers (a path the workload
    does not serve): the run fails there and the second replica keeps its container and keeps serving."""
    running = {h: oci.container(h)["Id"] for h in ("r1", "r2")}
    deaf = HOST_VARS["oci_workload_probe"] | {"path": "/missing", "deadline": 2}
    run = oci.playbook("oci_upgrade", oci_workload_image=oci.refs["v1"], oci_workload_probe=deaf,
                       oci_workload_env=HOST_VARS["oci_workload_env"] | {"ROLLOUT": "stopped"})
    assert run.rc != 0
    assert "workload workload was not ready within 2s" in run.output, run.output[-3000:]
    restarted = [h for h in ("r1", "r2") if oci.container(h)["Id"] != running[h]]
    assert len(restarted) == 1, f"the rollout went on past the replica that did not become ready: {restarted}"
    (kept,) = {"r1", "r2"} - set(restarted)
    assert oci.version(kept) == "v1"

    again = oci.playbook("oci_deploy", oci_workload_image=oci.refs["v1"])
    assert again.rc == 0, again.output[-4000:]
    assert again.changed[kept] == 0 and oci.container(kept)["Id"] == running[kept]
    assert oci.version(restarted[0]) == "v1"


def test_a_volume_missing_on_one_replica_is_refused_before_any_replica_restarts(oci):
    """What depends on the host is checked there, on every replica, before any replica restarts."""
    running = {h: oci.container(h)["Id"] for h in ("r1", "r2")}
    oci.sh("r1", "mkdir -p /srv/gpuaas-test-data")
    try:
        run = oci.playbook("oci_deploy", oci_workload_image=oci.refs["v1"],
                           oci_workload_volumes=[{"source": "/srv/gpuaas-test-data", "target": "/data"}])
    finally:
        oci.sh("r1", "rmdir /srv/gpuaas-test-data")
    assert run.rc != 0
    assert "volume source /srv/gpuaas-test-data does not exist on this host" in run.output, run.output[-3000:]
    assert {h: oci.container(h)["Id"] for h in ("r1", "r2")} == running


def kill_and_stop(oci, host: str) -> None:
    """SIGKILL the workload's container, then stop its unit before systemd restarts it: a dead replica that
    stays dead, its exit status on record."""
    oci.sh(host, "kill -9 $(podman inspect gpuaas-oci-workload --format '{{.State.Pid}}') && for i in $(seq 100); do "
                 "systemctl is-active --quiet gpuaas-oci-workload || break; sleep 0.1; done; "
                 "systemctl stop gpuaas-oci-workload")


def test_health_read_back_says_what_runs_and_why_a_replica_failed_then_sees_it_recover(oci):
    digest = {v: oci.refs[v].split("@")[1] for v in ("v1", "v2")}
    started = time.monotonic()
    states = oci.status(["r1", "r2"], oci_workload_image=oci.refs["v1"])
    print(f"\nhealth read-back (2 replicas, ansible-runner): {time.monotonic() - started:.1f} s")
    assert {h: r["member_states"] for h, r in states.items()} == {"r1": {"r1": "active"}, "r2": {"r2": "active"}}
    for host in ("r1", "r2"):
        details = states[host]["member_details"][host]
        assert details["running_digest"] == digest["v1"] == details["pinned_digest"] and details["digest_matches"]
        assert (details["unit"], details["container"], details["reason"]) == ("active", "running", "")
        assert (details["probe"], details["probe_code"], details["probe_ok"]) == ("HTTP 200", 200, True)
        assert details["probe_target"] == f"GET http://127.0.0.1:{PORT}/version.txt"
        assert len(details) <= 16 and all(isinstance(v, str | int | bool | None) for v in details.values())
    # The platform pins another image than the one running: said, not judged (the record's image runs).
    pinned_v2 = oci.status(["r1"], oci_workload_image=oci.refs["v2"])["r1"]
    assert pinned_v2["member_states"] == {"r1": "active"}
    assert (pinned_v2["member_details"]["r1"]["pinned_digest"], pinned_v2["member_details"]["r1"]["digest_matches"]) \
        == (digest["v2"], False)

    # r2's container is killed and stays dead; r1's probe asks a port nobody listens on (its record edited).
    record = "/var/lib/gpuaas-oci/workload.json"
    kill_and_stop(oci, "r2")
    oci.sh("r1", f"cp {record} /root/record.json && sed -i 's/\"port\": {PORT}/\"port\": 8099/' {record}")
    try:
        states = oci.status(["r1", "r2"])
        assert {h: r["member_states"] for h, r in states.items()} == {"r1": {"r1": "failed"}, "r2": {"r2": "failed"}}
        dead, deaf = states["r2"]["member_details"]["r2"], states["r1"]["member_details"]["r1"]
        # Debian 12's systemd calls a unit stopped while it waited to restart failed, Debian 13's inactive.
        assert re.fullmatch(r"the unit gpuaas-oci-workload\.service is (inactive|failed) \(exit code 137\)",
                            dead["reason"]), dead
        assert (dead["container"], dead["running_digest"], dead["digest_matches"]) == ("absent", "", None)
        assert (dead["probe"], dead["probe_ok"]) == ("connection refused", False)
        assert dead["pinned_digest"] == digest["v1"]
        assert deaf["reason"] == "the probe got connection refused from GET http://127.0.0.1:8099/version.txt", deaf
        assert (deaf["unit"], deaf["container"], deaf["running_digest"]) == ("active", "running", digest["v1"])
    finally:
        oci.sh("r1", f"mv /root/record.json {record}")
        oci.sh("r2", "systemctl start gpuaas-oci-workload")
    states = oci.status(["r1", "r2"])
    assert {h: r["member_states"] for h, r in states.items()} == {"r1": {"r1": "active"}, "r2": {"r2": "active"}}
    assert states["r2"]["member_details"]["r2"]["reason"] == ""


def test_a_forced_remove_does_not_reach_the_unreachable_replica_and_keeps_the_other(oci):
    before = oci.container("r1")["Id"]
    # A paused host accepts the connection and never answers: a run that tried to reach it would hang (ssh's
    # ConnectTimeout ends at the TCP connection, not at the banner), hence the short limits.
    subprocess.run(["podman", "pause", oci.hosts["r2"]["container"]], check=True, capture_output=True)
    try:
        stray = oci.playbook("oci_member_remove", timeout=120, oci_members="r2", oci_members_unreachable="r1")
        assert stray.rc != 0 and stray.hosts_touched == set()
        assert ("oci_members_unreachable names hosts that this request does not remove (it is for replicas of "
                "oci_members that oci_member_remove removes): r1.") in stray.output, stray.output[-3000:]
        run = oci.playbook("oci_member_remove", timeout=120, oci_members="r2", oci_members_unreachable="r2")
        assert run.rc == 0, run.output[-4000:]
        print(f"\noci_member_remove of an unreachable replica: {run.seconds:.1f} s")
        assert run.hosts_touched == set(), run.recap
    finally:
        subprocess.run(["podman", "unpause", oci.hosts["r2"]["container"]], check=True, capture_output=True)
    assert oci.container("r1")["Id"] == before and oci.version("r1") == "v1"
    # Nothing reached r2: its replica still runs, for the cleanup to remove.
    assert oci.version("r2") == "v1"


def test_cleanup_removes_what_the_forced_remove_left_and_a_second_run_changes_nothing(oci):
    alone = oci.inventory(["r2"])
    run = oci.playbook("oci_member_cleanup", inventory=alone, oci_members="r2")
    assert run.rc == 0, run.output[-4000:]
    print(f"\noci_member_cleanup: {run.seconds:.1f} s")
    assert run.hosts_touched == {"r2"} and run.changed["r2"] > 0 and "Nothing left on r2." in run.output
    assert_nothing_left(oci, "r2")
    again = oci.playbook("oci_member_cleanup", inventory=alone, oci_members="r2")
    assert again.rc == 0, again.output[-4000:]
    assert set(again.changed.values()) == {0} and "Nothing left on r2." in again.output, again.recap
    assert oci.version("r1") == "v1"


def test_the_teardown_check_names_everything_a_teardown_would_have_left(oci):
    """gpuaas.apps.teardown_check (one raw round trip) against a replica that still runs the workload: it fails
    naming each kind of leftover, and says nothing of what is gone."""
    playbook = oci.workdir / "teardown-check.yml"
    playbook.write_text(json.dumps([{"name": "Check", "hosts": "r1", "gather_facts": False, "tasks": [{
        "name": "Check", "ansible.builtin.include_role": {"name": "gpuaas.apps.teardown_check"}, "vars": {
            "teardown_check_units": ["gpuaas-oci-workload", "gpuaas-oci-gone"],
            "teardown_check_paths": ["/etc/gpuaas-oci/workload.env", "/etc/gpuaas-oci/gone.env"],
            "teardown_check_processes": ["conmon", "gpuaas-gone"],
            "teardown_check_containers": ["gpuaas-oci-workload", "gpuaas-oci-gone"],
            "teardown_check_images": [oci.refs["v1"], oci.refs["unsigned"]],
            "teardown_check_policy_scopes": [f"{oci.registry.address}/{REPO}", f"{oci.registry.address}/gone"]}}]}]))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(oci.inventory(["r1"])), str(playbook)], capture_output=True,
                          text=True, env=oci_env(), timeout=120, check=False)
    assert proc.returncode != 0
    found = re.search(r"Teardown left these behind on r1: ([^\"\n]*)", proc.stdout + proc.stderr)
    assert found, proc.stdout[-3000:]
    left = found.group(1).split("; ")
    assert [x.split(" (pid")[0] for x in left] == [
        "unit gpuaas-oci-workload is active/enabled", "path /etc/gpuaas-oci/workload.env", "process conmon",
        "container gpuaas-oci-workload", f"image {oci.refs['v1']}",
        f"policy scope {oci.registry.address}/{REPO} in /etc/containers/policy.json"], left


def test_decommission_leaves_nothing(oci):
    oci.replicas = ["r1"]
    run = oci.playbook("oci_decommission")
    assert run.rc == 0, run.output[-4000:]
    assert "Nothing left on r1." in run.output
    assert_nothing_left(oci, "r1")


def assert_nothing_left(oci, host: str) -> None:
    """Checked from outside, independently of the playbook's own teardown check."""
    assert oci.container(host) is None
    assert_no_workload_files(lambda command: oci.sh(host, command), oci.policy_before[host])


def test_unit_arguments_reach_the_program_exactly_as_given(oci):
    """systemd_quote() against systemd itself: a unit runs a program that prints the arguments it got."""
    spec = importlib.util.spec_from_file_location("oci_utils", ROOT / "plugins" / "module_utils" / "oci.py")
    oci_utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(oci_utils)
    systemd_quote = oci_utils.systemd_quote
    args = ["plain", "two words", 'say "hi"', "back\\slash", "100%", "$HOME", "${X}", "", "it's", "%n"]
    program = "import json, sys; print(json.dumps(sys.argv[1:]))"
    unit = ("[Service]\nType=oneshot\nExecStart=/usr/bin/python3 " + systemd_quote("-c") + " "
            + systemd_quote(program) + " " + " ".join(systemd_quote(a) for a in args) + "\n")
    oci.sh("r1", f"cat > /run/systemd/system/gpuaas-test-quote.service <<'EOF'\n{unit}EOF\n"
                 "systemctl daemon-reload && systemctl start gpuaas-test-quote")
    printed = oci.sh("r1", "journalctl -u gpuaas-test-quote -o cat --no-pager | grep '^\\['")
    assert json.loads(printed.splitlines()[-1]) == args, shlex.quote(unit)
