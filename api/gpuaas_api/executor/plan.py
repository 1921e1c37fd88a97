"""What one run needs, computed from the database and the app version's adapter spec
(catalog/adapter.py): the collection content to run (by digest), the playbook (or the status module
for refresh, or a credential's module), an inventory of the instance's members on their allocation
hosts, extra vars and secret vars.

The inventory is the instance's (instances/inventory.py, the same one operators and AWX get), with
the platform's SSH key. Extra vars, later ones winning:
the site's variables (the operator's `site_vars` setting, in a file of their own that Ansible may template),
the spec's vars, the tenant parameters (the instance's, with a reconfigure request's merged over them;
checked against the version's declared schema), the spec's action_vars[kind], the version's workload
artifact (`registry/repository@digest`) under the spec's workload variable and its signer's public key
under the signer key variable, the version's files (catalog/files.py) under the spec's files variable, the
access map (access/service.py) under the spec's access variable, then the operation's targets under the
spec's target variables. The runner hands all of them to Ansible as unsafe.

Secret vars: the instance's secrets and, under the workload's pull credential variable, a per-run credential of the
platform's registry (registry/credentials.py) or the credentials of the instance's own tenant's private registry
(registry/tenant.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from uuid import UUID

import psycopg

from ..access import service as access
from ..catalog import files, parameters
from ..catalog.adapter import AdapterSpec, CredentialSpec, stored_spec
from ..catalog.service import get_version_by_id, workload_image
from ..config import OperationSettings
from ..content.store import embedded_store
from ..errors import not_found, unprocessable
from ..health.verdict import HostAnswer, MemberView, Verdict, judge
from ..instances import inventory
from ..registry import credentials
from ..registry import tenant as tenant_registries
from ..secrets import service as secrets

# Members that take part in a run: live ones, plus the operation's own targets (a joining or a
# leaving member), plus every non-removed member for a decommission (tear down all of it).
LIVE = ("joining", "active", "draining", "drained", "removing")
# The target that names the members an operation kind takes out of the instance.
LEAVING_TARGET = {"member_remove": "members", "member_replace": "old"}
# Members that may answer for a running cluster (a credential's read): serving ones, active first.
SERVING = ("active", "draining", "drained")


@dataclass
class RunPlan:
    kind: str
    inventory: dict
    extravars: dict
    secret_vars: dict = field(repr=False)
    # the collection content the run executes: the version's artifact digest (sha256:<hex>), or None
    # when the artifact is not a collection build (nothing can run then)
    content_digest: str | None = None
    playbook: str | None = None
    module: str | None = None
    module_args: str = ""
    host_pattern: str = ""
    # refresh: which member each node name stands for, the hosts of the status role (the instance's view)
    # and every host the module runs on
    node_members: dict[str, str] = field(default_factory=dict)
    view_hosts: list[str] = field(default_factory=list)
    checked_hosts: list[str] = field(default_factory=list)
    member_views: list[MemberView] = field(default_factory=list)
    # member_remove, member_replace: the ids of the leaving targets the run is told to leave alone
    forced: list[str] = field(default_factory=list)
    secret_strings: list[str] = field(default_factory=list, repr=False)
    # the operator's site_vars, below every other extra var (site_vars_for)
    site_vars: dict = field(default_factory=dict)
    # the version's content-store files (catalog/files.py): the worker holds a verified copy of each before the run
    file_digests: list[str] = field(default_factory=list)


def _targets(op: dict, by_id: dict) -> dict[str, list[str]]:
    """The operation's targets by name (members, old, new) as node names."""
    targets = op["params"].get("targets") or {}
    return {name: [by_id[UUID(str(m))]["node_name"] for m in ids if UUID(str(m)) in by_id]
            for name, ids in targets.items()}


def _members(conn: psycopg.Connection, instance_id: UUID, statuses: list[str], also: list) -> list[dict]:
    return conn.execute(
        """SELECT m.*, (SELECT h FROM jsonb_array_elements(al.hosts) h WHERE h->>'name' = m.host_name LIMIT 1) AS host
             FROM app_instance_members m JOIN allocations al ON al.id = m.allocation_id
            WHERE m.instance_id = %s AND m.status <> 'removed' AND (m.status = ANY(%s) OR m.id = ANY(%s))
            ORDER BY m.seq""", (instance_id, statuses, also)).fetchall()


def live_members(conn: psycopg.Connection, instance_id: UUID) -> list[dict]:
    return _members(conn, instance_id, list(LIVE), [])


