"""slurm_info on recorded output."""

from ansible_collections.gpuaas.apps.plugins.modules import slurm_info
from slurm_fixtures import GPU01_MIXED, ReplaySlurm, recorded, run_module


def test_info_from_recorded_cluster():
    slurm = ReplaySlurm(
        {
            ("scontrol", "config"): [recorded("config")],
            ("scontrol", "partition"): [recorded("partitions")],
            ("scontrol", "node"): [recorded("nodes_all_mixed")],
            ("squeue",): [recorded("squeue_all_running")],
        }
    )
    result = run_module(slurm_info.main, {}, slurm).result
    assert result["changed"] is False
    assert result["cluster"] == "gpuaas-test" and result["slurm_version"] == "22.05.8"
    assert result["partitions"] == [
        {
            "name": "gpu",
            "nodes": ["gpu01"],
            "state": "UP",
            "default": True,
            "max_time": "1-00:00:00",
            "total_cpus": 2,
        },
        {
            "name": "debug",
            "nodes": ["gpu01"],
            "state": "UP",
            "default": False,
            "max_time": "00:30:00",
            "total_cpus": 2,
        },
    ]
    assert result["nodes"] == [dict(GPU01_MIXED, running_jobs=2)]


def test_jobs_per_node_expands_host_lists():
    rows = [{"job_id": "5", "nodes": "gpu[01-02]"}, {"job_id": "6", "nodes": "gpu02"}]
    assert slurm_info.jobs_per_node(rows) == {"gpu01": ["5"], "gpu02": ["5", "6"]}


def recorded_cluster(nodes_fixture):
    return ReplaySlurm(
        {
            ("scontrol", "config"): [recorded("config")],
            ("scontrol", "partition"): [recorded("partitions")],
            ("scontrol", "node"): [recorded(nodes_fixture)],
            ("squeue",): [recorded("squeue_all_running")],
        }
    )


def test_member_states_in_the_platforms_words():
    # gpu01 runs two jobs (MIXED); a member Slurm does not know is failed.
    result = run_module(
        slurm_info.main, {"members": ["gpu01.example.org", "gpu09.example.org"]}, recorded_cluster("nodes_all_mixed")
    ).result
    assert result["member_states"] == {"gpu01.example.org": "active", "gpu09.example.org": "failed"}
    assert [n["name"] for n in result["nodes"]] == ["gpu01"]  # the other returns stay as they are


def test_members_as_a_comma_separated_string():
    result = run_module(slurm_info.main, {"members": "gpu01, gpu02"}, recorded_cluster("node_draining_mixed")).result
    assert result["member_states"] == {"gpu01": "draining", "gpu02": "failed"}


def test_no_member_states_without_members():
    assert "member_states" not in run_module(slurm_info.main, {}, recorded_cluster("node_idle")).result


def test_member_states_reads_running_jobs_for_drained():
    # IDLE+DRAIN, but squeue still lists jobs on gpu01: not drained yet.
    result = run_module(slurm_info.main, {"members": ["gpu01"]}, recorded_cluster("node_drained")).result
    assert result["member_states"] == {"gpu01": "draining"}


# ---- the health check: member_details, view=self, a controller that does not answer ----------------------------

def fake_proc(root, processes):
    """A /proc layout with one <pid>/stat per (pid, comm, state): what running_daemons() reads."""
    for pid, comm, state in processes:
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "stat").write_text(f"{pid} ({comm}) {state} 1 {pid} {pid} 0 -1 4194560 100 0\n")
    (root / "self").mkdir(parents=True, exist_ok=True)  # not a pid: skipped
    return root


WORKER_UP = [(101, "slurmd", "S"), (55, "munged", "S"), (7, "sshd", "S")]


def run_self(tmp_path, processes, args, monkeypatch):
    monkeypatch.setattr(slurm_info, "PROC_ROOT", str(fake_proc(tmp_path / "proc", processes)))
    nothing = ReplaySlurm({})  # view=self never runs a Slurm command: any call fails the test
    ended = run_module(slurm_info.main, dict({"view": "self"}, **args), nothing)
    assert nothing.calls == []
    return ended


def test_self_view_active_when_slurmd_and_munged_run(tmp_path, monkeypatch):
    result = run_self(tmp_path, WORKER_UP, {"node": "w1", "members": ["w1", "w2"]}, monkeypatch).result
    assert result["member_states"] == {"w1": "active"}  # w2 is judged by its own host
    assert result["member_details"] == {"w1": {"view": "self", "slurmd_running": True, "munged_running": True}}
    assert "nodes" not in result and result["view"] == "self"


def test_self_view_fails_a_member_whose_slurmd_is_dead_or_a_zombie(tmp_path, monkeypatch):
    for slurmd in ([], [(101, "slurmd", "Z")]):
        result = run_self(tmp_path / str(len(slurmd)), [(55, "munged", "S"), *slurmd], {"node": "w1", "members": "w1"},
                          monkeypatch).result
        assert result["member_states"] == {"w1": "failed"}
        assert result["member_details"]["w1"]["reason"] == "slurmd is not running on w1"
        assert result["member_details"]["w1"]["slurmd_running"] is False


