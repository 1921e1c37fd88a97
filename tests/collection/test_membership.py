"""gpuaas.apps.membership (and gpuaas.apps.slurm_preflight, which plans Slurm requests with it) run for
real by ansible-playbook on the control node: the groups a request fills, and every refusal with the
message that names the problem."""

import json

import pytest

from .ansible_run import PLAYBOOKS, local_inventory
from .ansible_run import run_playbook as run_ansible_playbook

POOL = ["w1.example", "w2.example", "w3.example"]


def run_playbook(tmp_path, playbook, groups, extra):
    """(rc, the JSON the playbook wrote to extra['out'] or None, output) of a run on a local inventory."""
    inventory = local_inventory(tmp_path / "hosts.ini", groups)
    out = tmp_path / "out.json"
    out.unlink(missing_ok=True)
    rc, output = run_ansible_playbook(PLAYBOOKS / playbook, inventory,
                                      {**extra, "membership_out": str(out), "preflight_out": str(out)})
    written = json.loads(out.read_text()) if rc == 0 else None
    return rc, written, output


@pytest.fixture
def plan(tmp_path):
    def run(removing=(), **request):
        extra = {"membership_pool_group": "app_workers", "membership_group_prefix": "app", **request}
        return run_playbook(tmp_path, "membership.yml", {"app_workers": POOL, "app_removing": removing}, extra)
    return run


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        ({"membership_kind": "deploy"}, {"app_joining": POOL}),
        ({"membership_kind": "reconfigure"}, {"app_joining": POOL}),
        ({"membership_kind": "decommission"}, {}),
        ({"membership_kind": "member_add", "membership_members": "w2.example, w3.example"},
         {"app_joining": ["w2.example", "w3.example"]}),
        ({"membership_kind": "member_drain", "membership_members": ["w1.example"]}, {"app_draining": ["w1.example"]}),
        ({"membership_kind": "member_resume", "membership_members": "w1.example"}, {"app_resuming": ["w1.example"]}),
        ({"membership_kind": "member_remove", "membership_members": ["w3.example"]}, {"app_leaving": ["w3.example"]}),
        ({"membership_kind": "member_replace", "membership_member_old": "w1.example",
          "membership_member_new": "w3.example"},
         {"app_joining": ["w3.example"], "app_draining": ["w1.example"], "app_leaving": ["w1.example"]}),
        # An app's own table: the kinds and groups are data.
        ({"membership_kind": "rotate", "membership_members": "w2.example",
          "membership_kinds": {"rotate": {"members": ["draining", "joining"]}}},
         {"app_draining": ["w2.example"], "app_joining": ["w2.example"]}),
    ],
    ids=["deploy", "reconfigure", "decommission", "add", "drain", "resume", "remove", "replace", "own-table"],
)
def test_request_fills_its_groups(plan, request_, expected):
    rc, groups, output = plan(**request_)
    assert rc == 0, output[-3000:]
    assert {name: sorted(hosts) for name, hosts in groups.items()} == expected


@pytest.mark.parametrize(
    ("request_", "removing", "message"),
    [
        ({"membership_kind": "scale_up"}, (),
         "Unknown operation kind 'scale_up': the playbooks of group app_workers know deploy, reconfigure"),
        ({"membership_kind": "member_add"}, (),
         "membership_members is empty: name the members (hosts of group app_workers) to add."),
        ({"membership_kind": "member_drain", "membership_members": " , "}, (),
         "membership_members is empty: name the members (hosts of group app_workers) to drain."),
        ({"membership_kind": "member_remove", "membership_members": "w1.example,w9,w8"}, (),
         "Not members in this inventory (group app_workers): w9, w8."),
        ({"membership_kind": "member_replace", "membership_member_old": "w1.example",
          "membership_member_new": "w1.example",
          "membership_target_names": {"members": "m", "old": "app_old", "new": "app_new"}}, (),
         "member_replace needs app_old and app_new: two different hosts, both in group app_workers "
         "(got old='w1.example', new='w1.example')."),
        ({"membership_kind": "member_replace", "membership_member_old": "w1.example"}, (),
         "(got old='w1.example', new='')."),
        ({"membership_kind": "member_replace", "membership_member_old": "w1.example",
          "membership_member_new": "w7"}, (), "two different hosts, both in group app_workers"),
        ({"membership_kind": "member_add", "membership_members": "w1.example,w2.example"}, ("w2.example",),
         "Hosts asked to join that the inventory lists as being removed (group app_removing): w2.example."),
        ({"membership_kind": "deploy"}, ("w3.example",),
         "lists as being removed (group app_removing): w3.example."),
    ],
    ids=["unknown-kind", "no-members", "blank-members", "not-in-pool", "replace-same", "replace-no-new",
         "replace-outsider", "add-removing", "deploy-removing"],
)
def test_bad_request_is_refused_naming_the_problem(plan, request_, removing, message):
    rc, _, output = plan(removing=removing, **request_)
    assert rc != 0
    assert message in " ".join(output.split()), output[-3000:]


def test_slurm_preflight_plans_with_the_membership_role(tmp_path):
    inventory = {"slurm_controller": ["ctl"], "slurm_workers": ["w1.example", "w2.example slurm_worker_name=gpu2"]}
    rc, written, output = run_playbook(tmp_path, "slurm_preflight.yml", inventory, {
        "slurm_preflight_action": "member_replace", "slurm_preflight_member_old": "w1.example",
        "slurm_preflight_member_new": "w2.example"})
    assert rc == 0, output[-3000:]
    assert written["groups"] == {"slurm_joining": ["w2.example"], "slurm_draining": ["w1.example"],
                                 "slurm_leaving": ["w1.example"]}
    assert written["names"] == {"w1.example": "w1", "w2.example": "gpu2"}


@pytest.mark.parametrize(
    ("inventory", "extra", "message"),
    [
        ({"slurm_workers": ["w1"]}, {"slurm_preflight_action": "deploy"},
         "exactly one host in group slurm_controller; it has 0."),
        ({"slurm_controller": ["ctl"], "slurm_workers": ["w1", "w2 slurm_worker_name=w1"]},
         {"slurm_preflight_action": "deploy"}, "Workers would share a Slurm node name: w1 (w1, w2)."),
        ({"slurm_controller": ["ctl"], "slurm_workers": ["w1"]},
         {"slurm_preflight_action": "member_add", "slurm_preflight_members": ""},
         "slurm_members is empty: name the members (hosts of group slurm_workers) to add."),
        ({"slurm_controller": ["ctl"], "slurm_workers": ["w1"]},
         {"slurm_preflight_action": "member_replace", "slurm_preflight_member_old": "w1"},
         "member_replace needs slurm_member_old and slurm_member_new: two different hosts, both in group "
         "slurm_workers (got old='w1', new='')."),
    ],
    ids=["no-controller", "same-node-name", "no-members", "replace-without-new"],
)
def test_slurm_preflight_refuses_naming_the_problem(tmp_path, inventory, extra, message):
    rc, _, output = run_playbook(tmp_path, "slurm_preflight.yml", inventory, extra)
    assert rc != 0
    assert message in " ".join(output.split()), output[-3000:]
