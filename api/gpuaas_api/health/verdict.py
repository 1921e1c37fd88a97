"""What one status read-back says about each member and the control plane: pure, no database.

The adapter's status module runs on the hosts of its status role (the instance's view of every member)
and of its host roles (each answering for itself); see catalog/adapter.StatusSpec. A host either
answered (the module's result), failed (the module failed there) or did not answer (unreachable, or no
answer before the check's deadline). The rules, in order, for a member:
1. its own host (when the check ran there) did not answer: failed, unreachable;
2. the module failed on its own host: failed, with the module's message;
3. a member the module was not asked about (a status-role member) is well when its host answered: a
   failed one is active again, any other keeps its status (what the module says of its node name is
   about another member on the same host);
4. any host that answered says failed: failed, with that host's reason;
5. the view (a status-role host that answered) says a state: that state;
6. its own host says a state: that state;
7. the control plane did not answer: unknown (left as it is: nothing read it);
8. otherwise failed: no host reported it.
The control plane answers when at least one host of the status role answered."""

from __future__ import annotations

from dataclasses import dataclass, field

STATES = frozenset({"active", "draining", "drained", "failed"})
DETAIL_KEYS, DETAIL_CHARS, REASON_CHARS = 16, 200, 500


@dataclass(frozen=True)
class HostAnswer:
    """One host's part of a check: the module's result, or why there is none."""
    result: dict | None = None
    failed: str | None = None  # the module failed there: its message
    unreachable: str | None = None  # no answer: why


@dataclass(frozen=True)
class MemberView:
    member_id: str
    node: str  # the inventory host (node name) the member is on
    status: str
    asked: bool  # named in the module's `members`


@dataclass
class MemberVerdict:
    observed: str | None  # the status the check read; None: unknown, left alone
    reason: str = ""
    reachable: bool = True
    details: dict = field(default_factory=dict)


@dataclass
class Verdict:
    control_plane: bool
    control_plane_message: str
    members: dict[str, MemberVerdict]  # member id -> verdict


def clean_details(details) -> dict:
    """At most DETAIL_KEYS scalar values, strings cut to DETAIL_CHARS: the module's runtime detail is
    stored and shown, so it is bounded here whatever the module returns."""
    if not isinstance(details, dict):
        return {}
    kept = {}
    for key, value in list(details.items())[:DETAIL_KEYS]:
        if not isinstance(key, str) or len(key) > 64:
            continue
        if isinstance(value, str):
            value = value[:DETAIL_CHARS]
        elif not (value is None or isinstance(value, (bool, int, float))):
            continue
        kept[key] = value
    return kept


def _said(answer: HostAnswer | None, node: str) -> tuple[str | None, dict]:
    """(state, details) a host that answered gives for `node`; a word outside STATES counts as failed."""
    if answer is None or answer.result is None:
        return None, {}
    state = (answer.result.get("member_states") or {}).get(node)
    details = clean_details((answer.result.get("member_details") or {}).get(node))
    if state is not None and state not in STATES:
        details.setdefault("reason", f"the status module reported {str(state)[:40]!r}")
        state = "failed"
    return state, details


def judge(answers: dict[str, HostAnswer], view_hosts: set[str], members: list[MemberView]) -> Verdict:
    """`answers`: inventory host -> its answer (every host the check targeted); `view_hosts`: the hosts
    of the status role."""
    viewing = sorted(h for h in view_hosts if answers.get(h) and answers[h].result is not None)
    troubles = [f"{h}: {answers[h].failed or answers[h].unreachable}" for h in sorted(view_hosts)
                if answers.get(h) and answers[h].result is None]
    control_plane = bool(viewing)
    message = "" if control_plane else ("; ".join(troubles) or "no host of the status role was checked")
    verdicts = {}
    for m in members:
        own = answers.get(m.node)  # None: the check did not run on its host
        if own is not None and own.unreachable is not None:
            why = f"host {m.node} unreachable: {own.unreachable}"
            verdicts[m.member_id] = MemberVerdict("failed", why[:REASON_CHARS], reachable=False)
            continue
        if own is not None and own.failed is not None:
            why = f"the check failed on {m.node}: {own.failed}"
            verdicts[m.member_id] = MemberVerdict("failed", why[:REASON_CHARS])
            continue
        if not m.asked:
            # Its host answered and the module ran there: that is all a member the module is not asked
            # about can show. What the module says of the node is about another member on the same host
            # (a Slurm worker placed on the controller's host shares its node name).
            verdicts[m.member_id] = MemberVerdict("active" if own is not None and m.status == "failed" else None)
            continue
        said = [(h, *_said(answers[h], m.node)) for h in viewing if h != m.node]
        own_state, own_details = _said(own, m.node)
        details = {k: v for _, _, d in said for k, v in d.items()} | own_details
        failing = [(h, d) for h, s, d in said + [(m.node, own_state, own_details)] if s == "failed"]
        view_state = next((s for _, s, _ in said if s), None)
        if failing:
            host, d = failing[0]
            verdict = MemberVerdict("failed", str(d.get("reason") or f"{host} reports {m.node} failed")[:REASON_CHARS])
        elif view_state or own_state:
            verdict = MemberVerdict(view_state or own_state)
        elif not control_plane:
            verdict = MemberVerdict(None, message)
        else:
            verdict = MemberVerdict("failed", f"no host reported {m.node}")
        verdict.details = details
        verdicts[m.member_id] = verdict
    return Verdict(control_plane, message[:REASON_CHARS], verdicts)
