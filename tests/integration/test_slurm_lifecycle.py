"""The Slurm lifecycle playbooks on a real multi-host cluster: podman hosts with systemd, reached over SSH.

The tests run in order and share one cluster: deploy, reconfigure, pinned package versions, add, drain,
resume, remove (and a converge that refuses to bring the removed worker back), replace, decommission.
Each checks real Slurm state, which hosts the run touched and which daemons it restarted.

Every step runs on Debian 12 (Slurm 22.05) unless it names its releases. The steps marked BOTH run again, in the
same order, on a second cluster of Debian 13 hosts (Slurm 24.11, whose nodes and jobs the modules read as JSON):
the steps whose outcome depends on the release (packages, units, slurm.conf, the modules' reads). The others check
the playbooks' own logic, which is the same on both, and run once.
"""

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from .slurm_harness import restarted

pytestmark = [pytest.mark.hosts, pytest.mark.slow]
BOTH = pytest.mark.releases("debian12", "debian13")


def pytest_generate_tests(metafunc):
    marker = metafunc.definition.get_closest_marker("releases")
    metafunc.parametrize("cluster", list(marker.args) if marker else ["debian12"], indirect=True, scope="module")


# slurmd keeps the configuration slurmctld last sent it here (configless).
CONF_CACHE = "/var/lib/slurm/slurmd/conf-cache/slurm.conf"


def assert_unchanged_second_run(cluster, name, **extra):
    again = cluster.playbook(name, **extra)
    assert again.rc == 0, again.output[-3000:]
    assert set(again.changed.values()) == {0}, f"second {name} run changed something: {again.changed}"


def test_bad_inventory_fails_before_anything_changes(cluster):
    cases = [
        (
            cluster.inventory(controllers=[], workers=["w1"], name="none.ini"),
            "exactly one host in group slurm_controller; it has 0",
        ),
        (
            cluster.inventory(controllers=["ctl", "w2"], workers=["w1"], name="two.ini"),
            "exactly one host in group slurm_controller; it has 2: ctl, w2",
        ),
        (
            cluster.inventory(workers=["w1", "w2"], host_overrides={"w2": {"slurm_worker_name": "w1"}}, name="dup.ini"),
            "Workers would share a Slurm node name: w1 (w1, w2)",
        ),
        # A closed port on one of our own hosts: unreachable without sending traffic anywhere else.
        (
            cluster.inventory(workers=["w1", "w2"], host_overrides={"w2": {"ansible_port": 2}}, name="unreach.ini"),
            "UNREACHABLE",
        ),
    ]
    for inventory, message in cases:
        run = cluster.playbook("slurm_deploy", inventory=inventory)
        assert run.rc != 0, f"{inventory.name}: deploy should have failed"
        assert message in run.output, f"{inventory.name}: expected {message!r} in:\n{run.output[-2000:]}"
        assert all(c["changed"] == 0 for c in run.recap.values()), f"{inventory.name} changed hosts: {run.recap}"

    cluster.extra_groups = {"slurm_removing": ["w2"]}
    run = cluster.playbook(
        "slurm_member_add", inventory=cluster.inventory(workers=["w1", "w2"], name="rm.ini"), slurm_members="w2"
    )
    cluster.extra_groups = {}
    assert run.rc != 0
    assert "lists as being removed (group slurm_removing): w2" in run.output

    # The hosts run Debian 12; a supported list without it stands in for an unsupported distribution.
    run = cluster.playbook("slurm_deploy", inventory=cluster.inventory(workers=["w1"], name="os.ini"),
                           slurm_supported_distributions=["Debian 13"])
    assert run.rc != 0
    flat = " ".join(run.output.split())
    assert "ctl runs Debian 12" in flat and "they support Debian 13" in flat, run.output[-2000:]
    assert "PLAY [Set up MUNGE]" not in run.output
    assert all(c["changed"] == 0 for c in run.recap.values()), f"the refused deploy changed hosts: {run.recap}"

    # Partition options slurm.conf would misread: a misspelt keyword, a value that would end its field early.
    partitions = [{"name": "main", "Oversubscribe": "NO"}, {"name": "b", "OverSubscribe": "NO SlurmUser=nobody"},
                  {"name": "c", "AllowAccounts": "a\n"}]
    run = cluster.playbook("slurm_deploy", inventory=cluster.inventory(workers=["w1"], name="opts.ini"),
                           slurm_controller_partitions=partitions)
    assert run.rc != 0
    flat = " ".join(run.output.split())
    assert ("slurm_controller_partitions has options slurm.conf would not read as given: main: Oversubscribe is not a "
            "partition keyword; b: OverSubscribe must be one word") in flat, run.output[-2000:]
    assert "c: AllowAccounts must be one word" in flat, run.output[-2000:]
    assert all(c["changed"] == 0 for c in run.recap.values()), f"the refused deploy changed hosts: {run.recap}"

    for host in ("ctl", "w1", "w2"):
        assert cluster.sh(host, "ls /etc/slurm/slurm.conf /etc/munge/munge.key 2>/dev/null || true") == ""


