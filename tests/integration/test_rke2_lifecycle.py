"""The RKE2 playbooks and modules on real Debian 13 test hosts, against the RKE2 TEST DOUBLE (tests/rke2_double/).

No RKE2 binary reaches this machine, so the release the roles install is the double's, built here in RKE2's
air-gap layout and pinned by sha256 like a real one; it is served by a site mirror (a test host running an HTTP
server). Each server runs a real etcd member (Debian's etcd-server): joins, member removal and quorum are etcd's
own; the modules read it the way they read a real RKE2 server's, and kubectl is Debian's real one.

The tests run in order and share one cluster (three servers, agents a1, a2, a3 joining and leaving): refused
requests, deploy, a second deploy that changes nothing and restarts nothing, a wrong token refused, etcd membership
and the quorum refusal, a real quorum loss the health read-back reports as a control plane that does not answer,
then the membership changes (an agent added, a drain that waits for a PodDisruptionBudget while the workload moves,
resume, a server removal refused without quorum and then done, a server added back, a replacement, a dead agent
removed and its host cleaned when it returns), upgrade and rollback to the exact pinned release, and a decommission
that leaves nothing. Every membership change is checked for the hosts it touched and for restarts on the nodes it
left alone (none), and a second run of each playbook must change nothing.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
import uuid

import pytest
from gpuaas_api import testhosts

from .rke2_harness import LEFTOVERS, TOKEN, VERSION, release, start, workload
from .test_gpu_detection import HOLE_REPORT, NVIDIA_SMI_DOUBLE, REPORT_ON_HOST

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

SERVERS = ["s1", "s2", "s3"]
AGENTS = ["a1"]
SPARE = ["a2", "a3"]  # agents that join later


@pytest.fixture(scope="module")
def rke2(tmp_path_factory):
    cluster = start(f"rk{uuid.uuid4().hex[:6]}", tmp_path_factory.mktemp("rke2"), SERVERS, AGENTS, SPARE)
    try:
        yield cluster
    finally:
        cluster.stop()


def journals(rke2) -> str:
    """The double's own log on every node, for a failure's message."""
    return "\n".join(f"--- {h}\n" + rke2.sh(h, "journalctl -u rke2-server -u rke2-agent --no-pager | grep -v level | "
                                          "tail -8", check=False) for h in rke2.servers + rke2.agents)


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


# Membership changes, chained on the deployed cluster (three servers, agent a1): each run is checked for the hosts it
# touched, for restarts on the nodes it left alone (the goal is none), and a second run of it must change nothing.
WORKLOAD = workload(replicas=2, min_available=2)


def pids(rke2, hosts) -> dict[str, str]:
    """The main process of rke2-server or rke2-agent on each host: a restart changes it."""
    return {h: rke2.sh(h, "systemctl show -p MainPID --value rke2-server rke2-agent | grep -v '^0$' || true")
            for h in hosts}


def web_pods(rke2) -> dict[str, str]:
    """The workload's running pods: {pod: node}."""
    pods = json.loads(rke2.kubectl("s1", "get pods -n default -l app=web -o json"))["items"]
    return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods if p["status"].get("phase") == "Running"}


def wait_for(predicate, seconds: float = 60, message: str = ""):
    deadline = time.monotonic() + seconds
    while not (value := predicate()):
        assert time.monotonic() < deadline, message
        time.sleep(1)
    return value


def assert_idempotent(rke2, name: str, **extra_vars):
    again = rke2.playbook(name, **extra_vars)
    assert again.rc == 0, again.output[-3000:]
    assert set(again.changed.values()) == {0}, (name, again.changed)
    assert_no_secret(again)


def install_gpu_doubles(rke2, host: str, runtime: bool) -> None:
    """TEST DOUBLES for what needs a GPU (this machine has none): nvidia-smi printing a real H100 host's report of
    two GPUs, and, with `runtime`, an nvidia-container-runtime that RKE2's containerd would find."""
    container = rke2.hosts[host]["container"]
    subprocess.run(["podman", "exec", "-i", container, "sh", "-c", f"cat > {REPORT_ON_HOST}"], input=HOLE_REPORT,
                   text=True, check=True, timeout=60)
    rke2.sh(host, f"cat > /usr/local/bin/nvidia-smi <<'EOF'\n{NVIDIA_SMI_DOUBLE}EOF\n"
                  "chmod +x /usr/local/bin/nvidia-smi")
    if runtime:
        rke2.sh(host, "printf '#!/bin/sh\\n# TEST DOUBLE of the NVIDIA container runtime\\nexit 0\\n' "
                      "> /usr/local/bin/nvidia-container-runtime && chmod +x /usr/local/bin/nvidia-container-runtime")


