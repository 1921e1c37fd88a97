"""Operation kinds, one row each: who may request it, in which statuses it is accepted and run, the
members it targets (by name), the status moves of each phase and the default timeout. Routes, the
queue, the status truth and the settings read this table, so a new kind is a new row (plus a named
effect or request check when it does something no other kind does). Pure data, no imports of the app.

A phase is a sequence of steps, applied in order:
- Move(who, to): `who` is INSTANCE, a target name ("members", "old", "new": the member ids the
  request named or created) or Members(statuses): every member of the instance in those statuses
  when the step runs. Moves take the legal path through the status machine (see truth.py).
- Effect(name): something a status move cannot say (an event, a stored value), see truth.EFFECTS."""

from __future__ import annotations

from dataclasses import dataclass, field

INSTANCE = "instance"


@dataclass(frozen=True)
class Members:
    """A pseudo-target: every member of the instance in one of these statuses."""
    statuses: tuple[str, ...]


@dataclass(frozen=True)
class Move:
    who: str | Members
    to: str


@dataclass(frozen=True)
class Effect:
    name: str


Step = Move | Effect


@dataclass(frozen=True)
class Kind:
    name: str
    permissions: tuple[str, ...]
    timeout_s: int
    # Instance statuses in which a request is accepted, and in which its run may start.
    accept_states: frozenset[str]
    run_states: frozenset[str]
    # Target names, in the order of the operation's member_ids column.
    targets: tuple[str, ...] = ()
    # The target the URL's member id fills, and the statuses that member must be in (None: any but removed).
    route_target: str | None = None
    member_states: frozenset[str] | None = None
    # The target the request creates: a pending member, in the request's role or else the route member's.
    creates: str | None = None
    on_start: tuple[Step, ...] = ()
    on_success: tuple[Step, ...] = ()
    # After a failed, timed-out, canceled-while-running or abandoned run.
    on_failure: tuple[Step, ...] = ()
    # After a cancel before the run: nothing ran.
    on_cancel_queued: tuple[Step, ...] = ()
    # What the app version's adapter must provide: "action" (a playbook for this kind) or "status".
    needs: str = "action"
    # A check of the request body when it is accepted (see service.REQUEST_CHECKS).
    request_check: str | None = None
    # Error code when the instance status refuses the kind.
    state_conflict: str = "instance_not_operable"
    # At most one of this kind queued or running per instance (operation_in_progress).
    single: bool = False
    # Once queued, the instance accepts nothing more (instance_decommissioning).
    closes_queue: bool = False
    # While this kind is queued, later requests see the instance in another status: {now: as if}.
    queued_as: dict[str, str] = field(default_factory=dict)


_LIFECYCLE, _MEMBER, _NODE = "apps.instance.update", "apps.member.operate", "scheduler.node.operate"
# A degraded instance (a member failed, the control plane answers) takes every running kind: removing
# or replacing the failed member is how it gets well.
_RUNNING = frozenset({"running", "degraded"})
# Accepting in `starting` lets requests queue behind a deploy; the run re-checks when its turn comes.
_RUNNING_OR_BEHIND_DEPLOY = _RUNNING | {"starting"}
LIVE = ("joining", "active", "draining", "drained", "removing")


