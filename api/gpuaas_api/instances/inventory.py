"""The Ansible inventory of an instance: one place, used by the runs the control service starts
(executor/plan.py) and served to operators and AWX (GET /v1/instances/{id}/inventory, read by the
collection's `gpuaas.apps.gpuaas` inventory plugin), so both see the same hosts and groups.

Hosts are member node names; `ansible_host`, `ansible_user` and `ansible_port` come from the
allocation host (a user other than root gets `ansible_become`). `ansible_python_interpreter` is
/usr/bin/python3, which every host image the apps support has: named, it spares each host the extra
SSH round trip of Ansible's interpreter discovery before its first task. Groups are the adapter roles'
inventory groups. Each host carries `gpuaas_instance_id` and `gpuaas_members` (id, role, status of
every member of the instance on it).

The served inventory also carries the variables of the instance's runs (instances/run_vars.py adds them from
executor/plan.py, which computes them for the runs too); a run gets them as extra vars instead."""

from __future__ import annotations

from ..catalog.adapter import AdapterSpec
from ..errors import unprocessable

PYTHON = "/usr/bin/python3"


def build(spec: AdapterSpec, instance_id: str, members: list[dict]) -> dict:
    """{"all": {"hosts": {node: hostvars}, "children": {group: {"hosts": {node: {}}}}}} for `members`
    (rows of instances.service.MEMBER_SELECT)."""
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
        hostvars = hosts.setdefault(m["node_name"], {
            "ansible_host": host.get("address", m["host_name"]), "ansible_user": host.get("ssh_user", "root"),
            "ansible_port": host.get("ssh_port", 22), "ansible_python_interpreter": PYTHON,
            "gpuaas_instance_id": str(instance_id), "gpuaas_members": []})
        if hostvars["ansible_user"] != "root":
            hostvars["ansible_become"] = True
        hostvars["gpuaas_members"].append({"id": str(m["id"]), "role": m["role"], "status": m["status"]})
        role = spec.role(m["role"])
        for g in role.inventory_groups() if role else [m["role"]]:
            groups.setdefault(g, {"hosts": {}})["hosts"][m["node_name"]] = {}
    return {"all": {"hosts": hosts, "children": groups}}