def test_member_add_touches_only_the_new_agent_and_one_server(rke2):
    before = pids(rke2, [*SERVERS, "a1"])
    rke2.agents = ["a1", "a2"]
    rke2.inventory()
    # a2 has two GPUs but no NVIDIA container runtime: refused before anything is installed.
    install_gpu_doubles(rke2, "a2", runtime=False)
    refused = rke2.playbook("rke2_member_add", rke2_members="a2")
    assert refused.rc != 0
    assert "2 NVIDIA GPU(s) but no nvidia-container-runtime" in refused.output, refused.output[-3000:]
    assert all(c["changed"] == 0 for c in refused.recap.values()), refused.recap
    assert rke2.sh("a2", "test -e /usr/local/bin/rke2 && echo yes || echo no") == "no"
    install_gpu_doubles(rke2, "a2", runtime=True)
    run = rke2.playbook("rke2_member_add", rke2_members="a2")
    assert run.rc == 0, run.output[-4000:] + journals(rke2)
    assert_no_secret(run)
    assert run.hosts_touched == {"s1", "a2"}, run.recap
    assert pids(rke2, before) == before, "a member add restarted RKE2 on a node it did not add"
    states = rke2.module("s1", "rke2_info", members=[*SERVERS, "a1", "a2"])
    assert set(states["member_states"].values()) == {"active"}, states["member_details"]
    # The GPU agent is labelled, and its containerd runs pods with the NVIDIA runtime.
    labels = json.loads(rke2.kubectl("s1", "get node a2 -o json"))["metadata"]["labels"]
    assert labels.get("nvidia.com/gpu.present") == "true" and labels.get("gpuaas.apps/gpu-count") == "2", labels
    assert "default-runtime: nvidia" in rke2.sh("a2", "cat /etc/rancher/rke2/config.yaml")
    assert_idempotent(rke2, "rke2_member_add", rke2_members="a2")


def test_drain_waits_for_a_pdb_then_the_workload_moves(rke2):
    rke2.sh("s1", "/var/lib/rancher/rke2/bin/kubectl --kubeconfig /etc/rancher/rke2/rke2.yaml apply --validate=false "
                  f"-f - <<'EOF'\n{WORKLOAD}EOF")
    placed = wait_for(lambda: len(web_pods(rke2)) == 2 and web_pods(rke2), message="the workload never ran")
    node = sorted(placed.values())[0]
    # The budget allows no disruption: the drain waits, says so, and fails at its timeout naming the budget.
    blocked = rke2.playbook("rke2_member_drain", rke2_members=node, rke2_drain_timeout=12,
                            rke2_drain_progress_interval=4)
    assert blocked.rc != 0, blocked.output[-3000:]
    assert "still draining" in blocked.output and "web" in blocked.output, blocked.output[-3000:]
    # The budget relaxed, the drain proceeds: the pod moves to another node.
    rke2.kubectl("s1", "patch pdb web -n default --type merge -p '{\"spec\":{\"minAvailable\":1}}'")
    run = rke2.playbook("rke2_member_drain", rke2_members=node, rke2_drain_timeout=60)
    assert run.rc == 0, run.output[-3000:]
    assert run.hosts_touched == {"s1"}, run.recap
    moved = wait_for(lambda: len(web_pods(rke2)) == 2 and web_pods(rke2), message="the evicted pod was not replaced")
    assert node not in moved.values(), moved
    assert_idempotent(rke2, "rke2_member_drain", rke2_members=node)
    states = rke2.module("s1", "rke2_info", members=[node])
    assert states["member_states"] == {node: "drained"}, states
    run = rke2.playbook("rke2_member_resume", rke2_members=node)
    assert run.rc == 0, run.output[-3000:]
    assert rke2.module("s1", "rke2_info", members=[node])["member_states"] == {node: "active"}
    assert_idempotent(rke2, "rke2_member_resume", rke2_members=node)


