"""Parsing of real Slurm 22.05 output (fixtures/) by plugins/module_utils/slurm.py."""

import pytest
from ansible_collections.gpuaas.apps.plugins.module_utils import slurm
from slurm_fixtures import INDEX, text


def node(name):
    nodes = slurm.parse_nodes(text(name))
    assert len(nodes) == 1
    return nodes[0]


def test_idle_node_fields_including_values_with_spaces_and_equals():
    fields = node("node_idle")
    assert fields["NodeName"] == "gpu01"
    assert fields["State"] == "IDLE"
    assert fields["OS"].startswith("Linux ") and " #1 SMP" in fields["OS"]
    assert fields["CfgTRES"] == "cpu=2,mem=1000M,billing=2,gres/gpu=2"
    assert fields["AllocTRES"] == ""
    assert fields["Gres"] == "gpu:2"
    assert fields["Partitions"] == "gpu,debug"
    assert fields["RealMemory"] == "1000"
    assert fields["Reason"] == ""


def test_reason_is_split_from_its_stamp():
    fields = node("node_draining_mixed")
    assert fields["State"] == "MIXED+DRAIN"
    assert fields["Reason"] == "gpuaas: maintenance window"
    assert fields["ReasonUser"] == "root"
    assert fields["ReasonTime"].startswith("20")


def test_free_text_reason_containing_a_key_is_kept_whole():
    fields = node("node_drained_foreign")
    assert fields["Reason"] == "slinky: gpu xid 79 Reason=looks like a key"
    # the fields before the reason are intact
    assert fields["ExtSensorsTemp"] == "n/s"
    assert slurm.reason_owner(fields["Reason"]) == "slinky"


@pytest.mark.parametrize(
    "fixture, state, drain, drained, down",
    [
        ("node_idle", "IDLE", False, False, False),
        ("node_mixed", "MIXED", False, False, False),
        ("node_draining_allocated", "ALLOCATED+DRAIN", True, False, False),
        ("node_draining_mixed", "MIXED+DRAIN", True, False, False),
        ("node_drained", "IDLE+DRAIN", True, True, False),
        ("node_down", "DOWN", False, False, True),
        ("node_down_drain", "DOWN+DRAIN", True, True, True),
        ("node_resumed_not_responding", "IDLE+NOT_RESPONDING", False, False, False),
    ],
)
def test_node_summary_states(fixture, state, drain, drained, down):
    summary = slurm.node_summary(node(fixture), [])
    assert summary["state"] == state
    assert (summary["drain"], summary["drained"], summary["down"]) == (drain, drained, down)
    assert summary["responding"] == (fixture != "node_resumed_not_responding")


def test_running_jobs_make_a_drain_flagged_idle_node_not_drained():
    # squeue can still list a job for a moment while the node already reads IDLE+DRAIN
    summary = slurm.node_summary(node("node_drained"), ["7"])
    assert summary["drain"] and not summary["drained"]
    assert summary["running_jobs"] == 1 and summary["job_ids"] == ["7"]


def test_missing_node_is_recognised():
    meta = INDEX["node_missing"]
    assert meta["rc"] != 0
    assert slurm.node_not_found(text("node_missing"), meta["stderr"])
    assert slurm.node_not_found("", INDEX["update_missing_node"]["stderr"])
    assert not slurm.node_not_found(text("node_idle"), "")


def test_reason_owner():
    assert slurm.reason_owner("gpuaas: maintenance") == "gpuaas"
    assert slurm.reason_owner("Not responding") is None
    assert slurm.reason_owner("gres/gpu count reported lower than configured (0 < 2)") is None
    assert slurm.reason_owner("") is None
    assert slurm.owned_reason("gpuaas", "x") == "gpuaas: x"


def test_split_and_join_state():
    assert slurm.split_state("MIXED+DRAIN") == ("MIXED", ["DRAIN"])
    assert slurm.split_state("IDLE") == ("IDLE", [])
    assert slurm.split_state("") == ("UNKNOWN", [])
    assert slurm.join_state("DOWN", ["DRAIN"]) == "DOWN+DRAIN"


def test_partitions():
    parts = slurm.parse_partitions(text("partitions"))
    assert [p["PartitionName"] for p in parts] == ["gpu", "debug"]
    assert parts[0]["Default"] == "YES" and parts[1]["Default"] == "NO"
    assert parts[0]["MaxTime"] == "1-00:00:00" and parts[1]["MaxTime"] == "00:30:00"
    assert parts[0]["TRES"] == "cpu=2,mem=1000M,node=1,billing=2,gres/gpu=2"


