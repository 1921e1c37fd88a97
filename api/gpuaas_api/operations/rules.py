"""Pure rules for operations: the checks that read the kinds table (operations/kinds.py) and how an
app version's descriptor maps onto a run. No database access here.

Nothing here knows a scheduler: adapter-specific names (inventory groups, the variables that carry
the members, secrets, the status module and its state words) come from the app version's
runtime_profile["ansible"] block (see docs/operations.md)."""

from __future__ import annotations

from ..errors import conflict
from .kinds import KINDS

# Read by the executor's planner until it reads params["targets"].
MEMBER_KINDS = frozenset(k.name for k in KINDS.values() if k.targets)
TERMINAL = frozenset({"succeeded", "failed", "canceled"})

# Which playbook runs when the descriptor names none for the kind itself (upgrade and rollback are a
# reconfigure with another version's variables unless the app ships dedicated playbooks).
ACTION_FALLBACKS = {"upgrade": ("upgrade", "reconfigure"), "rollback": ("rollback", "upgrade", "reconfigure")}


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


def ansible_profile(runtime_profile: dict) -> dict:
    return runtime_profile.get("ansible") or {}


def playbook_for(adapter: dict, kind: str) -> str | None:
    actions = adapter.get("actions") or {}
    return next((actions[a] for a in ACTION_FALLBACKS.get(kind, (kind,)) if a in actions), None)


def groups_for(profile: dict, role: str) -> list[str]:
    """Inventory groups of an adapter role, e.g. {"controller": ["slurm_controller"]}; default: the role."""
    groups = (profile.get("groups") or {}).get(role, role)
    return [groups] if isinstance(groups, str) else list(groups)


def operation_vars(profile: dict, targets: dict[str, list[str]]) -> dict[str, str]:
    """Map the generic operation targets (members, old, new: lists of node names) onto the adapter's
    variable names, e.g. {"members": "slurm_members"} -> {"slurm_members": "w1,w2"}."""
    names = profile.get("operation_vars") or {}
    return {names[k]: ",".join(v) for k, v in targets.items() if k in names and v}


def node_status(profile: dict, state: str) -> str | None:
    """Member status for one node state word (e.g. Slurm's "MIXED+DRAIN"), by the first status rule
    whose words all appear in it: {"all": ["DRAIN", "IDLE"], "status": "drained"}. None: no rule."""
    words = {w.strip("*~#$@%!^-").upper() for w in state.replace("+", " ").split()}
    for rule in (profile.get("status") or {}).get("rules", []):
        if all(w.upper() in words for w in rule.get("all", [])):
            return rule["status"]
    return None
