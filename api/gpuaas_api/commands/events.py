"""`gpuaas events tail`: an instance's timeline, and with --follow its new events as they happen."""

from __future__ import annotations

import argparse
import sys
from collections import deque

from ..client.cli import command, output_option, project_option, project_ref


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("events", help="an instance's event timeline")
    esub = p.add_subparsers(dest="events_command", metavar="ACTION", required=True)
    tail = esub.add_parser("tail", help="the instance's last events; --follow prints new ones as they come "
                                        "(until interrupted)")
    tail.add_argument("instance", metavar="INSTANCE", help="the instance's id or name")
    tail.add_argument("-n", "--lines", type=_count, default=20, metavar="N", help="how many past events (default 20)")
    tail.add_argument("-f", "--follow", action="store_true", help="keep printing new events (the event stream)")
    tail.add_argument("--type", help="only events of this type, e.g. operation.failed")
    tail.add_argument("--correlation-id", metavar="ID", help="only events of this correlation id")
    project_option(tail)
    output_option(tail)
    tail.set_defaults(func=tail_events)


def _count(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not a count (0 or more)")
    return int(value)


@command("events_list", "events_stream")
def tail_events(args, client) -> int:
    from ..client import lookup
    from ..client.render import dump, event_line, json_line

    instance = lookup.instance(client, args.instance, project_ref(args))

    def show(event: dict) -> None:
        if args.output == "json":
            json_line(event)
        elif args.output == "yaml":
            print("---")
            dump(event, fmt="yaml")
            sys.stdout.flush()
        else:
            print(event_line(event), flush=True)

    past, last = deque(maxlen=args.lines), 0
    for event in client.pages(f"/v1/instances/{instance['id']}/events", type=args.type,
                              correlation_id=args.correlation_id):
        past.append(event)
        last = event["id"]
    for event in past:
        show(event)
    if not args.follow:
        return 0
    for event in client.event_stream(instance["id"], after=last):
        if args.type in (None, event["type"]) and args.correlation_id in (None, event["correlation_id"]):
            show(event)
    return 0
