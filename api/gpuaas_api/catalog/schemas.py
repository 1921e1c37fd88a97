from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from cryptography.hazmat.primitives import serialization
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from ..common import Reason
from .adapter import (  # noqa: F401 (RoleName: re-exported)
    AdapterSpec,
    AppInfo,
    Compatibility,
    MediaType,
    RoleName,
    VariableName,
    VersionString,
)

# collection: an Ansible collection build, its content in the platform's content store
# file: a file by digest (`<name>@sha256:<hex>`), in the content store or behind an allowlisted source URL
ArtifactKind = Literal["oci", "launchable", "controller", "collection", "file"]
ArtifactStatus = Literal["draft", "staged", "canary", "active", "deprecated", "retired"]
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


class AppCreate(AppInfo):
    """An app as the catalog creates it: what a descriptor file names, and the catalog it goes into."""
    tenant_id: UUID | None = Field(default=None, description="the tenant whose private app this is, seen and used "
                                   "only inside it (its slug starts with the tenant's name and a dash); absent: "
                                   "the platform catalog")


class App(BaseModel):
    slug: str
    tenant_id: UUID | None = Field(default=None, description="the tenant whose private app this is; null: a "
                                   "platform app")
    display_name: str
    description: str
    runtime_backend: str
    operating_modes: list[str]
    created_at: datetime


