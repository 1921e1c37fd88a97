"""The adapter spec: everything the platform needs to know about one app to run it, typed.

An app's collection ships it as a descriptor file (`adapters/<app>.yml`, an `AppDescriptor`); the
catalog stores the `AdapterSpec` part with each app version and validates it here. The core reads
roles, groups, playbooks, target variables, secrets, parameters, status read-back and credentials only
from it, so nothing in core knows a scheduler. Its JSON Schema is published as docs/adapter-spec.schema.json.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, ValidationInfo, model_validator

from ..common import ShortText, Slug, Text
from ..errors import conflict
from ..operations.kinds import ACTION_KINDS
from . import parameters

ActionKind = Literal[ACTION_KINDS]  # every operation kind that runs a playbook
RuntimeBackend = Literal["k8s", "slurm", "ray", "bare_metal", "oci"]
OperatingMode = Literal["tenant_dedicated", "platform_managed"]
CapacityShape = Literal["baremetal", "gpu_slice"]
RoleName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
GroupName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
VariableName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
# namespace.collection.name: a playbook or a module of the app's own collection
_NAME = r"[a-z][a-z0-9_]{0,63}"
ContentName = Annotated[str, StringConstraints(pattern=rf"^{_NAME}\.{_NAME}\.{_NAME}$")]
VersionString = Annotated[str, StringConstraints(pattern=r"^[0-9A-Za-z][0-9A-Za-z.+_\-]{0,63}$")]
# A credential's name: a path segment of POST /v1/instances/{id}/credentials/{name}.
CredentialName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,63}$")]
MediaType = Annotated[str, StringConstraints(pattern=r"^[a-z]+/[a-z0-9][a-z0-9.+-]{0,99}$")]
FileName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
# Kinds whose request names members, and the target variables each needs.
TARGETS_NEEDED: dict[str, tuple[str, ...]] = {
    "member_add": ("members",), "member_drain": ("members",), "member_resume": ("members",),
    "member_remove": ("members",), "member_replace": ("old", "new")}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


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
    groups: list[GroupName] = Field(default_factory=list, max_length=8,
                                    description="inventory groups of the role's hosts; default: the role name")
    exclusive: bool = Field(default=False, description="a host of this role carries no other role of the instance")
    description: Text = ""

    @model_validator(mode="after")
    def _bounds(self):
        if self.min > self.max:
            raise ValueError(f"role {self.name}: min must not exceed max")
        return self

    def inventory_groups(self) -> list[str]:
        return self.groups or [self.name]


class Targets(Strict):
    """The variables that carry an operation's targets to its playbook (node names, comma-separated)."""
    members: VariableName | None = None
    old: VariableName | None = None
    new: VariableName | None = None
    unreachable: VariableName | None = Field(
        default=None, description="the leaving targets (member_remove's members, member_replace's old) whose "
        "hosts the platform's last health check found unreachable: the playbook must not connect to them, and "
        "must make the rest of the instance forget them. Set by the platform alone, never by a tenant")


class SecretSpec(Strict):
    """A per-instance secret the platform generates once and hands to every run under its name."""
    kind: Literal["random_bytes", "token", "keypair", "registry_credential"]
    size: int = Field(default=32, ge=16, le=4096,
                      description="random_bytes: bytes (base64 in the variable); token: bytes of entropy")


class StatusSpec(Strict):
    """The status read-back, which refresh and the scheduled health check run: `module` on the hosts of
    `role` (the instance's view of every member) and of `host_roles` (each answering for the members on
    it alone: a dead daemon the view cannot see yet), with `options` (templated per host) and `members`
    (the node names of the members of `member_roles`). The module returns `member_states`: node name ->
    active | draining | drained | failed, for the members it judges, and `member_details`: node name ->
    the runtime detail of that member (at most 16 scalar values; `reason` says why a member is failed).
    A member no host names is failed; a member on an unreachable host is failed; `failed` from any host
    wins, otherwise the view of `role` decides."""
    module: ContentName
    role: RoleName
    member_roles: list[RoleName] = Field(default_factory=list, description="default: every role")
    host_roles: list[RoleName] = Field(default_factory=list, description="roles whose hosts also run the "
                                       "module, each answering for its own members")
    options: dict[VariableName, str | int | bool] = Field(default_factory=dict,
                                                         description="further module options, set by the catalog")