def test_server_removal_keeps_quorum(rke2):
    # s2 down: removing s3 would leave s1 and s2, one healthy of two: refused before anything changes.
    rke2.sh("s2", "systemctl stop rke2-server")
    try:
        refused = rke2.playbook("rke2_member_remove", rke2_members="s3")
        assert refused.rc != 0
        assert ("would lose quorum: 1 of the 2 remaining voting members are healthy, and 2 members need 2"
                in " ".join(refused.output.split())), refused.output[-3000:]
        assert all(c["changed"] == 0 for c in refused.recap.values()), refused.recap
    finally:
        rke2.sh("s2", "systemctl start rke2-server")
    wait_for(lambda: rke2.module("s1", "rke2_info", check=False, members=SERVERS).get("member_states")
             == {h: "active" for h in SERVERS}, message="s2 did not come back")
    before = pids(rke2, ["s1", "s2", "a1", "a2"])
    run = rke2.playbook("rke2_member_remove", rke2_members="s3")
    assert run.rc == 0, run.output[-4000:] + journals(rke2)
    assert_no_secret(run)
    assert run.hosts_touched == {"s1", "s3"}, run.recap
    assert pids(rke2, before) == before, "a server removal restarted RKE2 on a node that stayed"
    etcd = rke2.module("s1", "rke2_etcd_member")
    assert sorted(m["node"] for m in etcd["members"]) == ["s1", "s2"], etcd["members"]
    nodes = json.loads(rke2.kubectl("s1", "get nodes -o json"))["items"]
    assert "s3" not in {n["metadata"]["name"] for n in nodes}
    assert rke2.sh("s3", f"ls -d {' '.join(LEFTOVERS)} 2>/dev/null; pgrep -x etcd; pgrep -x rke2; true") == ""
    assert_idempotent(rke2, "rke2_member_remove", rke2_members="s3")
    # s3 comes back as a new server: a fresh etcd member joins through s1.
    run = rke2.playbook("rke2_member_add", rke2_members="s3")
    assert run.rc == 0, run.output[-4000:] + journals(rke2)
    assert run.hosts_touched == {"s1", "s3"}, run.recap
    assert pids(rke2, before) == before
    assert sorted(m["node"] for m in rke2.module("s1", "rke2_etcd_member")["members"]) == SERVERS


def test_replace_joins_the_new_agent_before_the_old_leaves(rke2):
    rke2.agents = ["a1", "a2", "a3"]
    rke2.inventory()
    before = pids(rke2, [*SERVERS, "a2"])
    run = rke2.playbook("rke2_member_replace", rke2_member_old="a1", rke2_member_new="a3")
    assert run.rc == 0, run.output[-4000:] + journals(rke2)
    assert_no_secret(run)
    assert run.hosts_touched == {"s1", "a1", "a3"}, run.recap
    assert pids(rke2, before) == before, "a replacement restarted RKE2 on a node it did not replace"
    joined, left = run.output.index("PLAY [Join the agents]"), run.output.index("PLAY [Check etcd quorum")
    assert joined < left, "the old node left before the new one joined"
    names = {n["metadata"]["name"] for n in json.loads(rke2.kubectl("s1", "get nodes -o json"))["items"]}
    assert names == {*SERVERS, "a2", "a3"}, names
    assert len(wait_for(lambda: len(web_pods(rke2)) == 2 and web_pods(rke2))) == 2
    assert_idempotent(rke2, "rke2_member_replace", rke2_member_old="a1", rke2_member_new="a3")
    rke2.agents = ["a2", "a3"]
    rke2.inventory()


def test_a_dead_agent_is_removed_and_its_host_cleaned_when_it_returns(rke2):
    subprocess.run(["podman", "stop", "-t", "0", rke2.hosts["a2"]["container"]], check=True, capture_output=True)
    run = rke2.playbook("rke2_member_remove", rke2_members="a2", rke2_members_unreachable="a2")
    assert run.rc == 0, run.output[-4000:]
    assert run.hosts_touched == {"s1"}, run.recap
    names = {n["metadata"]["name"] for n in json.loads(rke2.kubectl("s1", "get nodes -o json"))["items"]}
    assert "a2" not in names
    # The host answers again, and its agent registers its node again as it starts. The cleanup, with the live
    # members in its inventory as the platform runs it, removes RKE2 from the host and deletes that node again.
    testhosts.start_again(rke2.hosts["a2"])
    wait_for(lambda: "a2" in rke2.kubectl("s1", "get nodes -o name"), message="a2 did not register again")
    rke2.agents = ["a3", "a2"]
    try:
        clean = rke2.playbook("rke2_member_cleanup", rke2_members="a2")
    finally:
        rke2.agents = ["a3"]
        rke2.inventory()
    assert clean.rc == 0, clean.output[-3000:]
    assert clean.hosts_touched == {"s1", "a2"}, clean.recap
    assert rke2.sh("a2", f"ls -d {' '.join(LEFTOVERS)} 2>/dev/null; pgrep -x rke2; true") == ""
    assert "a2" not in rke2.kubectl("s1", "get nodes -o name")


