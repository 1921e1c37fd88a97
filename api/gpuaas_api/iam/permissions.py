"""Roles are named bundles of permission keys. Handlers check keys, never role names, so a role can
change its bundle without touching a handler. Each role is grantable at the scope kinds and to the
principal kinds it names (all but catalog_publisher: exactly one of each)."""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULER_ALL = frozenset({
    "scheduler.catalog.read", "scheduler.instance.read", "scheduler.instance.create",
    "scheduler.instance.update", "scheduler.instance.delete", "scheduler.queue.submit",
    "scheduler.queue.read", "scheduler.queue.cancel", "scheduler.node.read", "scheduler.node.operate",
})
SCHEDULER_READ = frozenset({
    "scheduler.catalog.read", "scheduler.instance.read", "scheduler.queue.read", "scheduler.node.read",
})
APPS_INSTANCE_ALL = frozenset({
    "apps.instance.create", "apps.instance.read", "apps.instance.update", "apps.instance.delete",
    "apps.member.operate",
    # a runtime access credential the adapter declares (e.g. a cluster's admin configuration): more than a read
    "apps.instance.credentials.issue",
    # the secrets and the access map a run of the instance gets, for a run outside the platform (AWX; docs/awx.md)
    "apps.instance.run_secrets.read",
})
# Logging in to an instance's login hosts as one's runtime identity, with one's own SSH keys (docs/scheduler.md):
# people only, so no service account role holds it.
LOGIN = frozenset({"apps.instance.access"})
# App-runtime usage records (docs/metering.md): who was charged for what.
USAGE = frozenset({"usage.read"})
PROJECT_READ = frozenset({
    "iam.project.read", "apps.catalog.read", "apps.instance.read", "allocations.read",
    "policy.entitlement.read", "policy.overlay.read",
})
# Publishing to the catalog (docs/control-service.md "Publishers"): apps, their artifacts and versions and their
# states, and the collection builds in the content store. At platform scope for the platform catalog; at a tenant
# for that tenant's private apps (catalog/scope.py: only the tenant's own principals reach them).
CATALOG_PUBLISH = frozenset({"apps.catalog.read", "apps.catalog.publish", "apps.content.upload"})
SERVICE_ACCOUNT_ADMIN = frozenset({
    "iam.service_account.create", "iam.service_account.read", "iam.service_account.delete",
    "iam.service_account.token.create", "iam.token.revoke",
    "iam.role_binding.create", "iam.role_binding.read", "iam.role_binding.delete",
})


@dataclass(frozen=True)
class Role:
    name: str
    scope_kinds: tuple[str, ...]  # platform | tenant | project
    principal_kinds: tuple[str, ...]  # user | service_account
    description: str
    permissions: frozenset[str]
    # Whether a tenant's principal may hold it at platform scope: only a role whose keys reach no tenant's data.
    # Every other platform role is for users outside any tenant (platform operators).
    platform_for_tenants: bool = False


ROLES: dict[str, Role] = {r.name: r for r in [
    Role("platform_admin", ("platform",), ("user",),
         "Operates the platform: tenants, catalog, allocations, entitlements, global policy. "
         "Reaches tenant data only through audited /v1/admin break-glass routes.",
         frozenset({
             "iam.tenant.create", "iam.tenant.read", "iam.project.create", "iam.project.read",
             "iam.user.create", "iam.user.read",
             "iam.token.create", "iam.token.read", "iam.token.revoke",
             "iam.role_binding.create", "iam.role_binding.read", "iam.role_binding.delete",
             "apps.catalog.read", "apps.catalog.write", "apps.catalog.publish", "apps.content.upload",
             "allocations.read", "allocations.write",
             "policy.entitlement.read", "policy.entitlement.write",
             # audit.platform.read: the platform's own audit rows; tenants' rows need break-glass.
             "policy.overlay.read", "policy.overlay.write", "audit.platform.read", "platform.break_glass",
             # which registry hosts tenants may register as their private registries (registry/tenant.py)
             "registries.allowlist.manage",
             # moving an artifact or a version past its promotion gates, recorded (gate.skipped): the platform's own
             # bundled collection, whose CI ran the checks
             "apps.catalog.gates.skip",
         })),
    Role("tenant_admin", ("tenant",), ("user",),
         "Manages projects, users, service accounts, policy overlays, app instances and private apps in one tenant.",
         PROJECT_READ | APPS_INSTANCE_ALL | SCHEDULER_ALL | SERVICE_ACCOUNT_ADMIN | LOGIN | CATALOG_PUBLISH
         | frozenset({
             "iam.tenant.read", "iam.project.create", "iam.user.create", "iam.user.read",
             "iam.token.create", "iam.token.read", "policy.overlay.write", "audit.read",
             # a tenant-shared runtime (docs/tenant-shared.md): create it, attach projects, grant cross-project use
             "apps.shared_runtime.manage",
             # which of the tenant's projects may use the tenant's private apps (platform apps: platform admins)
             "policy.entitlement.private.write",
             # the tenant's private registries (an allowlisted host and its credentials) for its private apps' images
             "registries.tenant.read", "registries.tenant.write",
         }) | USAGE),
    Role("project_admin", ("project",), ("user",),
         "Manages app instances, topology, service accounts and overlays inside one project.",
         PROJECT_READ | APPS_INSTANCE_ALL | SCHEDULER_ALL | SERVICE_ACCOUNT_ADMIN | LOGIN | USAGE | frozenset({
             "policy.overlay.write", "audit.read",
         })),
    Role("project_member", ("project",), ("user",),
         "Uses the project's apps: reads instances and submits scheduler jobs.",
         PROJECT_READ | SCHEDULER_READ | LOGIN | frozenset({"scheduler.queue.submit", "scheduler.queue.cancel"})),
    Role("sa_operator", ("project",), ("service_account",),
         "Automation identity for app lifecycle inside its own project.",
         PROJECT_READ | APPS_INSTANCE_ALL | SCHEDULER_ALL | USAGE),
    Role("sa_viewer", ("project",), ("service_account",),
         "Read-only automation identity inside its own project.",
         PROJECT_READ | SCHEDULER_READ | USAGE),
    # Platform scope: granted by a platform admin, to anyone (an app developer's user or CI service account in
    # its tenant). A tenant: one of the tenant's users or a service account of one of its projects, granted by that
    # tenant's admin (who holds these keys there).
    Role("catalog_publisher", ("platform", "tenant"), ("user", "service_account"),
         "Publishes apps, artifacts, versions and collection builds: to the platform catalog (platform scope) or "
         "as the tenant's private apps (tenant scope).",
         CATALOG_PUBLISH, platform_for_tenants=True),
]}

ALL_PERMISSIONS = frozenset().union(*(r.permissions for r in ROLES.values()))