def test_config():
    config = slurm.parse_config(text("config"))
    assert config["ClusterName"] == "gpuaas-test"
    assert config["SLURM_VERSION"] == "22.05.8"
    assert config["ProctrackType"] == "proctrack/linuxproc"
    assert config["AccountingStorageEnforce"] == "associations"
    assert "Configuration data as of" not in " ".join(config)


def test_all_nodes_and_squeue_rows():
    nodes = slurm.parse_nodes(text("nodes_all_mixed"))
    assert [n["NodeName"] for n in nodes] == ["gpu01"]
    assert slurm.parse_lines(text("squeue_node_two_jobs")) == ["1", "2"]
    assert slurm.parse_lines(text("squeue_node_empty")) == []
    rows = slurm.parse_parsable(text("squeue_all_running"), ("job_id", "nodes"))
    assert rows == [{"job_id": "1", "nodes": "gpu01"}, {"job_id": "2", "nodes": "gpu01"}]


def test_parsable_sacctmgr_rows():
    fields = (
        "Cluster",
        "Account",
        "User",
        "ParentName",
        "Share",
        "GrpTRES",
        "MaxJobs",
        "MaxSubmit",
        "QOS",
        "DefaultQOS",
    )
    rows = slurm.parse_parsable(text("assoc_tree"), fields)
    proj = [r for r in rows if r["Account"] == "proj-a" and not r["User"]][0]
    assert proj["ParentName"] == "tenant1"
    assert proj["GrpTRES"] == "cpu=8,gres/gpu=4"
    assert proj["QOS"] == "high,normal"
    assert slurm.parse_parsable(text("assoc_none"), fields) == []


def test_parsable_rejects_rows_with_the_wrong_field_count():
    with pytest.raises(ValueError, match="expected 3"):
        slurm.parse_parsable("a|b\n", ("x", "y", "z"))


def test_hostlist_matches_slurms_own_expansion():
    hostlist = INDEX["hostnames"]["command"].split()[-1]
    assert slurm.expand_hostlist(hostlist) == slurm.parse_lines(text("hostnames"))


def test_hostlist_edge_cases():
    assert slurm.expand_hostlist("") == []
    assert slurm.expand_hostlist("gpu01") == ["gpu01"]
    assert slurm.expand_hostlist("n[1,3]") == ["n1", "n3"]


@pytest.mark.parametrize(
    ("fixture", "running_jobs", "expected"),
    [
        ("node_idle", 0, "active"),
        ("node_mixed", 1, "active"),
        ("node_draining_mixed", 1, "draining"),
        ("node_draining_allocated", 2, "draining"),
        ("node_drained", 0, "drained"),
        ("node_drained_foreign", 0, "drained"),
        ("node_down", 0, "failed"),
        ("node_down_drain", 0, "failed"),
        ("node_resumed_not_responding", 0, "failed"),
    ],
)
def test_member_state_of_recorded_nodes(fixture, running_jobs, expected):
    assert slurm.member_state(node(fixture)["State"], running_jobs) == expected


@pytest.mark.parametrize(
    ("state", "running_jobs", "expected"),
    [
        # failure words win over everything else, first match
        ("IDLE+DRAIN+NOT_RESPONDING", 0, "failed"),
        ("ALLOCATED+FAIL", 1, "failed"),
        ("MIXED+FAILING", 1, "failed"),
        ("idle*", 0, "failed"),
        ("DOWN*+DRAIN", 0, "failed"),
        # drained only while idle with nothing running
        ("IDLE+DRAIN", 1, "draining"),
        ("IDLE+COMPLETING+DRAIN", 0, "draining"),
        ("COMPLETING+DRAIN", 0, "draining"),
        ("idle+drain", 0, "drained"),
        ("ALLOCATED", 3, "active"),
        ("COMPLETING", 0, "active"),
        ("IDLE+COMPLETING", 0, "active"),
        ("IDLE+POWERED_DOWN", 0, "active"),
        # anything else is not a member that works
        ("UNKNOWN", 0, "failed"),
        ("FUTURE", 0, "failed"),
        ("", 0, "failed"),
        (None, 0, "failed"),
    ],
)
def test_member_state_maps_slurm_words_first_match_wins(state, running_jobs, expected):
    assert slurm.member_state(state, running_jobs) == expected


def test_node_name_of_a_host_is_its_name_up_to_the_first_dot():
    assert slurm.node_name_of("gpu01.rack2.example.org") == "gpu01"
    assert slurm.node_name_of("w1") == "w1"