def test_a_dead_server_is_replaced(rke2):
    # s3's host dies. The platform leaves a failed member out of the inventory: a roll is refused while etcd still
    # counts s3's member, before anything changes.
    subprocess.run(["podman", "stop", "-t", "0", rke2.hosts["s3"]["container"]], check=True, capture_output=True)
    rke2.servers = ["s1", "s2"]
    rke2.inventory()
    refused = rke2.playbook("rke2_upgrade")
    assert refused.rc != 0
    assert "Refusing to roll: etcd member s3-" in refused.output and "is not healthy" in refused.output, \
        refused.output[-3000:]
    assert all(c["changed"] == 0 for c in refused.recap.values()), refused.recap
    # a1's host (clean since its replacement) takes s3's place as a server. etcd would refuse the new member beside
    # the dead one: the dead member goes first, then the new server joins, then s3's node is deleted.
    rke2.servers = ["s1", "s2", "s3", "a1"]
    rke2.inventory()
    run = rke2.playbook("rke2_member_replace", rke2_member_old="s3", rke2_member_new="a1",
                        rke2_members_unreachable="s3")
    assert run.rc == 0, run.output[-4000:] + journals(rke2)
    assert run.hosts_touched == {"s1", "a1"}, run.recap
    etcd = rke2.module("s1", "rke2_etcd_member")
    assert sorted(m["node"] for m in etcd["members"]) == ["a1", "s1", "s2"], etcd["members"]
    assert etcd["quorum"]["healthy"] == 3, etcd["quorum"]
    assert "s3" not in rke2.kubectl("s1", "get nodes -o name")
    # s3 comes back: its server cannot rejoin (etcd removed its member); the cleanup removes what is left.
    testhosts.start_again(rke2.hosts["s3"])
    rke2.servers = ["s1", "s2", "a1", "s3"]
    try:
        clean = rke2.playbook("rke2_member_cleanup", rke2_members="s3")
    finally:
        rke2.servers = ["s1", "s2", "a1"]
        rke2.inventory()
    assert clean.rc == 0, clean.output[-3000:]
    assert rke2.sh("s3", f"ls -d {' '.join(LEFTOVERS)} 2>/dev/null; pgrep -x etcd; pgrep -x rke2; true") == ""
    assert "s3" not in rke2.kubectl("s1", "get nodes -o name")


def test_upgrade_and_rollback_to_the_pinned_release(rke2):
    nodes = rke2.servers + rke2.agents
    for version, playbook in ((release.VERSIONS[1], "rke2_upgrade"), (release.VERSIONS[0], "rke2_rollback")):
        if version not in rke2.pins:
            rke2.publish(version)
        rke2.version = version  # the target version's pin, as the platform hands it to the run
        run = rke2.playbook(playbook)
        assert run.rc == 0, run.output[-4000:] + journals(rke2)
        assert_no_secret(run)
        kubelets = {n["metadata"]["name"]: n["status"]["nodeInfo"]["kubeletVersion"]
                    for n in json.loads(rke2.kubectl("s1", "get nodes -o json"))["items"]}
        assert kubelets == {h: version for h in nodes}, kubelets
        for host in nodes:
            assert rke2.sh(host, "/usr/local/bin/rke2 --version").startswith(f"rke2 version {version}")
        states = rke2.module("s1", "rke2_info", members=nodes)
        assert set(states["member_states"].values()) == {"active"}, states["member_details"]
        assert len(wait_for(lambda: len(web_pods(rke2)) == 2 and web_pods(rke2))) == 2
        assert_idempotent(rke2, playbook)


def test_decommission_leaves_nothing(rke2):
    run = rke2.playbook("rke2_decommission")
    assert run.rc == 0, run.output[-3000:]
    assert "Nothing left on s1" in run.output
    for host in rke2.servers + rke2.agents:
        assert rke2.sh(host, f"ls -d {' '.join(LEFTOVERS)} 2>/dev/null; pgrep -x etcd; pgrep -x rke2; true") == ""
    again = rke2.playbook("rke2_decommission")
    assert again.rc == 0, again.output[-3000:]
    assert set(again.changed.values()) == {0}, again.changed
