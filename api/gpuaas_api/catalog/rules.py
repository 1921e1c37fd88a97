"""Catalog rules: digest-pinned artifact references and the artifact/version state machines."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import unprocessable

# Artifact trust and promotion (seed 002): draft -> staged -> canary -> active -> deprecated -> retired,
# with canary -> staged as the rollback edge.
ARTIFACT_TRANSITIONS: dict[str, frozenset[str]] = {
    "draft": frozenset({"staged"}),
    "staged": frozenset({"canary"}),
    "canary": frozenset({"active", "staged"}),
    "active": frozenset({"deprecated"}),
    "deprecated": frozenset({"retired"}),
    "retired": frozenset(),
}

# A version is published (active) only while its artifacts are active; in canary while they are
# canary or active, it backs only instances that opted in to canary versions; a deprecated version
# stays usable by the instances already on it but cannot back a new instance. A canary artifact
# sent back to staged sends its canary versions back to draft.
VERSION_TRANSITIONS: dict[str, frozenset[str]] = {
    "draft": frozenset({"canary", "active", "deprecated"}),
    "canary": frozenset({"active", "draft", "deprecated"}),
    "active": frozenset({"deprecated"}),
    "deprecated": frozenset(),
}
# The artifact states a version in each status may stand on.
VERSION_NEEDS: dict[str, frozenset[str]] = {"active": frozenset({"active"}), "canary": frozenset({"canary", "active"})}


def version_gate(current: str, target: str, *, smoke: bool, canary_instances: int) -> str | None:
    """The gate a version's move by hand needs (docs/control-service.md "Smoke runs and canary instances"), or
    None: "smoke" where a passed smoke gate makes the move (draft -> canary; draft -> active while a smoke run is
    required), "canary" where the version must go through canary first (draft -> active while canary instances
    are required), "canary_instances" where it needs that many successful canary instances (canary -> active)."""
    if current == "draft" and target in ("canary", "active") and smoke:
        return "smoke"
    if current == "draft" and target == "active" and canary_instances:
        return "canary"
    if current == "canary" and target == "active" and canary_instances:
        return "canary_instances"
    return None

_DIGEST = re.compile(r"^(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$")
_REGISTRY = re.compile(r"^(localhost|[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+|[A-Za-z0-9-]+)(:[0-9]{1,5})?$")
_PATH_COMPONENT = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
DEFAULT_REGISTRY = "docker.io"


@dataclass(frozen=True)
class ArtifactReference:
    registry: str
    repository: str
    tag: str | None
    digest: str


def parse_reference(reference: str) -> ArtifactReference:
    """Parse `[registry/]repository[:tag]@sha256:<hex>`; anything not pinned by digest is refused."""
    name, at, digest = reference.partition("@")
    if not at:
        raise unprocessable("reference_not_pinned",
                            "artifact references must be pinned by digest (name@sha256:<64 hex>); "
                            "a reference by tag only is rejected", reference=reference)
    if not _DIGEST.match(digest):
        raise unprocessable("invalid_digest", "digest must be sha256:<64 lowercase hex> or sha512:<128 hex>",
                            reference=reference)
    parts = name.split("/")
    registry = DEFAULT_REGISTRY
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        registry = parts.pop(0)
        if not _REGISTRY.match(registry):
            raise unprocessable("invalid_reference", f"invalid registry host {registry!r}", reference=reference)
    tag = None
    if ":" in parts[-1]:
        parts[-1], tag = parts[-1].split(":", 1)
        if not _TAG.match(tag):
            raise unprocessable("invalid_reference", f"invalid tag {tag!r}", reference=reference)
    if not parts or not all(_PATH_COMPONENT.match(p) for p in parts):
        raise unprocessable("invalid_reference", "invalid repository name", reference=reference)
    return ArtifactReference(registry, "/".join(parts), tag, digest)


def check_transition(table: dict[str, frozenset[str]], kind: str, current: str, target: str) -> None:
    if target not in table:
        raise unprocessable("unknown_state", f"{target!r} is not a {kind} state", allowed=sorted(table))
    if target not in table[current]:
        raise unprocessable("illegal_transition", f"{kind} cannot move from {current} to {target}",
                            current=current, target=target, allowed=sorted(table[current]))
