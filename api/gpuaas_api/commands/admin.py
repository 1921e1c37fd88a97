"""`gpuaas admin bootstrap` (on the service's machine, against its database), and the platform's client verbs:
`admin instances` (break-glass: every tenant's instances, each read audited), `audit list`, `registry
certificate`."""

from __future__ import annotations

import argparse
import sys

from ..client.verbs import Keys, Verb, arg, instance_id, optional, project, resource, tenant

BREAK_GLASS = "X-Break-Glass-Reason"
INSTANCE_COLUMNS = ("name", "status", "app_slug", ("VERSION", "app_version"), "tenant_id", "project_id", "updated_at",
                    "id")


def _any_instance(client, ref, args):
    """Any tenant's instance, by id, name or id prefix (break-glass: the list read is audited too)."""
    from ..client import lookup

    if lookup.is_uuid(ref):
        return ref
    found = client.pages("/v1/admin/instances", headers={BREAK_GLASS: args.reason})
    return lookup.one("instance", ref, found, lambda i: i["name"] == ref, "every tenant")["id"]


REASON = arg("--reason", required=True, to="header", key=BREAK_GLASS,
             help="why you break the glass (audited with every read and change)")
ANY_INSTANCE = arg("instance", metavar="INSTANCE", to="path", key="instance_id", resolve=_any_instance,
                   help="its id, name or any unique start of its id")
ADMIN_INSTANCES = (
    Verb("list", "admin_instances_list", "GET", "/v1/admin/instances", "every tenant's instances, newest first",
         (REASON, tenant(to="query", only=True),
          project(to="query", only=True),
          arg("--status", to="query")), INSTANCE_COLUMNS),
    Verb("show", "admin_instances_get", "GET", "/v1/admin/instances/{instance_id}", "any tenant's instance",
         (ANY_INSTANCE, REASON)),
    Verb("transition", "admin_instances_transition", "POST", "/v1/admin/instances/{instance_id}/transitions",
         "move a stuck instance along a legal edge of its status (e.g. starting to failed), never an illegal one",
         (ANY_INSTANCE, REASON,
          arg("--to", required=True, choices=("created", "starting", "running", "degraded", "stopping", "stopped",
                                              "failed"), resolve=lambda c, to, a: Keys(to=to, reason=a.reason))),
         INSTANCE_COLUMNS),
)
AUDIT = (
    Verb("list", "audit_list", "GET", "/v1/audit", "the audit log of a project, a tenant or the platform, newest first",
         (tenant(to="query", only=True),
          project(to="query", only=True),
          arg("--instance", metavar="ID|NAME", to="query", key="app_instance_id", resolve=optional(instance_id)),
          arg("--action", to="query", help="only this action, e.g. apps.instance.create"),
          arg("--correlation-id", to="query", metavar="ID"),
          arg("--actor", to="query", key="actor_id", metavar="ID", help="only what this user or service account did"),
          arg("--break-glass", action="store_true", default=None, to="query", help="only break-glass rows"),
          arg("--reason", to="header", key=BREAK_GLASS, help="read a tenant's rows as the platform (break-glass; "
                                                             "audited): why")),
         ("occurred_at", "action", "actor_kind", "actor_id", "target_kind", "target_id", "break_glass",
          "correlation_id"), most=100),
)
REGISTRY = (
    Verb("certificate", "registry_certificate_get", "GET", "/v1/registry/certificate",
         "what a registry that trusts this service's pull tokens is configured with: service, issuer, certificate "
         "(-o yaml for its config)"),
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("admin", help="platform administration: bootstrap, break-glass access to every instance")
    asub = p.add_subparsers(dest="admin_command", metavar="ACTION", required=True)
    boot = asub.add_parser("bootstrap", help="create the first platform admin and print its token once (on the "
                                             "service's machine: it opens the database)")
    boot.add_argument("--email", default="admin@gpuaas.local")
    boot.add_argument("--ttl-days", type=int, default=30)
    boot.set_defaults(func=bootstrap)
    resource(asub, "instances", "every tenant's instances (break-glass: --reason, audited): list, show, transition",
             ADMIN_INSTANCES)
    resource(sub, "audit", "the audit log: who did what, when", AUDIT)
    resource(sub, "registry", "the OCI registry token service", REGISTRY)


def bootstrap(args: argparse.Namespace) -> int:
    from .. import db
    from ..config import Settings
    from ..errors import ApiError
    from ..iam.service import bootstrap_platform_admin

    with db.database_url(Settings.from_model(args.settings)) as url:
        db.upgrade(url)
        database = db.Database(url, min_size=1, max_size=1)
        database.open()
        try:
            with database.transaction() as conn:
                token = bootstrap_platform_admin(conn, args.email, args.ttl_days)
        except ApiError as exc:
            print(f"gpuaas admin bootstrap: {exc.message}", file=sys.stderr)
            return 1
        finally:
            database.close()
    print(token)
    print(f"platform admin {args.email} created; the token above is shown only once", file=sys.stderr)
    return 0
