"""`gpuaas shared attachments|attach|detach|grants|grant|revoke|billing`: a tenant-shared runtime
(docs/tenant-shared.md), the projects attached to it, the submit grants across their accounts, and who pays for
what."""

from __future__ import annotations

import argparse
import sys

from ..client.cli import command, emit, output_option, project_option, project_ref, structured

SYNC_NOTE = "the runtime follows with the access sync this queued"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("shared", help="tenant-shared runtimes: attached projects, submit grants, billing split")
    ssub = p.add_subparsers(dest="shared_command", metavar="ACTION", required=True)
    ls = ssub.add_parser("attachments", help="the projects attached to a shared runtime, one of them (INSTANCE "
                                             "PROJECT), or (with --project and no INSTANCE) the shared runtimes a "
                                             "project is attached to")
    ls.add_argument("instance", metavar="INSTANCE", nargs="?", help="the runtime's id or name")
    ls.add_argument("attached", metavar="PROJECT", nargs="?", help="one attached project (id or name)")
    project_option(ls)
    output_option(ls)
    ls.set_defaults(func=list_attachments)
    for verb, text in (("attach", "attach a project to a shared runtime (tenant admins)"),
                       ("detach", "detach a project: refused while its jobs run; its workers and account go")):
        a = ssub.add_parser(verb, help=text)
        a.add_argument("instance", metavar="INSTANCE")
        a.add_argument("target", metavar="PROJECT", help="the project to attach or detach (id or name)")
        a.add_argument("--reason", required=True, help="why (audited)")
        project_option(a)
        output_option(a)
        a.set_defaults(func=change_attachment, verb=verb)
    grants = ssub.add_parser("grants", help="the live submit grants of a shared runtime, or one of them")
    grants.add_argument("instance", metavar="INSTANCE")
    grants.add_argument("grant", metavar="GRANT", nargs="?", help="one grant: its id or any unique start of it")
    project_option(grants)
    output_option(grants)
    grants.set_defaults(func=list_grants)
    grant = ssub.add_parser("grant", help="let one principal submit into another attached project's account")
    grant.add_argument("instance", metavar="INSTANCE")
    who = grant.add_mutually_exclusive_group(required=True)
    who.add_argument("--service-account", metavar="ID|NAME|PROJECT/NAME", help="the service account")
    who.add_argument("--user", metavar="ID|EMAIL", help="the user")
    grant.add_argument("--into", required=True, metavar="PROJECT", help="the attached project whose account it "
                                                                        "may submit into")
    grant.add_argument("--reason", required=True, help="why (audited)")
    project_option(grant)
    output_option(grant)
    grant.set_defaults(func=add_grant)
    revoke = ssub.add_parser("revoke", help="revoke a submit grant")
    revoke.add_argument("instance", metavar="INSTANCE")
    revoke.add_argument("grant", metavar="GRANT", help="its id or any unique start of it")
    project_option(revoke)
    output_option(revoke)
    revoke.set_defaults(func=revoke_grant)
    billing = ssub.add_parser("billing", help="who is charged for each member and each account's jobs (before a "
                                              "deploy too)")
    billing.add_argument("instance", metavar="INSTANCE")
    project_option(billing)
    output_option(billing)
    billing.set_defaults(func=show_billing)


def _attachments_table(items: list[dict]) -> str:
    from ..client.render import table, when

    return table(["RUNTIME", "PROJECT", "ACCOUNT", "OWNER", "STATUS", "SINCE"],
                 [[a["instance_name"], a["project_name"], a["account"], "yes" if a["owner"] else "", a["status"],
                   when(a["created_at"])] for a in items])


def _show(args, value: dict | list, text: str) -> None:

    if structured(args):
        emit(args, value)
    else:
        print(text)


@command("attachments_list", "attachments_get", "project_attachments_list")
def list_attachments(args, client) -> int:
    from ..client import lookup
    from ..client.errors import ClientError

    if args.instance:
        instance = lookup.instance(client, args.instance, project_ref(args))
        if args.attached:
            attached = lookup.project(client, args.attached)["id"]
            items = [client.get(f"/v1/instances/{instance['id']}/attachments/{attached}")]
        else:
            items = client.get(f"/v1/instances/{instance['id']}/attachments")["items"]
    elif project_ref(args):
        items = client.get(f"/v1/projects/{lookup.project(client, project_ref(args))['id']}/attachments")["items"]
    else:
        raise ClientError("name a shared runtime, or a project with --project")
    _show(args, items, _attachments_table(items))
    return 0