@pytest.mark.releases("debian13")
def test_accounting_is_refused_where_slurmdbd_cannot_start(cluster):
    """Debian 13's slurmdbd 24.11.5 does not start against its MariaDB 11.8: a deploy with accounting is refused
    before any host changes, naming the controller and what to do."""
    cluster.workers = ["w1"]
    run = cluster.playbook("slurm_deploy", slurm_controller_accounting_enabled=True)
    assert run.rc != 0
    flat = " ".join(run.output.split())
    assert "ctl runs Debian 13" in flat, flat[-2000:]
    assert "Run the controller on Debian 12, or turn accounting off." in flat, flat[-2000:]
    assert all(c["changed"] == 0 for c in run.recap.values()), f"the refused deploy changed hosts: {run.recap}"
    assert cluster.sh("ctl", "ls /etc/slurm/slurm.conf /etc/munge/munge.key 2>/dev/null || true") == ""


@BOTH
def test_deploy_one_controller_two_workers(cluster):
    cluster.workers = ["w1", "w2"]
    run = cluster.playbook("slurm_deploy")
    assert run.rc == 0, run.output[-4000:]
    print(f"\nslurm_deploy (1 controller + 2 workers): {run.seconds:.1f} s")

    assert cluster.node_states() == {"w1": "idle", "w2": "idle"}
    hostnames = cluster.sh("ctl", "srun --immediate=30 -N2 hostname").split()
    assert sorted(hostnames) == ["w1", "w2"]

    job = cluster.sh(
        "ctl", "cd /tmp && sbatch --parsable -N1 --output=/tmp/job-%j.out --wrap 'echo done-$SLURM_JOB_ID'"
    )
    deadline = time.monotonic() + 60
    while cluster.sh("ctl", f"squeue --noheader --jobs={job}", check=False) and time.monotonic() < deadline:
        time.sleep(0.5)
    node = cluster.sh("ctl", f"scontrol show job {job} | grep -o ' NodeList=[^ ]*' | cut -d= -f2")
    assert cluster.sh("ctl", f"scontrol show job {job} | grep -o 'JobState=[A-Z]*'") == "JobState=COMPLETED"
    assert cluster.sh(node, f"cat /tmp/job-{job}.out") == f"done-{job}"


@BOTH
def test_deploy_again_changes_nothing(cluster):
    assert_unchanged_second_run(cluster, "slurm_deploy")


def test_a_short_munge_key_is_refused_with_its_reason_before_any_host_changes(cluster):
    keys = {h: cluster.sh(h, "sha256sum /etc/munge/munge.key") for h in ("ctl", "w1", "w2")}
    run = cluster.playbook("slurm_deploy", munge_key="too-short-a-key")
    assert run.rc != 0 and "munge_key must be at least 32 characters long." in run.output, run.output[-4000:]
    assert "too-short-a-key" not in run.output
    assert not any(run.changed.values()), run.recap
    assert {h: cluster.sh(h, "sha256sum /etc/munge/munge.key") for h in keys} == keys


