"""Policy overlays: allow-lists and deny-lists per dimension at global, tenant and project scope.

Effective rule for a project: a value is allowed when no applicable deny lists it and every applicable
allow-list contains it. Intersection of allow-lists and union of denies means a lower scope can only
narrow; writing an overlay that tries to widen (allow a globally denied value, or allow beyond the
parent's allow-list) is refused outright so nobody believes it took effect.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DIMENSIONS = ("region", "capacity_shape", "sku", "artifact_registry")
SCOPE_ORDER = {"global": 0, "tenant": 1, "project": 2}


@dataclass
class Effective:
    allow: set[str] | None = None  # None: no allow-list applies, everything not denied is allowed
    deny: set[str] = field(default_factory=set)
    deny_sources: dict[str, str] = field(default_factory=dict)  # value -> scope that denied it

    def allows(self, value: str | None) -> bool:
        if value is not None and value in self.deny:
            return False
        if self.allow is None:
            return True
        return value is not None and value in self.allow


def effective(overlays: list[dict]) -> dict[str, Effective]:
    result = {d: Effective() for d in DIMENSIONS}
    for o in sorted(overlays, key=lambda o: SCOPE_ORDER[o["scope_kind"]]):
        eff = result[o["dimension"]]
        values = set(o["values"])
        if o["effect"] == "deny":
            for v in values - eff.deny:
                eff.deny_sources[v] = o["scope_kind"]
            eff.deny |= values
        else:
            eff.allow = values if eff.allow is None else eff.allow & values
    return result


def widening_problems(parent_overlays: list[dict], dimension: str, effect: str, values: list[str]) -> list[str]:
    """Why an overlay written below global would widen what its parents allow (empty: it narrows)."""
    if effect == "deny":
        return []
    parent = effective(parent_overlays)[dimension]
    problems = []
    for v in sorted(set(values)):
        if v in parent.deny:
            problems.append(f"{v!r} is denied at {parent.deny_sources.get(v, 'a parent')} scope; "
                            "a deny cannot be overridden")
        elif parent.allow is not None and v not in parent.allow:
            problems.append(f"{v!r} is outside the parent allow-list; overlays can only narrow")
    return problems


def violations(overlays: list[dict], checks: list[tuple[str, str | None, str]]) -> list[dict]:
    """checks: (dimension, value, subject). Returns one reason per refused value."""
    eff = effective(overlays)
    out = []
    for dimension, value, subject in checks:
        e = eff[dimension]
        if e.allows(value):
            continue
        if value is not None and value in e.deny:
            why = f"{dimension} {value!r} of {subject} is denied by {e.deny_sources[value]} policy"
        elif value is None:
            why = f"{subject} has no {dimension}; policy allows only {sorted(e.allow or [])}"
        else:
            why = f"{dimension} {value!r} of {subject} is not in the allowed set {sorted(e.allow or [])}"
        out.append({"check": f"policy.{dimension}", "subject": subject, "value": value, "message": why})
    return out