@command("attachments_create", "attachments_detach")
def change_attachment(args, client) -> int:
    from ..client import lookup

    instance = lookup.instance(client, args.instance, project_ref(args))
    target = lookup.project(client, args.target)
    if args.verb == "attach":
        done = client.post(f"/v1/instances/{instance['id']}/attachments",
                           {"project_id": target["id"], "reason": args.reason})
    else:
        done = client.post(f"/v1/instances/{instance['id']}/attachments/{target['id']}/detach",
                           {"reason": args.reason})
    _show(args, done, _attachments_table([done]))
    if not structured(args):
        print(f"gpuaas: {SYNC_NOTE} ({len(done['operation_ids'])} operation(s) queued)", file=sys.stderr)
    return 0


def _grants_table(items: list[dict]) -> str:
    from ..client.render import table, when

    return table(["PRINCIPAL", "KIND", "INTO ACCOUNT", "REASON", "SINCE", "ID"],
                 [[g["principal_name"] or g["principal_id"], g["principal_kind"], g["account"], g["reason"],
                   when(g["created_at"]), g["id"]] for g in items])


@command("submit_grants_list", "submit_grants_get")
def list_grants(args, client) -> int:
    from ..client import lookup

    instance = lookup.instance(client, args.instance, project_ref(args))
    items = client.get(f"/v1/instances/{instance['id']}/submit-grants")["items"]
    if args.grant:
        grant = lookup.by_id("submit grant", args.grant, items, f"the live grants of {instance['name']}")
        items = [client.get(f"/v1/instances/{instance['id']}/submit-grants/{grant['id']}")]
    _show(args, items, _grants_table(items))
    return 0


def _principal(client, instance: dict, args) -> tuple[str, str]:
    """(kind, id) of --service-account ID|NAME|PROJECT/NAME or --user ID|EMAIL (a user of the runtime's tenant)."""
    from ..client import lookup

    if args.service_account:
        return "service_account", lookup.service_account(client, args.service_account)["id"]
    return "user", lookup.user(client, args.user, instance["tenant_id"])["id"]


@command("submit_grants_create")
def add_grant(args, client) -> int:
    from ..client import lookup

    instance = lookup.instance(client, args.instance, project_ref(args))
    kind, principal_id = _principal(client, instance, args)
    into = lookup.project(client, args.into)
    done = client.post(f"/v1/instances/{instance['id']}/submit-grants", {
        "principal_kind": kind, "principal_id": principal_id, "target_project_id": into["id"], "reason": args.reason})
    _show(args, done, _grants_table([done]))
    if not structured(args):
        print(f"gpuaas: {SYNC_NOTE}", file=sys.stderr)
    return 0


@command("submit_grants_revoke")
def revoke_grant(args, client) -> int:
    from ..client import lookup

    instance = lookup.instance(client, args.instance, project_ref(args))
    grants = client.get(f"/v1/instances/{instance['id']}/submit-grants")["items"]
    grant = lookup.by_id("submit grant", args.grant, grants, f"the live grants of {instance['name']}")
    done = client.post(f"/v1/instances/{instance['id']}/submit-grants/{grant['id']}/revoke")
    _show(args, done, _grants_table([done]))
    return 0


@command("instances_billing_get")
def show_billing(args, client) -> int:
    from ..client import lookup
    from ..client.render import table

    instance = lookup.instance(client, args.instance, project_ref(args))
    split = client.get(f"/v1/instances/{instance['id']}/billing")
    text = table(["NODE", "ROLE", "STATUS", "CHARGED TO", "AS"],
                 [[m["node_name"], m["role"], m["status"], m["project_name"] or m["project_id"], m["charged_as"]]
                  for m in split["members"]])
    text += "\n\n" + table(["ACCOUNT", "JOBS CHARGED TO"],
                           [[a["account"], a["project_name"] or a["project_id"]] for a in split["job_accounts"]])
    _show(args, split, text)
    return 0