def build(conn: psycopg.Connection, settings: OperationSettings, op: dict, instance: dict) -> RunPlan:
    kind = op["kind"]
    if kind == "refresh":
        return status_plan(conn, settings, instance)
    target_version = op["params"].get("target_version_id")
    version = get_version_by_id(conn, UUID(target_version) if target_version else instance["app_version_id"])
    spec = stored_spec(version)
    statuses = list(LIVE) + (["pending", "failed"] if kind == "decommission" else [])
    members = _members(conn, instance["id"], statuses, op["member_ids"])
    run_inventory = _inventory(settings, spec, instance, members)
    tenant_vars = (instance["parameters"] or {}) | (op["params"].get("request", {}).get("parameters", {})
                                                    if kind == "reconfigure" else {})
    extravars = instance_vars(version, spec, tenant_vars, kind)
    by_id = {m["id"]: m for m in members}
    extravars |= {getattr(spec.targets, name): ",".join(nodes)
                  for name, nodes in _targets(op, by_id).items()
                  if getattr(spec.targets, name, None) and nodes}
    extravars |= access_vars(conn, spec, instance)
    unreachable = unreachable_targets(op, by_id) if spec.targets.unreachable else []
    if unreachable:
        extravars[spec.targets.unreachable] = ",".join(m["node_name"] for m in unreachable)
    plan = RunPlan(kind=kind, inventory=run_inventory, extravars=extravars, secret_vars={},
                   content_digest=version["artifact_digest"] if version["artifact_kind"] == "collection" else None,
                   forced=[str(m["id"]) for m in unreachable], site_vars=site_vars_for(settings, spec))
    if spec.files:
        # Only the path of this machine's copy is computed here (no read): the run's content step
        # (executor/content.run_file_copies, with the database) fetches and verifies each copy before a host is touched.
        store = embedded_store(settings.state_dir)
        extravars[spec.files.variable], plan.file_digests = files.run_files(
            version, spec, settings.file_artifact_sources, store.local_path)
    plan.playbook = spec.actions.get(kind)
    if plan.playbook is None:
        raise unprocessable("no_playbook", f"the app version's adapter names no playbook for {kind}")
    plan.secret_vars = instance_secret_vars(conn, settings, instance, spec)
    workload = spec.workload
    if workload and workload.pull_credential_variable and \
            version["workload_artifact_registry"] in settings.pull_credential_registries:
        plan.secret_vars[workload.pull_credential_variable] = credentials.issue(
            conn, instance, op["id"], version["workload_artifact_registry"],
            version["workload_artifact_repository"], ttl_seconds=settings.timeouts[kind])
    elif workload and workload.pull_credential_variable:
        # The image may be in a private registry of the instance's own tenant (registry/tenant.py): its credentials.
        pull = tenant_registries.run_credential(conn, settings, instance, version, op.get("id"))
        if pull:
            plan.secret_vars[workload.pull_credential_variable] = pull
    plan.secret_strings = [t for v in plan.secret_vars.values() for t in secrets.secret_strings(v)]
    return plan


def instance_vars(version: dict, spec: AdapterSpec, tenant_vars: dict, kind: str | None) -> dict:
    """The run's variables that come from the app version and the instance, later ones winning: the spec's vars,
    the tenant parameters (checked again: the version may have changed since they were accepted), the spec's
    action_vars[kind], the workload artifact and its signer's key. Every run of `kind` gets them (build), and the
    instance's inventory carries them for AWX (instances/run_vars.py); `kind` None: no action's variables."""
    parameters.validate_for_version(version, tenant_vars)
    variables = dict(spec.vars) | tenant_vars | (spec.action_vars.get(kind, {}) if kind else {})
    if spec.workload:
        variables[spec.workload.variable] = workload_image(version)
        if spec.workload.signer_key_variable and version["workload_signer_public_key"]:
            variables[spec.workload.signer_key_variable] = version["workload_signer_public_key"]
    return variables


def access_vars(conn: psycopg.Connection, spec: AdapterSpec, instance: dict) -> dict:
    """The access map (access/service.py) under the adapter's access variable, {} without `access:`: computed when
    asked, so a run queued earlier carries every change made since (build; AWX through the run-secrets route)."""
    return {spec.access.variable: access.access_map(conn, instance)} if spec.access else {}


def instance_secret_vars(conn: psycopg.Connection, settings: OperationSettings, instance: dict,
                         spec: AdapterSpec) -> dict:
    """The instance's secrets as run variables (made on first use, kept across runs): every run gets them (build),
    and AWX reads them through the audited run-secrets route (instances/run_vars.py), never through an inventory."""
    secret_specs = {name: s.model_dump() for name, s in spec.secrets.items()}
    secrets.ensure(conn, settings, instance["id"], secret_specs)
    stored = secrets.load(conn, settings, instance["id"])
    return {name: secrets.as_variable(secret_specs[name], stored[name]) for name in secret_specs}


def site_vars_for(settings: OperationSettings, spec: AdapterSpec) -> dict:
    """The operator's site_vars for a run of this adapter. A site variable may sit below the catalog's vars
    (they win), never in place of what the platform or a tenant sets: a secret, an operation target, a
    workload variable or a declared parameter of the adapter refuses the run (422 site_vars_conflict)."""
    taken = spec.platform_variables() | set(spec.parameters.get("properties") or {})
    clash = sorted(set(settings.site_vars) & taken)
    if clash:
        raise unprocessable("site_vars_conflict", f"the site_vars setting sets {', '.join(clash)}, which this app "
                            "version's adapter declares as a secret, target, workload variable or parameter: "
                            "remove it from site_vars", variables=clash)
    return dict(settings.site_vars)


