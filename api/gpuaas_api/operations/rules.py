"""Pure rules for operations: the checks that read the kinds table (operations/kinds.py) and the app
version's adapter spec. No database access here; nothing here knows a scheduler."""

from __future__ import annotations

from ..errors import conflict
from .kinds import KINDS

TERMINAL = frozenset({"succeeded", "failed", "canceled"})


def check_instance(kind: str, instance: dict, *, accepting: bool) -> None:
    k = KINDS[kind]
    allowed = k.accept_states if accepting else k.run_states
    if instance["status"] not in allowed:
        raise conflict(k.state_conflict, f"{kind} needs the instance in {sorted(allowed)}; it is {instance['status']}",
                       status=instance["status"], kind=kind)


def check_member(kind: str, member: dict) -> None:
    """The member a member route names (replace: the old member)."""
    if member["status"] == "removed":
        raise conflict("member_already_removed", f"member {member['node_name']} is already removed",
                       member_id=str(member["id"]))
    allowed = KINDS[kind].member_states
    if allowed is not None and member["status"] not in allowed:
        raise conflict("member_state_conflict",
                       f"{kind} needs the member in {sorted(allowed)}; {member['node_name']} is {member['status']}",
                       member_id=str(member["id"]), status=member["status"], kind=kind)


def check_supported(kind: str, version: dict) -> None:
    """The app version's adapter can do this kind: it names a playbook for it, or (refresh) a status
    read-back."""
    adapter = version["adapter"] or {}
    if KINDS[kind].needs == "status":
        lacks = None if adapter.get("status") else f"no status read-back, which {kind} needs"
    else:
        lacks = None if kind in (adapter.get("actions") or {}) else f"no action for {kind}"
    if lacks:
        raise conflict("action_not_supported", f"app {version['app_slug']} version {version['version']} has {lacks}",
                       kind=kind, app_slug=version["app_slug"], version=version["version"])
