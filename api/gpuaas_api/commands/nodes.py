"""`gpuaas nodes list|drain|resume|features`: the nodes of an instance's scheduler (docs/scheduler.md). A node
drain here stops scheduling on the runtime's node at once; `gpuaas members drain` takes a member out of the
instance."""

from __future__ import annotations

import argparse

from ..client.cli import command, emit, output_option, project_option, project_ref, runtime_name, structured


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("nodes", help="the nodes of an instance's scheduler: list, drain, resume, set features")
    nsub = p.add_subparsers(dest="nodes_command", metavar="ACTION", required=True)
    ls = nsub.add_parser("list", help="the scheduler's nodes and their state")
    ls.add_argument("instance", metavar="INSTANCE", help="the instance's id or name")
    project_option(ls)
    output_option(ls)
    ls.set_defaults(func=list_nodes)

    drain = nsub.add_parser("drain", help="stop scheduling on a node now: its running jobs finish, no new one "
                                          "starts (the reason is recorded with the prefix gpuaas:)")
    _node_arguments(drain)
    drain.add_argument("--reason", required=True, help="why, in printable ASCII (up to 200 characters)")
    drain.set_defaults(func=operate_node, action="drain")
    resume = nsub.add_parser("resume", help="schedule on a node again (lifts only a drain the platform set)")
    _node_arguments(resume)
    resume.set_defaults(func=operate_node, action="resume")
    features = nsub.add_parser("features", help="set a node's features (the labels jobs can ask for)")
    _node_arguments(features)
    features.add_argument("features", nargs="*", metavar="FEATURE", help="the node's features, replacing its "
                                                                        "current ones")
    features.add_argument("--clear", action="store_true", help="remove every feature (instead of naming some)")
    features.set_defaults(func=operate_node, action="features")


def _node_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("instance", metavar="INSTANCE", help="the instance's id or name")
    parser.add_argument("node", metavar="NODE", type=runtime_name, help="the node's name (as `gpuaas nodes list` "
                                                                       "shows)")
    project_option(parser)
    output_option(parser)


def operation_body(args: argparse.Namespace) -> dict:
    """The request body of a node operation."""
    from ..client.errors import ClientError

    if args.action == "drain":
        return {"reason": args.reason}
    if args.action == "features":
        if bool(args.features) == args.clear:
            raise ClientError("name the node's features, or pass --clear to remove them all (not both)")
        return {"features": args.features}
    return {}


def node_line(node: dict) -> str:
    from ..client.render import runtime_word

    state = runtime_word(node["state"], node.get("runtime_state"))
    reason = f", reason {node['reason']}" if node.get("reason") else ""
    return f"node {node['name']}: {state}{reason}; features {', '.join(node.get('features') or []) or 'none'}"


@command("nodes_list")
def list_nodes(args, client) -> int:
    from ..client import lookup
    from ..client.render import table

    instance = lookup.instance(client, args.instance, project_ref(args))
    nodes = client.get(f"/v1/instances/{instance['id']}/nodes")["items"]
    if structured(args):
        emit(args, nodes)
        return 0
    print(table(["NAME", "STATE", "REASON", "CPUS", "MEMORY", "GPUS", "FEATURES", "PARTITIONS"],
                [[n["name"], n["state"], n.get("reason"), n.get("cpus"),
                  None if n.get("memory_mb") is None else f"{n['memory_mb']} MB", n.get("gpus"),
                  ",".join(n.get("features") or []), ",".join(n.get("partitions") or [])] for n in nodes]))
    return 0


@command("nodes_drain", "nodes_resume", "nodes_features_set")
def operate_node(args, client) -> int:
    from ..client import lookup

    body = operation_body(args)
    instance = lookup.instance(client, args.instance, project_ref(args))
    node = client.post(f"/v1/instances/{instance['id']}/nodes/{args.node}/{args.action}", body or None)
    if structured(args):
        emit(args, node)
    else:
        print(node_line(node))
    return 0
