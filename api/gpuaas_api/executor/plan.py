"""What one run needs, computed from the database: the playbook (or the status module for refresh),
an inventory of the instance's members on their allocation hosts, extra vars and secret vars.

Inventory hosts are member node names; `ansible_host`, `ansible_user` and `ansible_port` come from
the allocation host. Groups come from the adapter role names through runtime_profile.ansible.groups.
Extra vars, later ones winning: runtime_profile.extra_vars, the tenant parameters (the instance's,
with a reconfigure request's merged over them; checked against the version's declared schema),
runtime_profile.ansible.action_vars[kind], then the operation's targets under the adapter's variable
names (runtime_profile.ansible.operation_vars). The runner hands all of them to Ansible as unsafe."""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

import psycopg

from ..catalog import parameters
from ..config import OperationSettings
from ..errors import unprocessable
from ..operations import rules
from ..secrets import service as secrets

# Members that take part in a run: live ones, plus the operation's own targets (a joining or a
# leaving member), plus every non-removed member for a decommission (tear down all of it).
LIVE = ("joining", "active", "draining", "drained", "removing")


@dataclass
class RunPlan:
    kind: str
    inventory: dict
    extravars: dict
    secret_vars: dict[str, str] = field(repr=False)
    playbook: str | None = None
    module: str | None = None
    module_args: str = ""
    host_pattern: str = ""
    # refresh: which member each scheduler node name stands for
    node_members: dict[str, str] = field(default_factory=dict)
    profile: dict = field(default_factory=dict)


def _version(conn, version_id: UUID) -> dict:
    return conn.execute("SELECT * FROM app_versions WHERE id = %s", (version_id,)).fetchone()


def build(conn: psycopg.Connection, settings: OperationSettings, op: dict, instance: dict) -> RunPlan:
    target_version = op["params"].get("target_version_id")
    version = _version(conn, UUID(target_version) if target_version else instance["app_version_id"])
    profile = rules.ansible_profile(version["runtime_profile"])
    kind = op["kind"]
    statuses = list(LIVE) + (["pending", "failed"] if kind == "decommission" else [])
    members = conn.execute(
        """SELECT m.*, (SELECT h FROM jsonb_array_elements(al.hosts) h WHERE h->>'name' = m.host_name LIMIT 1) AS host
             FROM app_instance_members m JOIN allocations al ON al.id = m.allocation_id
            WHERE m.instance_id = %s AND m.status <> 'removed' AND (m.status = ANY(%s) OR m.id = ANY(%s))
            ORDER BY m.seq""", (instance["id"], statuses, op["member_ids"])).fetchall()
    inventory = _inventory(settings, profile, members)
    by_id = {m["id"]: m for m in members}
    names = [by_id[m]["node_name"] for m in op["member_ids"] if m in by_id]
    targets = ({"old": names[:1], "new": names[1:]} if kind == "member_replace"
               else {"members": names} if kind in rules.MEMBER_KINDS else {})
    tenant_vars = (instance["parameters"] or {}) | (op["params"].get("request", {}).get("parameters", {})
                                                    if kind == "reconfigure" else {})
    # Checked again here: the version may have changed (upgrade, rollback) since the values were accepted.
    parameters.validate_for_version(version, tenant_vars)
    extravars = dict(version["runtime_profile"].get("extra_vars") or {})
    extravars |= tenant_vars
    extravars |= (profile.get("action_vars") or {}).get(kind, {})
    extravars |= rules.operation_vars(profile, targets)
    plan = RunPlan(kind=kind, inventory=inventory, extravars=extravars, secret_vars={}, profile=profile)
    if kind == "refresh":
        status = profile.get("status") or {}
        if not status.get("module"):
            raise unprocessable("no_status_module", "the app version names no status module "
                                "(runtime_profile.ansible.status.module)")
        plan.module = status["module"]
        plan.module_args = status.get("module_args", "")
        plan.host_pattern = ":".join(rules.groups_for(profile, status.get("role", "controller")))
        node_roles = set(status.get("node_roles", []))
        plan.node_members = {m["node_name"].split(".")[0]: str(m["id"]) for m in members
                             if not node_roles or m["role"] in node_roles}
        return plan
    plan.playbook = rules.playbook_for(version["adapter"], kind)
    if plan.playbook is None:
        raise unprocessable("no_playbook", f"the app version's adapter names no playbook for {kind}")
    secrets.ensure(conn, settings, instance["id"], profile.get("secrets") or {})
    plan.secret_vars = secrets.load(conn, settings, instance["id"])
    return plan


def _inventory(settings: OperationSettings, profile: dict, members: list[dict]) -> dict:
    hosts: dict[str, dict] = {}
    groups: dict[str, dict] = {}
    placed: dict[str, tuple] = {}
    for m in members:
        # Members of several roles on one host share its inventory entry; two hosts must never share one.
        where = placed.setdefault(m["node_name"], (m["allocation_id"], m["host_name"]))
        if where != (m["allocation_id"], m["host_name"]):
            raise unprocessable("duplicate_node_name", f"two hosts of the instance are named {m['node_name']}; "
                                "inventory host names must be unique within a run", node_name=m["node_name"])
        host = m["host"] or {}
        hostvars = {"ansible_host": host.get("address", m["host_name"]),
                    "ansible_user": host.get("ssh_user", "root"), "ansible_port": host.get("ssh_port", 22)}
        if hostvars["ansible_user"] != "root":
            hostvars["ansible_become"] = True
        hosts[m["node_name"]] = hostvars
        for g in rules.groups_for(profile, m["role"]):
            groups.setdefault(g, {"hosts": {}})["hosts"][m["node_name"]] = {}
    all_vars = {}
    if settings.ssh_private_key_file:
        all_vars["ansible_ssh_private_key_file"] = str(settings.ssh_private_key_file)
    return {"all": {"hosts": hosts, "vars": all_vars, "children": groups}}