@BOTH
def test_reconfigure_changes_config_without_restarting_any_slurmd(cluster):
    assert_unchanged_second_run(cluster, "slurm_reconfigure")
    before = cluster.daemon_runs()
    # Free-form partition options, as slurm.conf spells them.
    debug = {"name": "debug", "max_time": "30:00", "OverSubscribe": "FORCE:2", "PriorityTier": 2,
             "DefaultTime": "10:00"}
    run = cluster.playbook("slurm_reconfigure", slurm_controller_partitions=[{"name": "main", "default": True}, debug])
    assert run.rc == 0, run.output[-4000:]
    assert "debug" in cluster.sh("ctl", "sinfo --noheader --format=%P").split()
    shown = cluster.sh("ctl", "scontrol show -o partition debug").split()
    assert {"OverSubscribe=FORCE:2", "PriorityTier=2", "DefaultTime=00:10:00", "MaxTime=00:30:00"} <= set(shown), shown
    assert sorted(cluster.sh("ctl", "srun --immediate=30 -p debug -N2 hostname").split()) == ["w1", "w2"]
    # Configuration reaches the workers through slurmctld (configless): no daemon restarts.
    assert restarted(before, cluster.daemon_runs()) == set()
    for worker in ("w1", "w2"):
        assert "PartitionName=debug" in cluster.sh(worker, f"cat {CONF_CACHE}"), worker


def test_a_new_munge_key_and_a_config_change_reach_every_host_in_one_run(cluster):
    """The workers keep munged in their slurmd run, after the controller's play: the controller's reconfigure
    cannot reach a slurmd whose munged still has the old key, so slurmd restarts with the new key and fetches
    its configuration as it starts."""
    before = cluster.daemon_runs()
    new_key = "rotated-" + "k" * 56
    run = cluster.playbook("slurm_reconfigure", munge_key=new_key)  # the debug partition goes, too
    assert run.rc == 0, run.output[-4000:]
    assert new_key not in run.output
    keys = {h: cluster.sh(h, "sha256sum < /etc/munge/munge.key") for h in ("ctl", "w1", "w2")}
    assert len(set(keys.values())) == 1, keys
    assert "debug" not in cluster.sh("ctl", "sinfo --noheader --format=%P").split()
    for worker in ("w1", "w2"):
        assert "PartitionName=debug" not in cluster.sh(worker, f"cat {CONF_CACHE}"), worker
    assert sorted(cluster.sh("ctl", "srun --immediate=30 -N2 hostname").split()) == ["w1", "w2"]
    assert restarted(before, cluster.daemon_runs()) == {
        ("ctl", "munge"), ("w1", "munge"), ("w2", "munge"), ("w1", "slurmd"), ("w2", "slurmd")}


# Each group is built from one source package: its members need each other's exact version.
PINNED_GROUPS = [
    ["munge", "libmunge2"],
    ["slurm-wlm-basic-plugins", "slurm-client", "slurmctld", "slurmd", "slurmdbd", "slurm-wlm-mysql-plugin"],
]
LOCAL_REPO_LINE = "deb [trusted=yes] file:/srv/gpuaas-repo ./"


