"""`gpuaas deploy` and `gpuaas members ...`: lifecycle operations on an instance. Each POSTs with an
Idempotency-Key and, unless --no-wait, follows the operation to its end (exit 0 succeeded, 1 failed,
3 canceled)."""

from __future__ import annotations

import argparse

from ..client.cli import (
    command,
    emit,
    operation_options,
    output_option,
    project_option,
    project_ref,
    run_operation,
    structured,
)


def register(sub: argparse._SubParsersAction) -> None:
    deploy = sub.add_parser("deploy", help="deploy a created instance and follow the run to its end")
    deploy.add_argument("instance", metavar="INSTANCE", help="the instance's id or name")
    operation_options(deploy)
    deploy.set_defaults(func=deploy_instance)

    p = sub.add_parser("members", help="an instance's members: list, show, add, drain, resume, remove, replace")
    msub = p.add_subparsers(dest="members_command", metavar="ACTION", required=True)
    ls = msub.add_parser("list", help="the instance's members")
    ls.add_argument("instance", metavar="INSTANCE", help="the instance's id or name")
    output_option(ls)
    project_option(ls)
    ls.set_defaults(func=list_members)

    show = msub.add_parser("show", help="one member: role, host, status, its last operation, what the last health "
                                        "check read")
    show.add_argument("instance", metavar="INSTANCE", help="the instance's id or name")
    show.add_argument("member", metavar="MEMBER", help="the member's id, node name or host name")
    output_option(show)
    project_option(show)
    show.set_defaults(func=show_member)

    add = msub.add_parser("add", help="add a member on a free host of an allocation")
    add.add_argument("instance", metavar="INSTANCE", help="the instance's id or name")
    add.add_argument("--role", required=True, help="the new member's role (e.g. worker)")
    add.add_argument("--allocation", required=True, metavar="ID|NAME", help="the allocation holding its host")
    add.add_argument("--host", metavar="NAME", help="the host (default: the allocation's first free host)")
    operation_options(add)
    add.set_defaults(func=add_member, action="add")

    for action, text in (("drain", "drain a member (its running work finishes first)"),
                         ("resume", "resume a drained member"),
                         ("remove", "remove a member from the instance")):
        one = msub.add_parser(action, help=text)
        one.add_argument("instance", metavar="INSTANCE", help="the instance's id or name")
        one.add_argument("member", metavar="MEMBER", help="the member's id, node name or host name")
        operation_options(one)
        one.set_defaults(func=member_action, action=action)

    replace = msub.add_parser("replace", help="replace a member by a new one on another host (the new one joins "
                                             "first, then the old one is drained and removed)")
    replace.add_argument("instance", metavar="INSTANCE", help="the instance's id or name")
    replace.add_argument("member", metavar="MEMBER", help="the member's id, node name or host name")
    replace.add_argument("--allocation", required=True, metavar="ID|NAME", help="the allocation holding the new host")
    replace.add_argument("--host", metavar="NAME", help="the new host (default: the allocation's first free host)")
    operation_options(replace)
    replace.set_defaults(func=member_action, action="replace")


@command("instances_deploy")
def deploy_instance(args, client) -> int:
    from ..client import lookup

    instance = lookup.instance(client, args.instance, project_ref(args))
    return run_operation(args, client, f"/v1/instances/{instance['id']}/deploy")


@command("members_list")
def list_members(args, client) -> int:
    from ..client import lookup
    from ..client.render import last_operation, read_line, table, when

    instance = lookup.instance(client, args.instance, project_ref(args))
    members = lookup.members(client, instance["id"])
    if structured(args):
        emit(args, members)
        return 0
    print(table(["ROLE", "NODE", "HOST", "STATUS", "REASON", "LAST OPERATION", "CORRELATION ID", "ID"],
                [[m["role"], m["node_name"], m["host_name"], m["status"], m["status_reason"],
                  last_operation(m.get("last_operation")), (m.get("last_operation") or {}).get("correlation_id"),
                  m["id"]] for m in members]))
    # What the last health check read of each member it read (none before an instance first runs).
    checked = [m for m in members if (m.get("runtime") or {}).get("checked_at")]
    if checked:
        reachable = {True: "yes", False: "no"}
        print()
        print(table(["NODE", "CHECKED", "REACHABLE", "OBSERVED", "READ"],
                    [[m["node_name"], when(m["runtime"]["checked_at"]), reachable.get(m["runtime"].get("reachable")),
                      m["runtime"].get("observed"), read_line(m["runtime"])] for m in checked]))
    return 0


@command("members_get")
def show_member(args, client) -> int:
    from ..client import lookup
    from ..client.render import fields

    member = lookup.member(client, lookup.instance(client, args.instance, project_ref(args)), args.member)
    if structured(args):
        emit(args, member)
    else:
        print(fields(member))
    return 0


def _placement(args, client, instance: dict) -> dict:
    from ..client import lookup

    body = {"allocation_id": lookup.allocation(client, instance["project_id"], args.allocation)}
    return body | ({"host_name": args.host} if args.host else {})


@command("members_add")
def add_member(args, client) -> int:
    from ..client import lookup

    instance = lookup.instance(client, args.instance, project_ref(args))
    body = {"role": args.role} | _placement(args, client, instance)
    return run_operation(args, client, f"/v1/instances/{instance['id']}/members", body)


@command("members_drain", "members_resume", "members_remove", "members_replace")
def member_action(args, client) -> int:
    from ..client import lookup

    instance = lookup.instance(client, args.instance, project_ref(args))
    member = lookup.member(client, instance, args.member)
    body = _placement(args, client, instance) if args.action == "replace" else None
    return run_operation(args, client, f"/v1/instances/{instance['id']}/members/{member['id']}/{args.action}", body)
