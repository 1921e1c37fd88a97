"""Pure rules for app instances: status machines, the effective runtime decision, member placement
and the compatibility gate. No database access here, so they are easy to test and reuse."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from ..errors import unprocessable

# Seed 002 lifecycle. Deviations, on purpose: failed -> stopping, because decommission of a failed
# instance must still do an honest runtime teardown; failed -> starting, because a deploy that failed
# (a host was down, a package mirror hiccuped) is retried: the playbooks are idempotent.
# Day 2 (health/, docs/operations.md): `degraded` is a running instance with a failed member whose
# control plane answers; the health check moves running <-> degraded, and to failed when the control
# plane does not answer, and back (failed -> running | degraded) when a check that failed it reads it
# answering again. A run that failed on some hosts only leaves the instance degraded.
INSTANCE_TRANSITIONS: dict[str, frozenset[str]] = {
    "created": frozenset({"starting", "failed"}),
    "starting": frozenset({"running", "degraded", "failed", "stopping"}),
    "running": frozenset({"degraded", "stopping", "failed"}),
    "degraded": frozenset({"running", "stopping", "failed"}),
    "stopping": frozenset({"stopped", "failed"}),
    "failed": frozenset({"starting", "stopping", "running", "degraded"}),
    "stopped": frozenset(),
}
# Moves only a health check makes: it alone knows that the control plane answers again.
CHECK_ONLY = frozenset({("failed", "running"), ("failed", "degraded")})
INSTANCE_EVENT = {status: f"apps.instance.{status}" for status in INSTANCE_TRANSITIONS}
DELETABLE_STATUSES = frozenset({"created", "stopped"})

MEMBER_TRANSITIONS: dict[str, frozenset[str]] = {
    "pending": frozenset({"joining", "failed", "removed"}),
    "joining": frozenset({"active", "failed", "removing"}),
    "active": frozenset({"draining", "removing", "failed"}),
    "draining": frozenset({"drained", "active", "failed"}),
    "drained": frozenset({"active", "removing", "failed"}),
    "removing": frozenset({"removed", "failed"}),
    # failed -> active | draining | drained: a health check read the member serving again.
    "failed": frozenset({"joining", "active", "draining", "drained", "removing", "removed"}),
    "removed": frozenset(),
}


def member_event(before: str, after: str) -> str:
    """Timeline event type for a member status change (seed 002 names where they exist)."""
    if before == "failed" and after in ("active", "draining", "drained"):
        return "member_recovered"
    if after == "active":
        return "member_added" if before in ("pending", "joining") else "member_resumed"
    return {"joining": "member_joining", "draining": "member_draining", "drained": "member_drained",
            "removing": "member_removing", "removed": "member_removed", "failed": "member_failed"}[after]


def check_transition(table: dict[str, frozenset[str]], kind: str, current: str, target: str, *,
                     by_check: bool = False) -> None:
    if target not in table:
        raise unprocessable("unknown_state", f"{target!r} is not a {kind} status", allowed=sorted(table))
    if table is INSTANCE_TRANSITIONS and (current, target) in CHECK_ONLY and not by_check:
        raise unprocessable("illegal_transition", f"only a health check moves an instance from {current} to {target}",
                            current=current, target=target)
    if target not in table[current]:
        raise unprocessable("illegal_transition", f"{kind} cannot move from {current} to {target}",
                            current=current, target=target, allowed=sorted(table[current]))


@dataclass(frozen=True)
class Runtime:
    operating_mode: str
    control_plane_scope: str
    tenant_boundary_mode: str
    runtime_backend: str


def decide_runtime(app: dict, mode_hint: str | None, scope_hint: str | None) -> Runtime:
    """What the request asks for, within what exists (docs/tenant-shared.md "Operating modes"): tenant_dedicated,
    with a project-scope control plane or a tenant-shared one; platform_managed does not exist yet and is refused
    rather than quietly turned into something else (422 mode_not_available)."""
    if mode_hint == "platform_managed" or scope_hint == "platform":
        raise unprocessable("mode_not_available", "platform_managed (a platform-scope control plane) does not exist "
                            "yet; use tenant_dedicated with control_plane_scope project or tenant",
                            operating_mode=mode_hint, control_plane_scope=scope_hint)
    if "tenant_dedicated" not in app["operating_modes"]:
        raise unprocessable("mode_not_available", f"app {app['slug']} offers only {', '.join(app['operating_modes'])}, "
                            "which does not exist yet", offered=list(app["operating_modes"]))
    return Runtime("tenant_dedicated", scope_hint or "project", "tenant_isolated", app["runtime_backend"])


@dataclass(frozen=True)
class PlannedMember:
    role: str
    allocation_id: UUID
    host_name: str


Host = tuple[UUID, str]  # (allocation_id, host_name)


def node_names(hosts: list[Host], seqs: dict[UUID, int], named: dict[Host, str]) -> dict[Host, str]:
    """The node (inventory) name of each host of an instance, given those already `named`: the host
    name, unless another host of the instance has it already; then the allocation's number is
    appended, so `n1` of two allocations stays two hosts."""
    named = dict(named)
    used = set(named.values())
    for alloc_id, host in hosts:
        if (alloc_id, host) in named:
            continue
        name, n = host, 1
        while name in used:
            name = f"{host}-a{seqs[alloc_id]}" + (f"-{n}" if n > 1 else "")
            n += 1
        named[(alloc_id, host)] = name
        used.add(name)
    return named


def reason(check: str, message: str, **extra) -> dict:
    return {"check": check, "message": message, **{k: (str(v) if isinstance(v, UUID) else v)
                                                   for k, v in extra.items()}}


def desired_counts(adapter: dict, requested: list[dict]) -> tuple[dict[str, int], list[dict]]:
    """Desired count per adapter role: as requested, else the adapter minimum; bounds enforced."""
    roles = {r["name"]: r for r in adapter["roles"]}
    problems = []
    for r in requested:
        if r["role"] not in roles:
            problems.append(reason("topology.role", f"role {r['role']!r} is not defined by the app adapter",
                                   role=r["role"], known=sorted(roles)))
    asked = {r["role"]: r["count"] for r in requested}
    counts = {}
    for name, spec in roles.items():
        n = asked.get(name, spec["min"])
        if not spec["min"] <= n <= spec["max"]:
            problems.append(reason("topology.count",
                                   f"role {name} count {n} is outside the adapter bounds {spec['min']}..{spec['max']}",
                                   role=name, count=n, min=spec["min"], max=spec["max"]))
        counts[name] = n
    return counts, problems


def may_join(role: str, held: set[str], exclusive: set[str]) -> bool:
    """May a host that already carries the roles `held` of an instance take a member of `role`? One
    member per role per host, and a host of an exclusive role (adapter `roles[].exclusive`) carries
    no other role."""
    return role not in held and not (held and (role in exclusive or held & exclusive))


def exclusive_problems(exclusive: set[str], members: list[PlannedMember]) -> list[dict]:
    """The hosts where an exclusive role shares its host with another role of the instance."""
    held: dict[Host, list[str]] = {}
    for m in members:
        held.setdefault((m.allocation_id, m.host_name), []).append(m.role)
    return [reason("placement.exclusive", f"host {host} would carry {', '.join(sorted(roles))}; role "
                   f"{', '.join(sorted(set(roles) & exclusive))} must have its hosts to itself",
                   allocation_id=alloc_id, host_name=host, roles=sorted(roles))
            for (alloc_id, host), roles in held.items() if len(roles) > 1 and set(roles) & exclusive]


def place(counts: dict[str, int], requested: list[dict], allocations: list[dict],
          busy: set[Host], exclusive: set[str] = frozenset()) -> tuple[list[PlannedMember], list[dict]]:
    """Map logical roles onto hosts of the chosen allocations. The platform chooses hosts (round robin
    over the hosts no other instance holds, so roles spread out) unless a role names its placement
    explicitly (the caller refuses busy explicit hosts). One member per role per host; a chosen host
    of an `exclusive` role carries no other role (explicit placements are checked by the caller)."""
    hosts = [(a["id"], h["name"]) for a in allocations for h in a["hosts"]]
    known = set(hosts)
    free = [h for h in hosts if h not in busy]
    explicit = {r["role"]: r.get("placement") for r in requested if r.get("placement")}
    members, problems, cursor = [], [], 0
    for role, count in counts.items():
        if role in explicit:
            chosen = [(p["allocation_id"], p["host_name"]) for p in explicit[role]]
            if len(chosen) != count:
                problems.append(reason("placement.count", f"role {role} lists {len(chosen)} placements for "
                                       f"count {count}", role=role))
            if len(set(chosen)) != len(chosen):
                problems.append(reason("placement.duplicate", f"role {role} places two members on one host",
                                       role=role))
            for alloc_id, host in chosen:
                if (alloc_id, host) not in known:
                    problems.append(reason("placement.host", f"host {host} of allocation {alloc_id} is not in "
                                           "allocation_ids (or not a host of that allocation)",
                                           role=role, allocation_id=alloc_id, host_name=host))
            members += [PlannedMember(role, a, h) for a, h in chosen if (a, h) in known]
            continue
        if count > len(free):
            problems.append(reason("placement.capacity", f"role {role} needs {count} hosts; the chosen "
                                   f"allocations have {len(free)} free (not used by another instance)",
                                   role=role, count=count, hosts=len(free)))
            continue
        for _ in range(count):
            start = cursor % len(free)
            pick = next((h for h in free[start:] + free[:start] if may_join(role, {
                m.role for m in members if (m.allocation_id, m.host_name) == h}, exclusive)), None)
            if pick is None:
                problems.append(reason("placement.exclusive", f"role {role} needs {count} hosts; the chosen "
                                       f"allocations have too few free hosts to keep {sorted(exclusive)} on "
                                       "hosts of their own", role=role, count=count, hosts=len(free)))
                break
            members.append(PlannedMember(role, *pick))
            cursor = free.index(pick) + 1
    return members, problems


def allocation_problems(compat: dict, allocation: dict) -> list[dict]:
    """Why one allocation cannot carry this app version (empty: it can)."""
    out, name = [], allocation["name"]
    if allocation.get("released_at") is not None:
        out.append(reason("allocation.released", f"allocation {name} is released", allocation_id=allocation["id"]))
    if allocation["capacity_shape"] not in compat["requires_capacity_shape"]:
        out.append(reason("compatibility.capacity_shape",
                          f"allocation {name} is {allocation['capacity_shape']}; the app requires one of "
                          f"{compat['requires_capacity_shape']}", allocation_id=allocation["id"]))
    if allocation["gpu_count"] < compat["min_gpu_count"]:
        out.append(reason("compatibility.gpu_count",
                          f"allocation {name} has {allocation['gpu_count']} GPU(s); the app needs at least "
                          f"{compat['min_gpu_count']} per allocation", allocation_id=allocation["id"]))
    if compat["requires_exclusive_node"] and not allocation["exclusive"]:
        out.append(reason("compatibility.exclusive_node",
                          f"allocation {name} is not node-exclusive; the app requires an exclusive node",
                          allocation_id=allocation["id"]))
    return out


def topology_problems(compat: dict, members: list[PlannedMember], allocations: dict[UUID, dict]) -> list[dict]:
    """Multi-node rules (seed 002): a single-node app stays on one host, and gpu_slice networking does
    not span hosts in v1."""
    hosts = {(m.allocation_id, m.host_name) for m in members}
    if len(hosts) <= 1:
        return []
    out = []
    if not compat["multi_node"]:
        out.append(reason("compatibility.multi_node",
                          f"the topology spans {len(hosts)} hosts but the app is single-node (multi_node=false)",
                          hosts=len(hosts)))
    slices = sorted({allocations[a]["name"] for a, _ in hosts if allocations[a]["capacity_shape"] == "gpu_slice"})
    if slices:
        out.append(reason("compatibility.multi_node_gpu_slice",
                          f"the topology spans {len(hosts)} hosts but gpu_slice networking does not span nodes "
                          f"in v1 (allocations {slices})", allocations=slices))
    return out