class CredentialSpec(Strict):
    """A runtime access credential of the app (an admin client configuration, say) that a tenant fetches through
    `POST /v1/instances/{id}/credentials/{name}`: `module` runs ad hoc, as the status read-back does, on one live
    member of `role` at a time until one answers, with `options` (templated per host; no tenant values). Its
    return value `result_key` is the content, answered once, audited, and never stored, logged or kept in a file."""
    description: Text = ""
    module: ContentName
    role: RoleName
    options: dict[VariableName, str | int | bool] = Field(default_factory=dict,
                                                         description="module options, set by the catalog")
    result_key: VariableName = Field(description="the module's return key that holds the content (a string)")
    media_type: MediaType = Field(description="what the content is, e.g. application/yaml")
    filename: FileName = Field(description="the file name a client suggests for it, e.g. config.yaml")


class WorkloadSpec(Strict):
    """What the app runs besides its collection: every version pins one artifact of `artifact_kind`
    (an OCI image), by its own digest, and each run gets it in `variable` as
    `registry/repository@sha256:<hex>`."""
    artifact_kind: Literal["oci"]
    variable: VariableName
    signer_key_variable: VariableName | None = Field(
        default=None, description="receives the PEM public key the artifact's signature must verify with, when "
        "the catalog records one; the app's hosts enforce it")
    pull_credential_variable: VariableName | None = Field(
        default=None, description="receives {registry, username, password}: a credential issued for the run "
        "alone, good only for pulling the artifact's repository (when the platform authorizes pulls from "
        "its registry); absent otherwise")


# An absolute path in a container, made of plain names (no `.` or `..` component, no `:`, `,` or spaces).
ContainerPath = Annotated[str, StringConstraints(max_length=255, pattern=r"^(/[A-Za-z0-9_][A-Za-z0-9._-]*)+$")]


class FileNeed(Strict):
    """One file the app's runs need, by a name of the adapter's: each version pins a `file` artifact for it."""
    required: bool = Field(default=True, description="a version that pins no file for it is refused")
    mount: ContainerPath | None = Field(default=None, description="where the app's workload sees the file, "
                                        "read-only (an OCI app mounts it there); none: the playbook uses its path")
    description: Text = ""


class FilesSpec(Strict):
    """Files addressed by digest (model weights, a data set, a script) that every run places on the hosts: each
    version pins a `file` artifact per name of `needs`, and each run gets, in `variable`, a mapping of those names
    to {name, digest, size, media_type, path, mount, src | url}: `path` the content-addressed place on the host
    (computed from the digest, never from tenant values), `src` the worker's verified copy on the control node
    (content-store files) or `url` the source the hosts fetch it from. The collection verifies the digest on the
    host before it uses the file."""
    variable: VariableName
    needs: dict[VariableName, FileNeed] = Field(min_length=1, max_length=16)


class SchedulerSpec(Strict):
    """How the runtime serves the tenant-facing jobs and nodes routes (docs/scheduler.md): a gateway the app's
    collection runs on the first serving host of `role`, listening on `port`, speaking the platform's one
    scheduler protocol. The platform signs each request with the instance secret `key`; the gateway maps the
    generic job and node model to its runtime and back, and runs each job as the caller's runtime identity."""
    role: RoleName
    port: int = Field(ge=1, le=65535)
    key: VariableName = Field(description="a `secrets` entry of kind token: the HMAC key of the platform's requests")
    node_operations: list[Literal["drain", "resume", "features"]] = Field(
        default_factory=list, description="the node operations the runtime has")


