"""The modules on Slurm 24.11, whose nodes and jobs they read as JSON: real output recorded on Debian 13
(fixtures json_*, capture_fixtures.py) read the same as 22.05's text of the same situations."""

import json

import pytest
from ansible_collections.gpuaas.apps.plugins.module_utils import slurm as su
from ansible_collections.gpuaas.apps.plugins.modules import slurm_accounts, slurm_info, slurm_node
from slurm_fixtures import GPU01_MIXED, ReplaySlurm, recorded, run_module, text

RELEASE_24_11 = text("json_version").strip()
# The fields the modules read from a node, in both formats.
NODE_FIELDS = ("NodeName", "State", "Reason", "CPUTot", "RealMemory", "Gres", "AvailableFeatures", "Partitions")


def json_node(name):
    return su.json_node(json.loads(text(name))["nodes"][0])


# json_node_down was set down while drained, as node_down_drain was.
@pytest.mark.parametrize("situation", ["node_idle", "node_draining_mixed", "node_drained", "node_down_drain"])
def test_a_json_node_reads_as_its_text_of_the_same_situation(situation):
    from_text = su.parse_node_line(text(situation).strip())
    from_json = json_node("json_" + situation.removesuffix("_drain"))
    assert {k: from_json[k] for k in NODE_FIELDS} == {k: from_text[k] for k in NODE_FIELDS}
    assert su.member_state(from_json["State"]) == su.member_state(from_text["State"])


def test_the_release_chooses_the_format():
    assert RELEASE_24_11 == "slurm-wlm 24.11.5"
    json_calls = ReplaySlurm({("scontrol", "show", "node", "--json"): [recorded("json_node_idle")],
                              ("squeue", "--json"): [recorded("json_squeue_empty")]}, release=RELEASE_24_11)
    result = run_module(slurm_node.main, {"name": "gpu01"}, json_calls).result
    assert result["state"] == "IDLE" and result["running_jobs"] == 0
    assert not [c for c in json_calls.calls if "-o" in c or "-h" in c], json_calls.calls
    text_calls = ReplaySlurm({("scontrol", "show"): [recorded("node_idle")],
                              ("squeue",): [recorded("squeue_node_empty")]})
    assert run_module(slurm_node.main, {"name": "gpu01"}, text_calls).result["state"] == "IDLE"
    assert not [c for c in text_calls.calls if "--json" in c], text_calls.calls


def test_info_reads_nodes_and_jobs_as_json():
    slurm = ReplaySlurm(
        {
            ("scontrol", "config"): [recorded("config")],
            ("scontrol", "partition"): [recorded("partitions")],
            ("scontrol", "node", "--json"): [recorded("json_nodes_all_mixed")],
            ("squeue", "--json"): [recorded("json_squeue_running")],
        },
        release=RELEASE_24_11,
    )
    result = run_module(slurm_info.main, {"members": ["gpu01", "gone"]}, slurm).result
    assert result["nodes"] == [dict(GPU01_MIXED, running_jobs=1)]
    assert result["member_states"] == {"gpu01": "active", "gone": "failed"}


def test_a_drain_with_a_job_running_then_drained_and_a_missing_node():
    draining = ReplaySlurm({("scontrol", "show"): [recorded("json_node_draining_mixed")],
                            ("squeue", "--json"): [recorded("json_squeue_running")]}, release=RELEASE_24_11)
    facts = run_module(slurm_node.main, {"name": "gpu01"}, draining).result
    assert facts["drain"] and not facts["drained"] and facts["job_ids"] == ["1"]
    assert facts["reason_owner"] == "gpuaas"
    drained = ReplaySlurm({("scontrol", "show"): [recorded("json_node_drained")],
                           ("squeue", "--json"): [recorded("json_squeue_empty")]}, release=RELEASE_24_11)
    assert run_module(slurm_node.main, {"name": "gpu01"}, drained).result["drained"] is True
    # 24.11 answers a node it does not know with rc 0 and no node, where 22.05 fails.
    missing = ReplaySlurm({("scontrol", "show"): [recorded("json_node_missing")]}, release=RELEASE_24_11)
    ended = run_module(slurm_node.main, {"name": "nosuch"}, missing)
    assert ended.failed and "node nosuch does not exist in Slurm" in ended.result["msg"]
    assert run_module(slurm_node.main, {"name": "nosuch", "missing_ok": True}, missing).result["exists"] is False


def test_output_that_is_not_json_fails_with_what_it_was():
    broken = ReplaySlurm({("scontrol", "show"): [(0, "slurm_load_node error\n", "")]}, release=RELEASE_24_11)
    ended = run_module(slurm_node.main, {"name": "gpu01"}, broken)
    assert ended.failed and "its output is not JSON: slurm_load_node error" in ended.result["msg"]


def test_the_accounts_module_reads_every_job_as_json():
    slurm = ReplaySlurm({("squeue", "--json", "-a"): [recorded("json_squeue_all")]}, release=RELEASE_24_11)

    class Module:  # what SlurmRunner uses of an AnsibleModule
        def run_command(self, argv, **kwargs):
            return slurm(argv, **kwargs)

        def get_bin_path(self, name, **kwargs):
            return f"/usr/bin/{name}"

    assert slurm_accounts.read_jobs(su.SlurmRunner(Module())) == [{"JobId": "1", "User": "root", "Account": ""}]
