from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ..common import Reason, ShortText, Slug, Text
from . import parameters

ArtifactKind = Literal["oci", "launchable", "controller"]
RuntimeBackend = Literal["k8s", "slurm", "ray", "bare_metal", "oci"]
OperatingMode = Literal["tenant_dedicated", "platform_managed"]
CapacityShape = Literal["baremetal", "gpu_slice"]
ArtifactStatus = Literal["draft", "staged", "canary", "active", "deprecated", "retired"]
LifecycleAction = Literal["deploy", "member_add", "member_drain", "member_resume", "member_remove",
                          "member_replace", "reconfigure", "upgrade", "rollback", "refresh", "decommission"]
RoleName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
Playbook = Annotated[str, StringConstraints(pattern=r"^gpuaas\.apps\.[a-z][a-z0-9_]{0,63}$")]
VersionString = Annotated[str, StringConstraints(pattern=r"^[0-9A-Za-z][0-9A-Za-z.+_\-]{0,63}$")]
ReferenceString = Annotated[str, StringConstraints(min_length=1, max_length=600, pattern=r"^[\x21-\x7e]+$")]


def _bounded_json(value: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps(value)  # ensure_ascii: NUL and surrogates become escapes we can detect
    if len(text) > 65536:
        raise ValueError("must serialize to at most 64 KiB of JSON")
    if "\\u0000" in text or any(0xD800 <= ord(c) <= 0xDFFF for c in json.dumps(value, ensure_ascii=False)):
        raise ValueError("must not contain NUL characters or unpaired surrogates")
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(_bounded_json)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AppCreate(Strict):
    slug: Slug
    display_name: ShortText
    description: Text = ""
    runtime_backend: RuntimeBackend
    operating_modes: list[OperatingMode] = Field(default_factory=lambda: ["tenant_dedicated"], min_length=1,
                                                 max_length=2, description="supported; first is the default")


class App(BaseModel):
    slug: str
    display_name: str
    description: str
    runtime_backend: str
    operating_modes: list[str]
    created_at: datetime


class ArtifactCreate(Strict):
    kind: ArtifactKind
    reference: ReferenceString = Field(description="[registry/]repository[:tag]@sha256:<digest>")


class Artifact(BaseModel):
    id: UUID
    app_slug: str
    kind: str
    reference: str
    registry: str
    repository: str
    digest: str
    status: str
    created_at: datetime
    updated_at: datetime


class Compatibility(Strict):
    requires_capacity_shape: list[CapacityShape] = Field(min_length=1, max_length=2)
    min_gpu_count: int = Field(default=0, ge=0, le=1024, description="per allocation")
    requires_exclusive_node: bool = False
    multi_node: bool = Field(default=False, description="may the topology span more than one host")
    shares_hosts: bool = Field(default=False, description="may a host carry members of other instances too "
                               "(only of versions that share hosts); default: a host serves one instance")


class AdapterRole(Strict):
    name: RoleName
    min: int = Field(ge=0, le=1024)
    max: int = Field(ge=1, le=1024)
    description: Text = ""

    @model_validator(mode="after")
    def _bounds(self):
        if self.min > self.max:
            raise ValueError("min must not exceed max")
        return self


class AdapterDescriptor(Strict):
    """Which roles exist (with their count bounds), which playbook runs for each lifecycle action, and
    the parameters tenants may set (a JSON Schema; see catalog/parameters.py)."""
    roles: list[AdapterRole] = Field(min_length=1, max_length=16)
    actions: dict[LifecycleAction, Playbook]
    parameters: JsonObject = Field(
        default_factory=lambda: dict(parameters.NO_PARAMETERS),
        description='JSON Schema of the tenant parameters: {"type": "object", "additionalProperties": false, '
                    '"properties": {...}}; default: none may be set')

    @model_validator(mode="after")
    def _complete(self):
        names = [r.name for r in self.roles]
        if len(set(names)) != len(names):
            raise ValueError("role names must be unique")
        missing = {"deploy", "decommission"} - set(self.actions)
        if missing:
            raise ValueError(f"actions must include {sorted(missing)}")
        return self


class VersionCreate(Strict):
    version: VersionString
    artifact_id: UUID
    compatibility: Compatibility
    runtime_profile: JsonObject = Field(default_factory=dict,
                                        description="image, ports, env, resources; never secret values")
    adapter: AdapterDescriptor

    @model_validator(mode="after")
    def _variables(self):
        """The catalog's own variables obey the tenant parameters' naming rules, and the parameter
        schema is valid and declares no name the platform or Ansible owns."""
        platform_vars = parameters.adapter_variables(self.runtime_profile)
        ansible = self.runtime_profile.get("ansible") or {}
        named = [("runtime_profile.extra_vars", n) for n in self.runtime_profile.get("extra_vars") or {}]
        for kind, action_vars in (ansible.get("action_vars") or {}).items():
            named += [(f"runtime_profile.ansible.action_vars.{kind}", n) for n in action_vars or {}]
        problems = [f"{where} sets {name!r}, which {why}" for where, name in named
                    if (why := parameters.name_problem(name, platform_vars))]
        problems += [f"adapter.parameters {p}" for p in parameters.schema_problems(self.adapter.parameters,
                                                                                    platform_vars)]
        if problems:
            raise ValueError("; ".join(problems))
        return self


class Version(BaseModel):
    id: UUID
    app_slug: str
    version: str
    artifact_id: UUID
    artifact_reference: str
    artifact_status: str
    compatibility: Compatibility
    runtime_profile: dict[str, Any]
    adapter: AdapterDescriptor
    status: str
    created_at: datetime
    updated_at: datetime


class ArtifactTransition(Strict):
    to: ArtifactStatus
    reason: Reason


class VersionTransition(Strict):
    to: Literal["draft", "active", "deprecated"]
    reason: Reason