class AccessSpec(Strict):
    """The access map (docs/scheduler.md): every run gets, under `variable`, the runtime accounts of the
    projects using the instance and the runtime identities of their principals (Unix user, uid, account,
    login and SSH keys); actions.access_sync applies a changed map. People log in to the hosts of
    `login_role`."""
    variable: VariableName
    login_role: RoleName


class HealthSpec(Strict):
    proof: ShortText | None = Field(default=None, description="what a successful deploy proves about the app "
                                    "(documentation: healthy events come from the health check alone)")


class AdapterSpec(Strict):
    roles: list[AdapterRole] = Field(min_length=1, max_length=16)
    actions: dict[ActionKind, ContentName] = Field(description="the playbook each operation kind runs")
    targets: Targets = Field(default_factory=Targets)
    secrets: dict[VariableName, SecretSpec] = Field(default_factory=dict, max_length=16)
    vars: dict[VariableName, Any] = Field(default_factory=dict, description="the catalog's own variables for "
                                          "every run of this version (e.g. exact package versions)")
    action_vars: dict[ActionKind, dict[VariableName, Any]] = Field(default_factory=dict)
    parameters: dict[str, Any] = Field(
        default_factory=lambda: dict(parameters.NO_PARAMETERS),
        description='JSON Schema of what a tenant may set: {"type": "object", "additionalProperties": false, '
                    '"properties": {...}}; default: nothing')
    status: StatusSpec | None = None
    credentials: dict[CredentialName, CredentialSpec] = Field(
        default_factory=dict, max_length=16, description="runtime access credentials a tenant may fetch by name")
    workload: WorkloadSpec | None = Field(default=None, description="the artifact each version pins for the "
                                          "app to run (e.g. its OCI image); none for apps that are only a collection")
    files: FilesSpec | None = Field(default=None, description="files by digest the version pins and every run "
                                    "places on the hosts (file artifacts)")
    scheduler: SchedulerSpec | None = Field(default=None, description="the jobs and nodes routes' gateway")
    access: AccessSpec | None = Field(default=None, description="runtime identities and logins for the "
                                      "project's people (needs actions.access_sync)")
    health: HealthSpec | None = None
    cleanup: ContentName | None = Field(
        default=None, description="the playbook that cleans a host a forced removal left behind (its host was "
        "unreachable), run once the host answers again: its node name in targets.members, the host in its "
        "role's groups beside the instance's live members (for an app that must forget a host that registered "
        "itself again); it touches that host and at most one live member")
    compatibility: Compatibility | None = Field(default=None, description="the version's default compatibility")

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo):
        if (info.context or {}).get("as_stored"):  # showing a stored spec (schemas.Version), not accepting one
            return self
        problems = []
        names = [r.name for r in self.roles]
        if len(set(names)) != len(names):
            problems.append("role names must be unique")
        missing = {"deploy", "decommission"} - set(self.actions)
        if missing:
            problems.append(f"actions must include {sorted(missing)}")
        for kind, needed in TARGETS_NEEDED.items():
            lacking = [t for t in needed if kind in self.actions and getattr(self.targets, t) is None]
            if lacking:
                problems.append(f"action {kind} needs targets.{' and targets.'.join(lacking)}")
        if self.status:
            for role in [self.status.role, *self.status.member_roles, *self.status.host_roles]:
                if role not in names:
                    problems.append(f"status names role {role!r}, which is not in roles")
        problems += [f"credentials.{name} names role {c.role!r}, which is not in roles"
                     for name, c in self.credentials.items() if c.role not in names]
        problems += self._runtime_access_problems(names)
        platform_vars = self.platform_variables()
        if len(platform_vars) != (len(self.secrets) + len(self.target_variables()) + len(self.workload_variables())
                                  + (1 if self.access else 0) + (1 if self.files else 0)):
            problems.append("the secrets, target variables, workload variables, access variable and files variable "
                            "must have distinct names")
        for name in platform_vars:
            if (why := parameters.name_problem(name, set())) is not None:
                problems.append(f"variable {name!r} {why}")
        named = [("vars", n) for n in self.vars]
        named += [(f"action_vars.{kind}", n) for kind, values in self.action_vars.items() for n in values]
        problems += [f"{where} sets {name!r}, which {why}" for where, name in named
                     if (why := parameters.name_problem(name, platform_vars))]
        problems += [f"parameters {p}" for p in parameters.schema_problems(self.parameters, platform_vars)]
        problems += self._content_problems()
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _runtime_access_problems(self, names: list[str]) -> list[str]:
        problems = []
        if self.scheduler:
            if self.scheduler.role not in names:
                problems.append(f"scheduler names role {self.scheduler.role!r}, which is not in roles")
            key = self.secrets.get(self.scheduler.key)
            if key is None or key.kind != "token":
                problems.append(f"scheduler.key {self.scheduler.key!r} must name a secret of kind token")
        if self.access:
            if self.access.login_role not in names:
                problems.append(f"access names role {self.access.login_role!r}, which is not in roles")
            if "access_sync" not in self.actions:
                problems.append("access needs actions.access_sync, the run that applies a changed access map")
        return problems

    def _content_problems(self) -> list[str]:
        """The playbooks, the status module and the credential modules come from one collection, the app's
        own (the one actions.deploy names), never from Ansible's (ansible.*): a status module such as
        ansible.builtin.shell would run whatever the catalog's options say on the app's hosts.
        `gpuaas apps register` also checks that this collection is the build's and ships them."""
        deploy = self.actions.get("deploy")
        if deploy is None:  # reported above
            return []
        collection = deploy.rpartition(".")[0]
        if collection.split(".")[0] == "ansible":
            return [f"actions.deploy {deploy!r} is in Ansible's own namespace, not in an app's collection"]
        named = [(f"actions.{kind}", name) for kind, name in self.actions.items()]
        named += [("status.module", self.status.module)] if self.status else []
        named += [(f"credentials.{name}.module", c.module) for name, c in self.credentials.items()]
        named += [("cleanup", self.cleanup)] if self.cleanup else []
        return [f"{where} {name!r} is not in the app's collection ({collection}, which actions.deploy names)"
                for where, name in named if name.rpartition(".")[0] != collection]

    def target_variables(self) -> set[str]:
        return {v for v in self.targets.model_dump().values() if v}

    def platform_variables(self) -> set[str]:
        """Variables the platform sets for a run: operation targets, secrets, the workload artifact, the access
        map and the files."""
        return (self.target_variables() | set(self.secrets) | self.workload_variables()
                | ({self.access.variable} if self.access else set()) | ({self.files.variable} if self.files else set()))

    def workload_variables(self) -> set[str]:
        w = self.workload
        return {v for v in (w.variable, w.signer_key_variable, w.pull_credential_variable) if v} if w else set()

    def role(self, name: str) -> AdapterRole | None:
        return next((r for r in self.roles if r.name == name), None)


class AppInfo(Strict):
    slug: Slug
    display_name: ShortText
    description: Text = ""
    runtime_backend: RuntimeBackend
    operating_modes: list[OperatingMode] = Field(default_factory=lambda: ["tenant_dedicated"], min_length=1,
                                                 max_length=2)


class AppDescriptor(AdapterSpec):
    """The file an app's collection ships (`adapters/<app>.yml`): the app, the version this build is,
    and its adapter spec."""
    app: AppInfo
    version: VersionString

    def spec(self) -> AdapterSpec:
        return AdapterSpec.model_validate(self.model_dump(exclude={"app", "version"}))


def stored_spec(version: dict) -> AdapterSpec:
    """An app_versions row's adapter spec, under today's catalog checks. One stored before them (or
    written past the API) is refused as `version_not_usable`, never a 500, wherever a tenant's request
    or a run reads it."""
    try:
        return AdapterSpec.model_validate(version["adapter"])
    except ValidationError as exc:
        raise conflict("version_not_usable", f"version {version['version']}'s adapter spec or parameter schema "
                       f"fails the catalog's checks ({exc.errors()[0]['msg']}); the catalog must publish a "
                       "corrected version") from None