def test_self_view_names_every_dead_daemon(tmp_path, monkeypatch):
    result = run_self(tmp_path, [(7, "sshd", "S")], {"node": "w1", "members": ["w1"]}, monkeypatch).result
    assert result["member_details"]["w1"]["reason"] == "slurmd and munged are not running on w1"
    result = run_self(tmp_path / "b", [(101, "slurmd", "S")], {"node": "w1", "members": ["w1"]}, monkeypatch).result
    assert result["member_details"]["w1"]["reason"] == "munged is not running on w1"


def test_self_view_judges_nothing_on_a_host_without_a_member(tmp_path, monkeypatch):
    result = run_self(tmp_path, [], {"node": "ctl", "members": ["w1"]}, monkeypatch).result
    assert result["member_states"] == {} and result["member_details"] == {}


def test_self_view_needs_node(tmp_path, monkeypatch):
    ended = run_self(tmp_path, WORKER_UP, {"members": ["w1"]}, monkeypatch)
    assert ended.failed and "node" in ended.result["msg"]


def test_running_daemons_reads_comm_with_spaces_and_parentheses(tmp_path):
    from ansible_collections.gpuaas.apps.plugins.module_utils.slurm import running_daemons

    root = fake_proc(tmp_path, [(3, "a) b (c", "R"), (4, "slurmd", "S"), (5, "slurmd", "Z"), (6, "slurmstepd", "S")])
    assert running_daemons(("slurmd", "munged", "a) b (c"), str(root)) == {
        "slurmd": [4], "munged": [], "a) b (c": [3]}
    assert running_daemons(("slurmd",), str(tmp_path / "no-proc")) == {"slurmd": []}


def test_cluster_view_details_and_why_a_member_failed(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm_info, "PROC_ROOT", str(fake_proc(tmp_path / "proc", [])))
    down = run_module(slurm_info.main, {"members": ["gpu01", "gpu09"]}, recorded_cluster("node_down")).result
    assert down["view"] == "cluster"
    assert down["member_states"] == {"gpu01": "failed", "gpu09": "failed"}
    assert down["member_details"]["gpu01"] == {
        "view": "cluster", "slurm_state": "DOWN", "reason": "node gpu01 is DOWN: gpuaas: broken gpu",
        "reason_owner": "gpuaas", "running_jobs": 2, "cpus": 2, "real_memory": 1000, "gres": "gpu:2",
        "features": "a100,test", "partitions": "gpu,debug"}
    assert down["member_details"]["gpu09"] == {
        "view": "cluster", "slurm_state": None,
        "reason": "node gpu09 is not in the Slurm cluster (scontrol does not know it)"}
    draining = run_module(slurm_info.main, {"members": ["gpu01"]}, recorded_cluster("node_draining_mixed")).result
    assert draining["member_details"]["gpu01"]["reason"] == "gpuaas: maintenance window"
    for details in (*down["member_details"].values(), *draining["member_details"].values()):
        assert len(details) <= 16
        assert all(v is None or isinstance(v, (bool, int)) or len(v) <= 200 for v in details.values())


def test_cluster_view_also_judges_a_worker_on_the_controllers_own_host(tmp_path, monkeypatch):
    """slurmctld still says IDLE for a while after the local slurmd died: the local view wins when it fails."""
    monkeypatch.setattr(slurm_info, "PROC_ROOT", str(fake_proc(tmp_path / "proc", [(55, "munged", "S")])))
    args = {"members": ["gpu01"], "node": "gpu01"}
    result = run_module(slurm_info.main, args, recorded_cluster("node_idle")).result
    assert result["member_states"] == {"gpu01": "failed"}
    assert result["member_details"]["gpu01"]["reason"] == "slurmd is not running on gpu01"
    assert result["member_details"]["gpu01"]["slurm_state"] == "IDLE"

    monkeypatch.setattr(slurm_info, "PROC_ROOT", str(fake_proc(tmp_path / "up", WORKER_UP)))
    result = run_module(slurm_info.main, args, recorded_cluster("node_idle")).result
    assert result["member_states"] == {"gpu01": "active"}
    assert result["member_details"]["gpu01"]["view"] == "cluster"
    assert result["member_details"]["gpu01"]["slurmd_running"] is True
    # The controller host with no member of its own judges only from slurmctld.
    result = run_module(slurm_info.main, {"members": ["gpu01"], "node": "ctl"}, recorded_cluster("node_idle")).result
    assert "slurmd_running" not in result["member_details"]["gpu01"]


def test_a_controller_that_does_not_answer_fails_with_one_line():
    stderr = "slurm_load_ctl_conf error: Unable to contact slurm controller (connect failure)\n"
    slurm = ReplaySlurm({("scontrol", "config"): [(1, "", stderr)]})
    ended = run_module(slurm_info.main, {"members": ["w1"], "node": "ctl"}, slurm)
    assert ended.failed
    assert ended.result["msg"] == ("slurmctld does not answer (scontrol on ctl: slurm_load_ctl_conf error: "
                                   "Unable to contact slurm controller (connect failure))")
