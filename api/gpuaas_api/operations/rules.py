"""Pure rules for operations: who may request each kind, where it may start, which member states it
acts on, and how an app version's descriptor maps onto a run. No database access here.

Nothing here knows a scheduler: adapter-specific names (inventory groups, the variables that carry
the members, secrets, the status module and its state words) come from the app version's
runtime_profile["ansible"] block (see docs/operations.md)."""

from __future__ import annotations

from ..errors import conflict

KINDS = ("deploy", "member_add", "member_drain", "member_resume", "member_remove", "member_replace",
         "reconfigure", "upgrade", "rollback", "decommission", "refresh")
MEMBER_KINDS = frozenset({"member_add", "member_drain", "member_resume", "member_remove", "member_replace"})
OPEN = ("queued", "running")
TERMINAL = frozenset({"succeeded", "failed", "canceled"})

_LIFECYCLE, _MEMBER, _NODE = "apps.instance.update", "apps.member.operate", "scheduler.node.operate"
PERMISSIONS: dict[str, tuple[str, ...]] = {
    "deploy": (_LIFECYCLE,), "reconfigure": (_LIFECYCLE,), "upgrade": (_LIFECYCLE,), "rollback": (_LIFECYCLE,),
    "refresh": (_LIFECYCLE,), "decommission": ("apps.instance.delete",),
    "member_add": (_MEMBER,), "member_remove": (_MEMBER,), "member_replace": (_MEMBER,),
    # Drain and resume change a scheduler node's state as well as the member's.
    "member_drain": (_MEMBER, _NODE), "member_resume": (_MEMBER, _NODE),
}

# Instance statuses in which a kind is accepted, and in which its run may start. Accepting in
# `starting` lets requests queue behind a deploy; the run re-checks when its turn comes.
RUN_STATES: dict[str, frozenset[str]] = {
    # starting: a re-attempt after a lost lease; failed: a retry of a deploy that failed
    "deploy": frozenset({"created", "starting", "failed"}),
    "decommission": frozenset({"running", "failed", "stopping"}),  # stopping: a re-attempt
    "refresh": frozenset({"running", "failed"}),
}
DEFAULT_RUN_STATES = frozenset({"running"})


def run_states(kind: str) -> frozenset[str]:
    return RUN_STATES.get(kind, DEFAULT_RUN_STATES)


def accept_states(kind: str) -> frozenset[str]:
    if kind == "deploy":
        return frozenset({"created", "failed"})
    return run_states(kind) | {"starting"}


# Member statuses a member operation acts on (the target member; replace: the old member).
MEMBER_STATES: dict[str, frozenset[str]] = {
    "member_drain": frozenset({"active"}),
    "member_resume": frozenset({"draining", "drained"}),
    "member_remove": frozenset({"joining", "active", "draining", "drained", "failed", "removing"}),
    "member_replace": frozenset({"active", "draining", "drained", "failed"}),
}

# Which playbook runs when the descriptor names none for the kind itself (upgrade and rollback are a
# reconfigure with another version's variables unless the app ships dedicated playbooks).
ACTION_FALLBACKS = {"upgrade": ("upgrade", "reconfigure"), "rollback": ("rollback", "upgrade", "reconfigure")}


def check_instance(kind: str, instance: dict, *, accepting: bool) -> None:
    allowed = accept_states(kind) if accepting else run_states(kind)
    if instance["status"] not in allowed:
        code = "instance_already_deployed" if kind == "deploy" else "instance_not_operable"
        raise conflict(code, f"{kind} needs the instance in {sorted(allowed)}; it is {instance['status']}",
                       status=instance["status"], kind=kind)


def check_member(kind: str, member: dict) -> None:
    if member["status"] == "removed":
        raise conflict("member_already_removed", f"member {member['node_name']} is already removed",
                       member_id=str(member["id"]))
    allowed = MEMBER_STATES.get(kind)
    if allowed is not None and member["status"] not in allowed:
        raise conflict("member_state_conflict",
                       f"{kind} needs the member in {sorted(allowed)}; {member['node_name']} is {member['status']}",
                       member_id=str(member["id"]), status=member["status"], kind=kind)


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