def unreachable_targets(op: dict, by_id: dict) -> list[dict]:
    """The leaving targets (member_remove's members, member_replace's old) that are failed with a host the
    platform's last health check could not reach: the run is told to leave those hosts alone. The
    platform decides this from its own record; no request can ask for it."""
    if op["kind"] not in LEAVING_TARGET:
        return []
    leaving = [by_id.get(UUID(str(m))) for m in (op["params"].get("targets") or {}).get(LEAVING_TARGET[op["kind"]], [])]
    return [m for m in leaving if m and m["status"] in ("failed", "removing")
            and (m["runtime"] or {}).get("reachable") is False]


def status_plan(conn: psycopg.Connection, settings: OperationSettings, instance: dict) -> RunPlan:
    """The status read-back (refresh and the health check): the adapter's status module on the hosts of
    its status role and host roles, asked about the live and failed members of its member roles."""
    version = get_version_by_id(conn, instance["app_version_id"])
    spec = stored_spec(version)
    if spec.status is None:
        raise unprocessable("no_status_module", "the app version's adapter spec declares no status read-back")
    members = _members(conn, instance["id"], list(LIVE) + ["failed"], [])
    # The status module may compare what runs with what the version pins (the workload's image).
    extravars = {spec.workload.variable: workload_image(version)} if spec.workload else {}
    plan = RunPlan(kind="refresh", inventory=_inventory(settings, spec, instance, members), extravars=extravars,
                   secret_vars={},
                   content_digest=version["artifact_digest"] if version["artifact_kind"] == "collection" else None)
    member_roles = set(spec.status.member_roles)
    plan.node_members = {m["node_name"]: str(m["id"]) for m in members
                         if not member_roles or m["role"] in member_roles}
    plan.module = spec.status.module
    plan.module_args = json.dumps(spec.status.options | {"members": list(plan.node_members)})
    roles = [spec.status.role, *spec.status.host_roles]
    plan.host_pattern = ":".join(dict.fromkeys(g for r in roles for g in spec.role(r).inventory_groups()))
    plan.view_hosts = sorted({m["node_name"] for m in members if m["role"] == spec.status.role})
    plan.checked_hosts = sorted({m["node_name"] for m in members if m["role"] in roles})
    asked = set(plan.node_members.values())
    plan.member_views = [MemberView(str(m["id"]), m["node_name"], m["status"], str(m["id"]) in asked) for m in members]
    return plan


def credential_plan(conn: psycopg.Connection, settings: OperationSettings, instance: dict,
                    name: str) -> tuple[RunPlan, CredentialSpec]:
    """A credential the adapter declares (credentials[name], else 404): its module with the catalog's
    options alone (no tenant values), to be asked on the serving members of its role
    (`checked_hosts`, active ones first; `node_members` maps them to member ids), one at a time (the
    caller sets `host_pattern`)."""
    version = get_version_by_id(conn, instance["app_version_id"])
    spec = stored_spec(version)
    credential = spec.credentials.get(name)
    if credential is None:
        raise not_found("credential", name)
    members = live_members(conn, instance["id"])
    plan = RunPlan(kind="credential", inventory=_inventory(settings, spec, instance, members), extravars={},
                   secret_vars={},
                   content_digest=version["artifact_digest"] if version["artifact_kind"] == "collection" else None)
    plan.module = credential.module
    # No options: no arguments at all (ad hoc Ansible takes `-a '{}'` for free-form arguments, which a module refuses).
    plan.module_args = json.dumps(credential.options) if credential.options else ""
    serving = [m for m in members if m["role"] == credential.role and m["status"] in SERVING]
    plan.checked_hosts = [m["node_name"] for m in sorted(serving, key=lambda m: SERVING.index(m["status"]))]
    plan.node_members = {m["node_name"]: str(m["id"]) for m in serving}
    return plan, credential


def _inventory(settings: OperationSettings, spec: AdapterSpec, instance: dict, members: list[dict]) -> dict:
    built = inventory.build(spec, instance["id"], members)
    built["all"]["vars"] = {}
    if settings.ssh_private_key_file:
        built["all"]["vars"]["ansible_ssh_private_key_file"] = str(settings.ssh_private_key_file)
    return built


def read_back(plan: RunPlan, result) -> Verdict:
    """The status module's answers, host by host, judged (health/verdict.py): a host with no result
    and no failure gave no answer before the run ended."""
    answers = {}
    for host in plan.checked_hosts:
        failure = result.host_failures.get(host)
        if host in result.module_results:
            answers[host] = HostAnswer(result=result.module_results[host])
        elif failure and not failure.get("unreachable"):
            answers[host] = HostAnswer(failed=failure.get("message") or "the status module failed")
        else:
            answers[host] = HostAnswer(unreachable=(failure or {}).get("message") or
                                       f"no answer before the check ended ({result.status})")
    return judge(answers, set(plan.view_hosts), plan.member_views)
