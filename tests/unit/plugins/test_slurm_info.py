"""slurm_info on recorded output."""

from ansible_collections.gpuaas.apps.plugins.modules import slurm_info
from slurm_fixtures import ReplaySlurm, recorded, run_module


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
    assert result["nodes"] == [
        {
            "name": "gpu01",
            "state": "MIXED",
            "cpus": 2,
            "real_memory": 1000,
            "gres": "gpu:2",
            "features": ["a100", "test"],
            "reason": "",
            "reason_owner": None,
            "partitions": ["gpu", "debug"],
            "running_jobs": 2,
            "drained": False,
        },
    ]


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