def test_pinned_versions_upgrade_and_roll_back_exactly(cluster):
    hosts = ["ctl", *cluster.workers]
    # Two versions of every package, built on each host from what it has: no mirror is needed.
    with ThreadPoolExecutor(len(hosts)) as pool:
        installed = list(pool.map(
            lambda h: cluster.local_repo(h, "/srv/gpuaas-repo", ["gpuaas1", "gpuaas2"], PINNED_GROUPS), hosts))[0]
    packages = [p for group in PINNED_GROUPS for p in group]

    def pins(suffix):
        return {
            "slurm_package_version": f"{installed['slurmctld']}+{suffix}",
            "munge_package_version": f"{installed['munge']}+{suffix}",
            "gpuaas_apt_repositories": [LOCAL_REPO_LINE],
        }

    # An upgrade to the newer build, then a rollback to the older one: a real downgrade.
    for suffix in ("gpuaas2", "gpuaas1"):
        before = cluster.daemon_runs()
        run = cluster.playbook("slurm_reconfigure", **pins(suffix))
        assert run.rc == 0, run.output[-4000:]
        after = cluster.daemon_runs()
        print(f"\nslurm_reconfigure to the +{suffix} pins: {run.seconds:.1f} s; "
              f"daemons restarted: {sorted(restarted(before, after))}")
        for host in hosts:
            assert cluster.package_versions(host, packages) == {p: f"{installed[p]}+{suffix}" for p in packages}, host
        expected = {("ctl", "slurmctld"), ("ctl", "munge")} | {
            (w, d) for w in cluster.workers for d in ("slurmd", "munge")}
        assert restarted(before, after) == expected
        # Slurm's upgrade order: the controller's daemon is back before any slurmd restarts.
        slurmctld_up = cluster.started_at("ctl", "slurmctld")
        assert all(cluster.started_at(w, "slurmd") > slurmctld_up for w in cluster.workers)
        assert sorted(cluster.sh("ctl", "srun --immediate=30 -N2 hostname").split()) == sorted(cluster.workers)
        assert_unchanged_second_run(cluster, "slurm_reconfigure", **pins(suffix))

    # Without pins the hosts keep what they have, and the site's repository list is gone.
    before = cluster.daemon_runs()
    run = cluster.playbook("slurm_reconfigure")
    assert run.rc == 0, run.output[-4000:]
    assert restarted(before, cluster.daemon_runs()) == set()
    for host in hosts:
        assert cluster.package_versions(host, packages) == {p: f"{installed[p]}+gpuaas1" for p in packages}, host
        assert cluster.sh(host, "ls /etc/apt/sources.list.d/gpuaas.list 2>/dev/null || true") == ""


@BOTH
def test_member_add_touches_only_controller_and_new_host(cluster):
    before = cluster.daemon_runs()
    cluster.workers = ["w1", "w2", "w3"]
    run = cluster.playbook("slurm_member_add", slurm_members="w3")
    assert run.rc == 0, run.output[-4000:]
    after = cluster.daemon_runs()
    print(
        f"\nslurm_member_add (third worker): {run.seconds:.1f} s; hosts touched: {sorted(run.hosts_touched)}; "
        f"daemons restarted or started: {sorted(restarted(before, after))}"
    )

    assert run.hosts_touched == {"ctl", "w3"}
    assert restarted(before, after) == {("ctl", "slurmctld"), ("w3", "slurmd"), ("w3", "munge")}
    assert sorted(cluster.sh("ctl", "srun --immediate=30 -N3 hostname").split()) == ["w1", "w2", "w3"]
    assert_unchanged_second_run(cluster, "slurm_member_add", slurm_members="w3")