class ArtifactCreate(Strict):
    kind: ArtifactKind
    reference: ReferenceString = Field(description="[registry/]repository[:tag]@sha256:<digest>")
    signer_public_key: str | None = Field(
        default=None, max_length=8192, description="PEM public key the artifact's sigstore signature must verify "
        "with; hosts that pull it enforce it (containers policy.json sigstoreSigned)")
    source: str | None = Field(default=None, max_length=2048, description="file: the URL the hosts fetch the bytes "
                               "from, under a prefix of the operator's file_artifact_sources; absent: the content "
                               "store holds them (PUT /v1/content/{digest} first)")
    size: int | None = Field(default=None, ge=0, le=1 << 62, description="file with a source: its size in bytes, "
                             "if known (hosts refuse more); a content-store file's is the stored size")
    media_type: MediaType | None = Field(default=None, description="file: what the bytes are, e.g. "
                                         "application/octet-stream")

    @model_validator(mode="after")
    def _file_fields(self):
        if self.kind != "file" and (self.source or self.size is not None or self.media_type):
            raise ValueError("source, size and media_type are for file artifacts")
        return self

    @field_validator("signer_public_key")
    @classmethod
    def _a_public_key(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                serialization.load_pem_public_key(value.encode())
            except (ValueError, TypeError):
                raise ValueError("must be a PEM public key (-----BEGIN PUBLIC KEY-----)") from None
        return value


class Artifact(BaseModel):
    id: UUID
    app_slug: str
    kind: str
    reference: str
    registry: str
    repository: str
    digest: str
    status: str
    signer_public_key: str | None = None
    size: int | None = None
    media_type: str | None = None
    source: str | None = None
    created_at: datetime
    updated_at: datetime
    status_changed_at: datetime | None = Field(default=None, description="when it entered its status (retirement "
                                                "waits promotion_retire_grace_seconds after deprecation)")


class VersionCreate(Strict):
    version: VersionString
    artifact_id: UUID = Field(description="the collection build every run of this version executes")
    workload_artifact_id: UUID | None = Field(default=None, description="the artifact the app runs (its OCI image, "
                                              "by digest): required when the adapter declares a workload")
    files: dict[VariableName, UUID] = Field(default_factory=dict, max_length=16, description="the file artifact "
                                            "for each name of the adapter's files section (every required one)")
    compatibility: Compatibility | None = Field(default=None, description="default: the adapter's compatibility")
    runtime_profile: JsonObject = Field(default_factory=dict,
                                        description="image, ports, env, resources; never secret values")
    adapter: AdapterSpec

    @model_validator(mode="after")
    def _compatibility(self):
        self.compatibility = self.compatibility or self.adapter.compatibility
        if self.compatibility is None:
            raise ValueError("compatibility is required (here or in the adapter spec)")
        return self


class PinnedFile(BaseModel):
    artifact_id: UUID
    reference: str
    digest: str
    status: str
    size: int | None = None
    media_type: str | None = None
    source: str | None = None


class Version(BaseModel):
    id: UUID
    app_slug: str
    version: str
    artifact_id: UUID
    artifact_reference: str
    artifact_status: str
    workload_artifact_id: UUID | None = None
    workload_artifact_reference: str | None = None
    workload_artifact_status: str | None = None
    files: dict[str, PinnedFile] = Field(default_factory=dict, description="the file artifacts the version pins, "
                                         "by the adapter's names")
    compatibility: Compatibility
    runtime_profile: dict[str, Any]
    adapter: AdapterSpec
    status: str
    created_at: datetime
    updated_at: datetime

    @field_validator("adapter", mode="wrap")
    @classmethod
    def _as_stored(cls, value, handler):
        """A stored spec is shown as stored, even one that today's checks refuse (written by an older
        release or past the API): reading the catalog never fails; using the version answers 409."""
        try:
            return handler(value)
        except ValidationError:
            return AdapterSpec.model_validate(value, context={"as_stored": True})


class ArtifactTransition(Strict):
    to: ArtifactStatus
    reason: Reason
    skip_gates: bool = Field(default=False, description="move past the gates this move answers to (a collection "
                             "build's staging gate, the retire grace period): apps.catalog.gates.skip (platform "
                             "admins), recorded as gate.skipped")


class StagingGateCreate(Strict):
    """The staging gate of a draft collection artifact: the platform's checks on its exact build (descriptor,
    ansible-lint production profile, ansible-test sanity); a pass makes the artifact staged."""
    kind: Literal["staging"] = "staging"
    reason: Reason


class CatalogEvent(BaseModel):
    """One event of an app's catalog timeline (a gate's start and outcome, a skipped gate)."""
    id: int
    app_slug: str
    artifact_id: UUID | None = None
    app_version_id: UUID | None = None
    gate_id: UUID | None = None
    type: str
    payload: dict[str, Any]
    correlation_id: str
    occurred_at: datetime


class VersionTransition(Strict):
    to: Literal["draft", "canary", "active", "deprecated"]
    reason: Reason
    skip_gates: bool = Field(default=False, description="move past the gates this move answers to (smoke run, "
                             "canary instances): apps.catalog.gates.skip (platform admins), recorded as gate.skipped")


class SmokeRole(Strict):
    role: RoleName
    count: int = Field(ge=0, le=1024)


class SmokeGateCreate(Strict):
    """A smoke run of a draft version: one instance of it on the named allocations of a project, deployed and
    decommissioned through the ordinary operation path; a pass makes the version canary."""
    kind: Literal["smoke"] = "smoke"
    project_id: UUID = Field(description="the project the smoke instance lives in (the caller creates, deploys and "
                             "decommissions instances there, and the project is entitled to the app)")
    allocation_ids: list[UUID] = Field(min_length=1, max_length=64, description="the project's allocations the "
                                       "smoke instance is placed on")
    topology: list[SmokeRole] = Field(default_factory=list, max_length=16,
                                      description="count per role; absent roles get the adapter minimum")
    parameters: JsonObject = Field(default_factory=dict, description="the smoke instance's parameters, checked "
                                   "against the version's schema; never secret values")
    reason: Reason


class Gate(BaseModel):
    """One run of the checks a promotion step needs (docs/control-service.md "Promotion gates")."""
    id: UUID
    kind: Literal["staging", "smoke"]
    app_slug: str
    artifact_id: UUID
    app_version_id: UUID | None = None
    status: Literal["queued", "running", "passed", "failed"]
    checks: list[dict[str, Any]] = Field(default_factory=list)
    smoke: dict[str, Any] | None = Field(default=None, description="smoke: what the publisher named and what ran "
                                         "(the instance, its operations and their outcomes)")
    reason: str | None = None
    correlation_id: str
    requested_by_kind: str
    requested_by: UUID | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
