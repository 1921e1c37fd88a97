"""`gpuaas ops list|show|follow|cancel`: operations, and a live view of a running one."""

from __future__ import annotations

import argparse

from ..client.cli import command, emit, output_option, project_option, project_ref, structured, wait


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ops", help="operations: list an instance's, show one, follow one live, cancel one")
    osub = p.add_subparsers(dest="ops_command", metavar="ACTION", required=True)
    ls = osub.add_parser("list", help="an instance's operations, oldest first")
    ls.add_argument("instance", metavar="INSTANCE", help="the instance's id or name")
    ls.add_argument("--status", help="only operations in this status (queued, running, succeeded, failed, canceled)")
    project_option(ls)
    output_option(ls)
    ls.set_defaults(func=list_operations)
    show = osub.add_parser("show", help="one operation: status, times, task progress, the failing task")
    show.add_argument("operation", metavar="OPERATION", help="the operation's id, or any unique start of it")
    project_option(show)
    output_option(show)
    show.set_defaults(func=show_operation)
    follow = osub.add_parser("follow", help="follow an operation live until it ends; exits 0 succeeded, "
                                            "1 failed, 3 canceled")
    follow.add_argument("operation", metavar="OPERATION", help="the operation's id, or any unique start of it")
    project_option(follow)
    output_option(follow)
    follow.set_defaults(func=follow_operation)
    artifacts = osub.add_parser("artifacts", help="download a run's private data directory (inventory, variables "
                                                  "without secrets, ansible-runner's artifacts) as a tar.gz")
    artifacts.add_argument("operation", metavar="OPERATION", help="the operation's id, or any unique start of it")
    artifacts.add_argument("--attempt", type=int, metavar="N", help="which attempt (default: the latest)")
    artifacts.add_argument("--file", metavar="FILE", help="where to write it (default: the name the service gives, "
                                                          "in the current directory); - writes it to stdout")
    project_option(artifacts)
    artifacts.set_defaults(func=download_artifacts)
    cancel = osub.add_parser("cancel", help="cancel a queued or running operation")
    cancel.add_argument("operation", metavar="OPERATION", help="the operation's id, or any unique start of it")
    project_option(cancel)
    output_option(cancel)
    cancel.set_defaults(func=cancel_operation)


@command("operations_list")
def list_operations(args, client) -> int:
    from ..client import lookup
    from ..client.render import table, when

    instance = lookup.instance(client, args.instance, project_ref(args))
    found = list(client.pages(f"/v1/instances/{instance['id']}/operations", status=args.status))
    if structured(args):
        emit(args, found)
    else:
        print(table(["OPERATION", "KIND", "STATUS", "ATTEMPT", "CREATED", "FINISHED"],
                    [[op["id"], op["kind"], op["status"], op["attempt"], when(op["created_at"]),
                      when(op["finished_at"]) if op.get("finished_at") else None] for op in found]))
    return 0


@command("operations_get")
def show_operation(args, client) -> int:
    from ..client import lookup
    from ..client.follow import duration, history
    from ..client.render import when

    op = client.get(f"/v1/operations/{lookup.operation_id(client, args.operation, project_ref(args))}")
    progress = history(client, op)
    tasks = {"done": progress.done, "started": progress.started, "failed": progress.failed,
             "hosts": sorted(progress.hosts), "running": progress.running, "failure": progress.failure}
    if structured(args):
        emit(args, op | {"progress": tasks})
        return 0
    rows = [("kind", op["kind"]), ("status", op["status"] + (" (cancel requested)" if op["cancel_requested"] else "")),
            ("instance", op["instance_id"]), ("attempt", f"{op['attempt']} of {op['max_attempts']}"),
            ("created", when(op["created_at"])),
            ("started", when(op["started_at"]) if op.get("started_at") else "-"),
            ("finished", when(op["finished_at"]) if op.get("finished_at") else "-"),
            ("elapsed", duration(progress.elapsed())),
            ("tasks", f"{progress.done}/{progress.started} on {', '.join(sorted(progress.hosts)) or 'no host'}"
                      + (f", {progress.failed} failed" if progress.failed else "")),
            ("correlation", op["correlation_id"])]
    if progress.running and op["status"] == "running":
        rows.append(("running", ", ".join(f"{h}: {t}" for h, t in sorted(progress.running.items()))))
    if op.get("error"):
        rows.append(("error", f"{op['error']['code']}: {op['error']['message']}"))
    print(f"operation {op['id']}")
    for name, value in rows:
        print(f"  {name:<12} {value}")
    return 0


@command("operations_get", "events_stream")
def follow_operation(args, client) -> int:
    from ..client import lookup

    op = client.get(f"/v1/operations/{lookup.operation_id(client, args.operation, project_ref(args))}")
    return wait(args, client, op)


@command("operations_cancel")
def cancel_operation(args, client) -> int:
    from ..client import lookup

    op = client.post(f"/v1/operations/{lookup.operation_id(client, args.operation, project_ref(args))}/cancel")
    if structured(args):
        emit(args, op)
    else:
        print(f"{op['kind']} {op['id']}: {op['status']}" + (", cancel requested" if op["cancel_requested"] else ""))
    return 0


@command("operations_artifacts_get")
def download_artifacts(args, client) -> int:
    import re
    import sys

    from ..client import lookup
    from ..client.errors import ClientError
    from ..client.http import api_error

    op_id = lookup.operation_id(client, args.operation, project_ref(args))
    response = client.http.get(f"/v1/operations/{op_id}/artifacts", params={"attempt": args.attempt} if args.attempt
                               else None, headers={"Accept": "application/gzip"})
    if response.status_code >= 400:
        raise api_error(response)
    if args.file == "-":
        sys.stdout.buffer.write(response.content)
        return 0
    offered = re.search(r'filename="([^"/]+)"', response.headers.get("Content-Disposition", ""))
    path = args.file or (offered[1] if offered else f"operation-{op_id}.tar.gz")
    try:
        with open(path, "xb") as f:
            f.write(response.content)
    except OSError as exc:
        raise ClientError(f"cannot write {path}: {exc.strerror}") from None
    print(f"{path}: {len(response.content)} bytes, the run of operation {op_id}")
    return 0