@BOTH
def test_drain_waits_for_the_running_job_and_new_work_lands_elsewhere(cluster):
    before = cluster.daemon_runs()
    # The job runs until the test releases it, so the drain is seen waiting however slow the machine is.
    release = "/tmp/gpuaas-release-drain-test"
    job = cluster.sh("ctl", f"sbatch --parsable -w w2 --output=/dev/null --wrap "
                            f"'while [ ! -e {release} ]; do sleep 0.2; done; rm -f {release}'")
    assert cluster.wait_node_state("w2", {"alloc", "mix"}) in {"alloc", "mix"}

    result = {}
    drain = threading.Thread(
        target=lambda: result.update(run=cluster.playbook("slurm_member_drain", slurm_members="w2",
                                                          slurm_drain_progress_interval=3))
    )
    drain.start()
    assert cluster.wait_node_state("w2", {"drng"}) == "drng"
    # The status read-back in the platform's words, as a refresh reads it.
    info = cluster.module("ctl", "slurm_info", members=["w1", "w2"])
    assert info["member_states"] == {"w1": "active", "w2": "draining"}
    landed = cluster.sh("ctl", "srun --immediate=30 -N1 hostname")
    assert landed != "w2"
    assert cluster.sh("ctl", f"squeue --noheader --jobs={job} --format=%T") == "RUNNING"
    # The drain is set, so the playbook is one task away from its wait, which prints a line at once and
    # then one every 3 s: give it time for some, even on a busy machine.
    time.sleep(10)
    assert drain.is_alive(), "drain returned while the job was still running"
    cluster.sh("w2", f"touch {release}")
    drain.join(timeout=300)

    run = result["run"]
    assert run.rc == 0, run.output[-4000:]
    assert cluster.sh("ctl", f"squeue --noheader --jobs={job}", check=False) == "", (
        "drain returned before the job ended"
    )
    assert cluster.node_states()["w2"] == "drain"
    info = cluster.module("ctl", "slurm_info", members="w1,w2,gone")
    assert info["member_states"] == {"w1": "active", "w2": "drained", "gone": "failed"}
    reason = cluster.sh("ctl", "sinfo --noheader --Node --nodes=w2 --format=%E")
    assert reason.startswith("gpuaas: ")
    assert run.hosts_touched == {"ctl"}
    assert restarted(before, cluster.daemon_runs()) == set()
    # Progress while it waited, naming the job still running (the steady interval: tests/unit's live test).
    progress = [line for line in run.output.splitlines() if "still draining" in line]
    assert progress, run.output[-3000:]
    assert all(f"[ctl] slurm_node w2: still draining, 1 job(s) running (ids: {job}); waited " in line
               for line in progress), progress
    assert_unchanged_second_run(cluster, "slurm_member_drain", slurm_members="w2")


def test_reconfigure_proves_itself_on_the_nodes_not_drained(cluster):
    """w2 is drained on purpose: the proof's job step cannot land there, so it runs on the others; with every
    joining node drained none runs, and a line says so. Before, srun waited 30 s for w2 and failed the run."""
    assert cluster.node_states()["w2"] == "drain"
    run = cluster.playbook("slurm_reconfigure", verbose=True)
    assert run.rc == 0, run.output[-4000:]
    assert "drained on purpose, left out of the job step: w2" in run.output, run.output[-3000:]
    only = cluster.playbook("slurm_reconfigure", inventory=cluster.inventory(workers=["w2"], name="w2.ini"),
                            verbose=True)
    assert only.rc == 0, only.output[-4000:]
    assert "every node is drained (w2): no job step can run, so none proves them" in only.output
    assert cluster.node_states()["w2"] == "drain"


@BOTH
def test_resume_clears_only_our_drain(cluster):
    run = cluster.playbook("slurm_member_resume", slurm_members="w2")
    assert run.rc == 0, run.output[-4000:]
    assert run.hosts_touched == {"ctl"}
    assert cluster.wait_node_state("w2", {"idle"}) == "idle"
    assert_unchanged_second_run(cluster, "slurm_member_resume", slurm_members="w2")

    # A drain someone else set stays: the run refuses, naming the owner, unless forced.
    cluster.sh("ctl", "scontrol update nodename=w1 state=drain reason='hardware check by site ops'")
    kept = cluster.playbook("slurm_member_resume", slurm_members="w1")
    assert kept.rc != 0
    assert "by someone else (reason 'hardware check by site ops')" in kept.output
    assert cluster.node_states()["w1"] == "drain"
    forced = cluster.playbook("slurm_member_resume", slurm_members="w1", slurm_force="true")
    assert forced.rc == 0, forced.output[-3000:]
    assert cluster.wait_node_state("w1", {"idle"}) == "idle"


