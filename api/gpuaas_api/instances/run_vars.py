"""What a run of an instance outside the platform (an AWX job, docs/awx.md) needs to run as the platform's own runs
do, computed by the code that plans those runs (executor/plan.py), in two parts:

- `inventory`: GET /v1/instances/{id}/inventory (`apps.instance.read`). The instance's inventory
  (instances/inventory.py) with the run's variables in `all.vars` (plan.instance_vars: the catalog's `vars`, the
  tenant parameters, the catalog's `action_vars` of the action asked for, the workload artifact and its signer's
  key; data that Ansible must never template) and the operator's `site_vars` beside it (plan.site_vars_for:
  templates allowed, below `all.vars`). The collection's inventory plugin sets them so.
- `run_secrets`: POST /v1/instances/{id}/run-secrets (`apps.instance.run_secrets.read`). What a run gets beyond
  the inventory: the instance's secrets (plan.instance_secret_vars) and the access map (plan.access_vars, which
  `apps.instance.update` guards on its own route). Never in an inventory. The answer is its only copy (no-store);
  the timeline's `runtime_secret.issued` event and the audit row name who read which variables, never a value.
  The collection's `gpuaas.apps.run_secrets` vars plugin reads it when a job starts.

Not given: an operation's targets (an AWX job takes its own from its survey), the leaving members the platform's
health record calls unreachable (decided per operation), and a registry pull credential (issued for one
operation and revoked when it ends)."""

from __future__ import annotations

import psycopg

from ..audit import service as audit
from ..catalog.adapter import stored_spec
from ..catalog.service import get_version_by_id
from ..config import OperationSettings
from ..errors import unprocessable
from ..executor import plan as planner
from ..iam.auth import Principal
from . import service

PERMISSION = "apps.instance.run_secrets.read"


def inventory(conn: psycopg.Connection, settings: OperationSettings, instance: dict, action: str | None) -> dict:
    """The instance's inventory with the variables of a run of `action` (None: those every action shares)."""
    version = get_version_by_id(conn, instance["app_version_id"])
    spec = stored_spec(version)
    if action is not None and action not in spec.actions:
        raise unprocessable("no_playbook", f"the app version's adapter names no playbook for {action}",
                            actions=sorted(spec.actions))
    if spec.files and version.get("files"):
        # a run's files variable names each file's copy on the worker (plan.build), which an AWX job cannot read
        raise unprocessable("files_not_external", "the app version pins file artifacts, which only the "
                            "platform's own runs deliver; run its actions through the platform",
                            files=sorted(version["files"]))
    built = service.instance_inventory(conn, instance)
    built["all"]["vars"] = planner.instance_vars(version, spec, instance["parameters"] or {}, action)
    built["site_vars"] = planner.site_vars_for(settings, spec)
    return built


def run_secrets(conn: psycopg.Connection, settings: OperationSettings, caller: Principal, instance: dict) -> dict:
    """The variables of the instance's runs that no inventory carries, with the reading recorded (names only)."""
    spec = stored_spec(get_version_by_id(conn, instance["app_version_id"]))
    variables = planner.instance_secret_vars(conn, settings, instance, spec) | planner.access_vars(conn, spec, instance)
    payload = {"purpose": "external_run", "variables": sorted(variables),
               "issued_to": {"kind": caller.kind, "id": str(caller.id)}}
    event = audit.append_event(conn, instance, "runtime_secret.issued", payload)
    audit.record(conn, caller, "runtime_secret.issued", "app_instance", instance["id"], after=payload,
                 context=audit.instance_context(instance))
    return {"variables": variables, "issued_at": event["occurred_at"]}