def _running_kind(name: str, permissions: tuple[str, ...], timeout_s: int, **rest) -> Kind:
    """A kind that acts on a running instance (and may queue behind its deploy)."""
    return Kind(name, permissions, timeout_s, _RUNNING_OR_BEHIND_DEPLOY, _RUNNING, **rest)


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("deploy", (_LIFECYCLE,), 3600,
         accept_states=frozenset({"created", "failed"}),
         # starting: a re-attempt after a lost lease; failed: a retry of a deploy that failed
         run_states=frozenset({"created", "starting", "failed"}),
         on_start=(Move(INSTANCE, "starting"), Move(Members(("pending", "failed")), "joining")),
         on_success=(Move(Members(("joining",)), "active"), Effect("deploy_proven"), Move(INSTANCE, "running")),
         on_failure=(Move(Members(("pending", "joining")), "failed"), Move(INSTANCE, "failed")),
         state_conflict="instance_already_deployed", single=True, queued_as={"created": "starting"}),
    _running_kind("member_add", (_MEMBER,), 1800, targets=("members",), creates="members",
                  on_start=(Move("members", "joining"),), on_success=(Move("members", "active"),),
                  on_failure=(Move("members", "failed"),),
                  on_cancel_queued=(Move("members", "removed"), Effect("uncount_created"))),
    # Drain and resume change a scheduler node's state as well as the member's.
    _running_kind("member_drain", (_MEMBER, _NODE), 3600, targets=("members",), route_target="members",
                  member_states=frozenset({"active"}),
                  on_start=(Move("members", "draining"),), on_success=(Move("members", "drained"),),
                  on_failure=(Move("members", "failed"),)),
    _running_kind("member_resume", (_MEMBER, _NODE), 600, targets=("members",), route_target="members",
                  member_states=frozenset({"draining", "drained"}),
                  on_success=(Move("members", "active"),), on_failure=(Move("members", "failed"),)),
    _running_kind("member_remove", (_MEMBER,), 1800, targets=("members",), route_target="members",
                  member_states=frozenset({"joining", "active", "draining", "drained", "failed", "removing"}),
                  on_start=(Move("members", "removing"),),
                  on_success=(Move("members", "removed"), Effect("forced_cleanup")),
                  on_failure=(Move("members", "failed"),)),
    # The new member joins first, then the old one leaves.
    _running_kind("member_replace", (_MEMBER,), 3600, targets=("old", "new"), route_target="old", creates="new",
                  member_states=frozenset({"active", "draining", "drained", "failed"}),
                  on_start=(Move("new", "joining"),),
                  on_success=(Move("new", "active"), Move("old", "drained"), Move("old", "removed"),
                              Effect("forced_cleanup")),
                  on_failure=(Move("new", "failed"),),
                  on_cancel_queued=(Move("new", "removed"), Effect("uncount_created"))),
    # Instance-level runs other than deploy and decommission leave the instance status to a refresh
    # when they fail: the cluster kept running.
    _running_kind("reconfigure", (_LIFECYCLE,), 1800, request_check="parameters",
                  on_success=(Effect("store_parameters"),)),
    _running_kind("upgrade", (_LIFECYCLE,), 3600, request_check="upgrade_target", on_success=(Effect("upgraded"),)),
    _running_kind("rollback", (_LIFECYCLE,), 3600, request_check="rollback_target",
                  on_success=(Effect("rolled_back"),)),
    # Applies the instance's access map (runtime identities, logins, accounts: access/service.py) after a role
    # binding, a service account or a user's SSH keys changed. The platform queues it; a caller holding
    # apps.instance.update may ask for one.
    _running_kind("access_sync", (_LIFECYCLE,), 600),
    Kind("decommission", ("apps.instance.delete",), 1800,
         accept_states=frozenset({"running", "degraded", "failed", "stopping", "starting"}),
         run_states=frozenset({"running", "degraded", "failed", "stopping"}),  # stopping: a re-attempt
         on_start=(Move(INSTANCE, "stopping"), Effect("deleting")),
         on_success=(Move(Members(("pending", "failed") + LIVE), "removed"), Move(INSTANCE, "stopped"),
                     Effect("deleted")),
         on_failure=(Move(INSTANCE, "failed"),), closes_queue=True),
    Kind("refresh", (_LIFECYCLE,), 300,
         accept_states=frozenset({"running", "degraded", "failed", "starting"}),
         run_states=frozenset({"running", "degraded", "failed"}),
         on_success=(Effect("apply_observed"),), needs="status"),
)}

# The kinds' names in table order: the API's operation kinds and the adapter's action names.
KIND_NAMES: tuple[str, ...] = tuple(KINDS)
# Kinds with an action (a playbook) in the adapter; the others need what `needs` names.
ACTION_KINDS: tuple[str, ...] = tuple(k.name for k in KINDS.values() if k.needs == "action")