@BOTH
def test_remove_refuses_a_busy_worker_then_removes_it(cluster):
    job = cluster.sh("ctl", "sbatch --parsable -w w3 --output=/dev/null --wrap 'sleep 300'")
    assert cluster.wait_node_state("w3", {"alloc", "mix"}) in {"alloc", "mix"}
    refused = cluster.playbook("slurm_member_remove", slurm_members="w3")
    assert refused.rc != 0
    assert f"Workers still run jobs: w3 (jobs {job})" in refused.output
    assert "w3" in cluster.node_states()

    cluster.sh("ctl", f"scancel {job}")
    assert cluster.wait_node_state("w3", {"idle"}) == "idle"
    before = cluster.daemon_runs()
    run = cluster.playbook("slurm_member_remove", slurm_members="w3")
    assert run.rc == 0, run.output[-4000:]
    after = cluster.daemon_runs()
    print(
        f"\nslurm_member_remove: {run.seconds:.1f} s; hosts touched: {sorted(run.hosts_touched)}; "
        f"daemons restarted or stopped: {sorted(restarted(before, after))}"
    )
    assert run.hosts_touched == {"ctl", "w3"}
    assert restarted(before, after) == {("ctl", "slurmctld"), ("w3", "slurmd"), ("w3", "munge")}
    assert set(cluster.node_states()) == {"w1", "w2"}
    assert cluster.sh("w3", "pgrep -x slurmd || true") == ""
    assert (
        cluster.sh("w3", "ls /etc/default/slurmd /var/lib/slurm/slurmd /etc/munge/munge.key 2>/dev/null || true") == ""
    )
    assert_unchanged_second_run(cluster, "slurm_member_remove", slurm_members="w3")
    cluster.workers = ["w1", "w2"]


def test_a_converge_refuses_a_removed_worker_left_in_the_inventory_until_member_add(cluster):
    """The operator trap: w3 was removed, but the inventory still lists it in slurm_workers. A deploy
    (or reconfigure) would silently join it again; the controller's node registry remembers it was
    removed, so the converge refuses before any host changes. Adding it back is an explicit member_add."""
    before = cluster.daemon_runs()
    cluster.workers = ["w1", "w2", "w3"]
    refused = cluster.playbook("slurm_deploy")
    assert refused.rc != 0
    said = " ".join(refused.output.split())
    assert "Workers removed from this cluster are still in group slurm_workers: w3 (node w3)." in said, said[-3000:]
    assert "add them back with gpuaas.apps.slurm_member_add -e slurm_members=w3" in said
    assert set(refused.changed.values()) == {0}, refused.changed
    assert restarted(before, cluster.daemon_runs()) == set()
    assert set(cluster.node_states()) == {"w1", "w2"}
    assert cluster.sh("w3", "pgrep -x slurmd || true") == ""

    back = cluster.playbook("slurm_member_add", slurm_members="w3")
    assert back.rc == 0, back.output[-4000:]
    assert set(cluster.node_states()) == {"w1", "w2", "w3"}
    assert_unchanged_second_run(cluster, "slurm_deploy")  # back in the cluster: a converge keeps it


def test_the_health_check_sees_a_dead_slurmd_before_slurmctld_does(cluster):
    """The descriptor's status read-back as the platform runs it: slurm_info on the controller (view=cluster) and
    on each worker (view=self). A slurmd killed on w3 is failed at once in w3's own view, while slurmctld still
    counts the node in service (it would notice after SlurmdTimeout, 300 s)."""
    members = ["w1", "w2", "w3"]
    ctl = cluster.module("ctl", "slurm_info", view="cluster", node="ctl", members=members)
    assert ctl["member_states"] == {"w1": "active", "w2": "active", "w3": "active"}
    assert ctl["member_details"]["w3"]["slurm_state"] == "IDLE" and ctl["member_details"]["w3"]["running_jobs"] == 0

    cluster.sh("w3", "kill -KILL $(pgrep -x slurmd)")
    mine = cluster.module("w3", "slurm_info", view="self", node="w3", members=members)
    assert mine["member_states"] == {"w3": "failed"}
    assert mine["member_details"]["w3"]["reason"] == "slurmd is not running on w3"
    assert cluster.module("ctl", "slurm_info", node="ctl", members=members)["member_states"]["w3"] == "active"
    cluster.sh("w3", "systemctl start slurmd")

    # A controller that does not answer fails the read-back with one line, which the platform records.
    cluster.sh("ctl", "systemctl stop slurmctld")
    try:
        down = cluster.module("ctl", "slurm_info", check=False, node="ctl", members=members)
    finally:
        cluster.sh("ctl", "systemctl start slurmctld")
    assert "member_states" not in down, down
    assert down["msg"].startswith("slurmctld does not answer (scontrol on ctl: ") and "\n" not in down["msg"], down
    assert cluster.wait_node_state("w3", {"idle"}) == "idle"


