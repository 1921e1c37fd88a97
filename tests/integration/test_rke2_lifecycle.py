"""The RKE2 playbooks and modules on real Debian 13 test hosts, against the RKE2 TEST DOUBLE (tests/rke2_double/).

No RKE2 binary reaches this machine, so the release the roles install is the double's, built here in RKE2's
air-gap layout and pinned by sha256 like a real one; it is served by a site mirror (a test host running an HTTP
server). Each server runs a real etcd member (Debian's etcd-server): joins, member removal and quorum are etcd's
own; the modules read it the way they read a real RKE2 server's, and kubectl is Debian's real one.

The tests run in order and share one cluster (three servers, one agent): refused requests, deploy, a second deploy
that changes nothing, a wrong token refused, etcd membership and the quorum refusal, a real quorum loss the health
read-back reports as a control plane that does not answer, and a decommission that leaves nothing.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from gpuaas_api import testhosts

from .slurm_harness import ANSIBLE, Cluster, ansible_env

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from rke2_double import release  # noqa: E402 - the test double's release builder, beside the tests

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

SERVERS = ["s1", "s2", "s3"]
AGENTS = ["a1"]
VERSION = release.VERSIONS[0]
# A per-test-run token, as the platform generates one per instance: it must never show in any output.
TOKEN = uuid.uuid4().hex + uuid.uuid4().hex
MIRROR_PORT = 8080
LEFTOVERS = ["/etc/rancher", "/var/lib/rancher/rke2", "/usr/local/bin/rke2", "/usr/local/bin/rke2-uninstall.sh",
             "/usr/local/lib/systemd/system/rke2-server.service", "/usr/local/lib/systemd/system/rke2-agent.service"]


class Rke2Cluster(Cluster):
    """Test hosts of the rke2 flavour plus a mirror host serving the double's release."""

    servers: list[str]
    agents: list[str]
    pins: dict[str, str]

    def inventory(self, name: str = "rke2.ini", **overrides) -> Path:
        variables = {"rke2_token": TOKEN, "rke2_version": VERSION, "rke2_artifact_url": self.mirror_url,
                     "rke2_sha256sum_sha256": self.pins[release.SHA256SUM], **overrides}
        variables = {k: v for k, v in variables.items() if v is not None}

        def line(host: str) -> str:
            return f"{host} ansible_host={self.hosts[host]['address']}"

        key = next(iter(self.hosts.values()))["ssh_private_key_file"]
        lines = ["[rke2_servers]", *map(line, self.servers), "", "[rke2_agents]", *map(line, self.agents), "",
                 "[all:vars]", "ansible_user=root", f"ansible_ssh_private_key_file={key}",
                 "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'",
                 "ansible_python_interpreter=/usr/bin/python3"]
        path = self.workdir / name
        path.write_text("\n".join(lines) + "\n")
        (self.workdir / "group_vars").mkdir(exist_ok=True)
        (self.workdir / "group_vars" / "all.yml").write_text(json.dumps(variables))
        return path

    @property
    def mirror_url(self) -> str:
        return f"http://{self.hosts['mirror']['address']}:{MIRROR_PORT}/rke2/{VERSION.replace('+', '-')}"

    def module(self, host: str, module_name: str, /, check: bool = True, check_mode: bool = False, **args) -> dict:
        """Runs module gpuaas.apps.<name> ad hoc on one host (--check with check_mode); returns its result."""
        cmd = [ANSIBLE, "-i", str(self.inventory()), host, "-m", f"gpuaas.apps.{module_name}",
               *(["-a", json.dumps(args)] if args else []), *(["--check"] if check_mode else [])]
        env = dict(ansible_env(), ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
        result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"][host]
        if check and (proc.returncode != 0 or result.get("failed")):
            raise AssertionError(f"{module_name} on {host} failed ({proc.returncode}): {result}")
        return result

    def kubectl(self, host: str, args: str) -> str:
        return self.sh(host, f"/var/lib/rancher/rke2/bin/kubectl --kubeconfig /etc/rancher/rke2/rke2.yaml {args}")


@pytest.fixture(scope="module")
def rke2(tmp_path_factory):
    prefix = f"rk{uuid.uuid4().hex[:6]}"
    workdir = tmp_path_factory.mktemp("rke2")
    started = testhosts.up(prefix, [*SERVERS, *AGENTS, "mirror"], "rke2")
    cluster = Rke2Cluster(prefix, workdir, {h["name"]: h for h in started})
    cluster.servers, cluster.agents = list(SERVERS), list(AGENTS)
    try:
        artifacts = workdir / "release"
        cluster.pins = release.build(artifacts, VERSION)
        directory = f"/srv/mirror/rke2/{VERSION.replace('+', '-')}"
        cluster.sh("mirror", f"mkdir -p {directory}")
        for name in cluster.pins:
            subprocess.run(["podman", "cp", str(artifacts / name), f"{started[-1]['container']}:{directory}/"],
                           check=True, capture_output=True)
        subprocess.run(["podman", "exec", "-d", started[-1]["container"], "python3", "-m", "http.server",
                        str(MIRROR_PORT), "--directory", "/srv/mirror"], check=True, capture_output=True)
        cluster.sh("mirror", f"for i in $(seq 50); do python3 -c 'import urllib.request as u; "
                   f"u.urlopen(\"http://127.0.0.1:{MIRROR_PORT}/\")' 2>/dev/null && exit 0; sleep 0.1; done; exit 1")
        yield cluster
    finally:
        cluster.stop()


def journals(rke2) -> str:
    """The double's own log on every node, for a failure's message."""
    return "\n".join(f"--- {h}\n" + rke2.sh(h, "journalctl -u rke2-server -u rke2-agent --no-pager | grep -v level | "
                                          "tail -8", check=False) for h in [*SERVERS, *AGENTS])


def assert_no_secret(run):
    assert TOKEN not in run.output, "the cluster token appeared in the playbook's output"


def test_refused_before_anything_changes(rke2):
    # No token: refused on the control node, no host contacted.
    run = rke2.playbook("rke2_deploy", inventory=rke2.inventory(name="notoken.ini", rke2_token=None))
    assert run.rc != 0
    assert "rke2_token must be the instance secret the platform generates" in run.output, run.output[-2000:]
    assert run.hosts_touched == set(), run.recap
    # A sha256sum file that is not the pinned one: refused before anything is installed.
    run = rke2.playbook("rke2_deploy", inventory=rke2.inventory(name="badpin.ini", rke2_sha256sum_sha256="0" * 64))
    assert run.rc != 0
    assert "is not the pinned release of rke2" in run.output, run.output[-2000:]
    assert all(c["changed"] == 0 for c in run.recap.values()), run.recap
    assert rke2.sh("s1", "test -e /usr/local/bin/rke2 && echo yes || echo no") == "no"
    rke2.inventory()  # back to the good variables


def test_deploy(rke2):
    run = rke2.playbook("rke2_deploy")
    assert run.rc == 0, run.output[-4000:] + journals(rke2)
    assert_no_secret(run)
    assert run.hosts_touched == {*SERVERS, *AGENTS}
    states = rke2.module("s1", "rke2_info", members=[*SERVERS, *AGENTS])
    assert states["member_states"] == {h: "active" for h in [*SERVERS, *AGENTS]}, states["member_details"]
    assert states["etcd"]["quorum"] == {"voters": 3, "healthy": 3, "needed": 2, "has_quorum": True, "can_lose": 1}
    assert sorted(m["node"] for m in states["etcd"]["members"]) == SERVERS
    # What RKE2 keeps on a node: the pinned binary, config.yaml readable by root alone, the token and kubeconfig.
    assert rke2.sh("a1", "/usr/local/bin/rke2 --version").startswith(f"rke2 version {VERSION}")
    assert rke2.sh("s2", "stat -c %a /etc/rancher/rke2/config.yaml") == "600"
    assert rke2.sh("s2", "cat /var/lib/rancher/rke2/server/node-token").endswith(f"::server:{TOKEN}")
    assert rke2.sh("a1", "test -e /var/lib/rancher/rke2/agent/images/rke2-images.linux-amd64.tar.gz && echo y") == "y"
    nodes = json.loads(rke2.kubectl("s3", "get nodes -o json"))
    assert sorted(n["metadata"]["name"] for n in nodes["items"]) == sorted([*SERVERS, *AGENTS])


def test_second_deploy_changes_nothing(rke2):
    pids = {h: rke2.sh(h, "systemctl show -p MainPID --value rke2-server rke2-agent") for h in [*SERVERS, *AGENTS]}
    run = rke2.playbook("rke2_deploy")
    assert run.rc == 0, run.output[-3000:]
    assert set(run.changed.values()) == {0}, run.changed
    assert {h: rke2.sh(h, "systemctl show -p MainPID --value rke2-server rke2-agent") for h in pids} == pids


def test_a_wrong_token_is_refused(rke2):
    probe = ("import json, ssl, urllib.request as u, urllib.error as e\n"
             "c = ssl.create_default_context(); c.check_hostname = False; c.verify_mode = ssl.CERT_NONE\n"
             "r = u.Request('https://s1:9345/v1-rke2/heartbeat', data=json.dumps({'token': 'wrong', 'node': 'x', "
             "'password': 'p', 'config': {}}).encode())\n"
             "try: u.urlopen(r, context=c); print('accepted')\n"
             "except e.HTTPError as err: print(err.code)\n")
    assert rke2.sh("a1", f"python3 -c {shlex.quote(probe)}") == "401"


def test_etcd_membership_and_quorum_refusal(rke2):
    # Check mode: the removal is planned, nothing changes.
    planned = rke2.module("s1", "rke2_etcd_member", name="s3", state="absent", check_mode=True)
    assert planned["changed"] and planned["member"]["node"] == "s3"
    assert len(rke2.module("s1", "rke2_etcd_member")["members"]) == 3
    # s3's server stops: its member is unhealthy, and removing s2 would leave one healthy member of two.
    rke2.sh("s3", "systemctl stop rke2-server")
    try:
        refused = rke2.module("s1", "rke2_etcd_member", check=False, name="s2", state="absent")
        assert refused.get("failed"), refused
        assert "would lose quorum: 1 of the 2 remaining voting members are healthy" in refused["msg"], refused["msg"]
        assert len(rke2.module("s1", "rke2_etcd_member")["members"]) == 3
        health = rke2.module("s1", "rke2_info", members=SERVERS)
        assert health["member_states"]["s3"] == "failed"
        assert health["member_details"]["s3"]["reason"].startswith("etcd member s3-"), health["member_details"]
        assert health["member_states"]["s1"] == health["member_states"]["s2"] == "active"
        assert rke2.module("s3", "rke2_info", view="self", node="s3")["member_states"] == {"s3": "failed"}
        # s2 stops too: etcd has lost quorum, so the API cannot answer; the read-back fails with one line.
        rke2.sh("s2", "systemctl stop rke2-server")
        lost = rke2.module("s1", "rke2_info", check=False, members=SERVERS)
        assert lost.get("failed") and lost["msg"].startswith("the RKE2 control plane does not answer"), lost
    finally:
        rke2.sh("s2", "systemctl start --no-block rke2-server")
        rke2.sh("s3", "systemctl start rke2-server")
    deadline = time.monotonic() + 60
    while True:
        back = rke2.module("s1", "rke2_info", check=False, members=SERVERS)
        if back.get("member_states") == {h: "active" for h in SERVERS} or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert back.get("member_states") == {h: "active" for h in SERVERS}, back


def test_decommission_leaves_nothing(rke2):
    run = rke2.playbook("rke2_decommission")
    assert run.rc == 0, run.output[-3000:]
    assert "Nothing left on s1" in run.output
    for host in [*SERVERS, *AGENTS]:
        assert rke2.sh(host, f"ls -d {' '.join(LEFTOVERS)} 2>/dev/null; pgrep -x etcd; pgrep -x rke2; true") == ""
    again = rke2.playbook("rke2_decommission")
    assert again.rc == 0, again.output[-3000:]
    assert set(again.changed.values()) == {0}, again.changed