def test_a_forced_remove_never_connects_to_the_dead_host_and_cleanup_clears_it_later(cluster):
    """w3's host stops answering while a job runs there. member_remove with slurm_members_unreachable=w3 (what
    the platform sets from its health record) downs and forgets the node without connecting to w3 and without
    the busy-node refusal. Once w3 answers again, slurm_member_cleanup, with only w3 in the inventory, stops what
    still runs there (slurmd, munged, the job's step) and removes it. Before, the remove failed at "Stop and
    disable slurmd" (UNREACHABLE), and the playbook named no cleanup."""
    job = cluster.sh("ctl", "sbatch --parsable --no-requeue -w w3 --output=/dev/null --wrap 'sleep 600'")
    assert cluster.wait_node_state("w3", {"alloc", "mix"}) in {"alloc", "mix"}
    cluster.pause("w3")
    try:
        run = cluster.playbook("slurm_member_remove", slurm_members="w3", slurm_members_unreachable="w3")
    finally:
        cluster.unpause("w3")
    assert run.rc == 0, run.output[-4000:]
    print(f"\nslurm_member_remove of an unreachable worker: {run.seconds:.1f} s")
    assert run.hosts_touched == {"ctl"}, run.recap
    assert set(cluster.node_states()) == {"w1", "w2"}
    registry = json.loads(cluster.sh("ctl", "cat /etc/slurm/gpuaas-nodes.json"))
    assert "w3" in registry["removed"] and "w3" not in registry["nodes"], registry
    assert cluster.sh("ctl", f"squeue --noheader --jobs={job}", check=False) == ""
    assert sorted(cluster.sh("ctl", "srun --immediate=30 -N2 hostname").split()) == ["w1", "w2"]
    cluster.workers = ["w1", "w2"]

    # w3 answers again, its slurmd and munged still running (the job's step too, unless a kill request slurmctld
    # sent while w3 was frozen reached its slurmd first).
    assert cluster.sh("w3", "pgrep -x slurmd && pgrep -x munged")
    alone = cluster.inventory(controllers=[], workers=["w3"], name="cleanup.ini")
    clean = cluster.playbook("slurm_member_cleanup", inventory=alone, slurm_members="w3")
    assert clean.rc == 0, clean.output[-4000:]
    print(f"slurm_member_cleanup: {clean.seconds:.1f} s")
    assert "Nothing left on w3." in clean.output
    assert clean.hosts_touched == {"w3"}
    assert cluster.sh("w3", "pgrep -x 'slurmd|munged|slurmstepd|sleep' || true") == ""
    left = cluster.sh("w3", "ls /etc/default/slurmd /var/lib/slurm/slurmd /etc/munge/munge.key 2>/dev/null || true")
    assert left == ""
    assert_unchanged_second_run(cluster, "slurm_member_cleanup", inventory=alone, slurm_members="w3")


def test_a_reconfigure_with_no_worker_to_reach_runs_on_the_controller_alone(cluster):
    """The platform leaves failed workers out of the inventory: with every worker failed, a reconfigure (and so an
    upgrade or a rollback) still runs, on the controller, which keeps the nodes it knows. A deploy needs a
    worker. Before, both failed with "The inventory has no host in group slurm_workers"."""
    no_workers = cluster.inventory(workers=[], name="no-workers.ini")
    refused = cluster.playbook("slurm_deploy", inventory=no_workers)
    assert refused.rc != 0 and "The inventory has no host in group slurm_workers." in refused.output
    run = cluster.playbook("slurm_reconfigure", inventory=no_workers)
    assert run.rc == 0, run.output[-4000:]
    assert run.hosts_touched == {"ctl"}
    assert "Could not match supplied host pattern" not in run.output
    assert set(cluster.node_states()) == {"w1", "w2"}


@BOTH
def test_replace_joins_the_new_worker_before_draining_the_old(cluster):
    job = cluster.sh("ctl", "sbatch --parsable -w w1 --output=/dev/null --wrap 'sleep 10'")
    assert cluster.wait_node_state("w1", {"alloc", "mix"}) in {"alloc", "mix"}
    before = cluster.daemon_runs()
    cluster.workers = ["w1", "w2", "w4"]
    run = cluster.playbook("slurm_member_replace", slurm_member_old="w1", slurm_member_new="w4")
    assert run.rc == 0, run.output[-4000:]
    after = cluster.daemon_runs()
    print(
        f"\nslurm_member_replace: {run.seconds:.1f} s; hosts touched: {sorted(run.hosts_touched)}; "
        f"daemons restarted, started or stopped: {sorted(restarted(before, after))}"
    )

    joined = run.output.index("PLAY [Start the workers]")
    drained = run.output.index("PLAY [Drain workers]")
    assert joined < drained, "the old worker was drained before the new one joined"
    assert cluster.sh("ctl", f"squeue --noheader --jobs={job}", check=False) == ""
    assert set(cluster.node_states()) == {"w2", "w4"}
    assert run.hosts_touched == {"ctl", "w1", "w4"}
    assert ("w2", "slurmd") not in restarted(before, after)
    assert sorted(cluster.sh("ctl", "srun --immediate=30 -N2 hostname").split()) == ["w2", "w4"]
    assert_unchanged_second_run(cluster, "slurm_member_replace", slurm_member_old="w1", slurm_member_new="w4")
    cluster.workers = ["w2", "w4"]


def test_a_forced_replace_joins_the_new_worker_without_the_dead_one(cluster):
    """w2's host stops answering: replace w2 by w1 (removed earlier, named again) with slurm_members_unreachable=w2.
    The new worker joins, the old node is downed and forgotten, and nothing connects to w2 or waits for its jobs."""
    cluster.workers = ["w1", "w2", "w4"]
    cluster.pause("w2")
    try:
        run = cluster.playbook("slurm_member_replace", slurm_member_old="w2", slurm_member_new="w1",
                               slurm_members_unreachable="w2")
    finally:
        cluster.unpause("w2")
    assert run.rc == 0, run.output[-4000:]
    print(f"\nslurm_member_replace of an unreachable worker: {run.seconds:.1f} s")
    assert run.hosts_touched == {"ctl", "w1"}, run.recap
    assert set(cluster.node_states()) == {"w1", "w4"}
    assert sorted(cluster.sh("ctl", "srun --immediate=30 -N2 hostname").split()) == ["w1", "w4"]
    cluster.workers = ["w1", "w4"]


@BOTH
def test_decommission_leaves_nothing(cluster):
    cluster.workers = ["w1", "w2", "w3", "w4"]  # every host that ever held a part of the cluster
    run = cluster.playbook("slurm_decommission")
    assert run.rc == 0, run.output[-4000:]
    assert "Nothing left on ctl." in run.output
    for host in ("ctl", "w1", "w2", "w3", "w4"):
        assert cluster.sh(host, "pgrep -x 'slurmctld|slurmd|slurmdbd|munged|slurmstepd' || true") == ""
        assert (
            cluster.sh(host, "systemctl is-enabled slurmctld slurmd munge 2>/dev/null | grep -x enabled || true") == ""
        )
        leftovers = cluster.sh(
            host,
            "ls -d /etc/slurm/slurm.conf /etc/munge/munge.key /var/lib/slurm/* "
            "/var/spool/slurmd /var/log/slurm 2>/dev/null || true",
        )
        assert leftovers == "", f"{host} still has {leftovers}"
    assert_unchanged_second_run(cluster, "slurm_decommission")
