"""`gpuaas apps promote` (an artifact or a version to a state, through its gate where one guards the move),
`gpuaas artifacts show` (with its gates), `gpuaas gates list|show` and `gpuaas apps events`
(docs/control-service.md "Promotion gates")."""

from __future__ import annotations

import argparse
import sys
import time

from ..client.cli import command, emit, output_option, structured
from ..client.verbs import Verb, arg

GATE = arg("gate_id", metavar="GATE", to="path", help="the gate's id (gpuaas gates list APP)")
GATE_COLUMNS = ("kind", "status", "artifact_id", "app_version_id", "reason", "created_at", "finished_at", "id")
FINAL = ("passed", "failed")


def gate_verbs(app_arg) -> tuple[Verb, ...]:
    return (
        Verb("list", "catalog_gates_list", "GET", "/v1/catalog/apps/{slug}/gates",
             "an app's promotion gates (staging, smoke) and their outcomes",
             (app_arg, arg("--artifact", to="query", key="artifact_id", help="only this artifact's (its id)"),
              arg("--version", to="query", help="only this version's"),
              arg("--kind", to="query", choices=("staging", "smoke")),
              arg("--status", to="query", choices=("queued", "running", "passed", "failed"))), GATE_COLUMNS),
        Verb("show", "catalog_gates_get", "GET", "/v1/catalog/gates/{gate_id}",
             "one gate: each check with its findings (rule, path, line), the reason it failed", (GATE,)),
    )


def events_verb(app_arg) -> Verb:
    return Verb("events", "catalog_events_list", "GET", "/v1/catalog/apps/{slug}/events",
                "an app's catalog timeline: gates started, passed, failed, skipped (with correlation ids)",
                (app_arg, arg("--artifact", to="query", key="artifact_id", help="only this artifact's (its id)"),
                 arg("--version", to="query", help="only this version's"),
                 arg("--type", to="query", help="only events of this type, e.g. gate.failed")),
                ("id", "type", "artifact_id", "app_version_id", "gate_id", "correlation_id", "occurred_at"),
                listing=True)


def add_promote(asub: argparse._SubParsersAction) -> None:
    p = asub.add_parser("promote", help="move an artifact or a version to a state; where a gate guards the move "
                        "(a collection build's staging checks), start it (--wait: follow it and print each check)")
    p.add_argument("slug", metavar="APP", help="the app's slug")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--artifact", metavar="ID", help="the artifact's id (gpuaas artifacts list APP)")
    what.add_argument("--version", help="the version, e.g. 1.2.0")
    p.add_argument("--to", required=True, choices=("draft", "staged", "canary", "active", "deprecated", "retired"))
    p.add_argument("--reason", default="promoted with gpuaas apps promote", help="why (audited)")
    p.add_argument("--skip-gates", action="store_true", help="move past the gates (platform admins; recorded as "
                   "gate.skipped): the platform's own collection, whose CI ran the checks")
    p.add_argument("--wait", action="store_true", help="follow a gate it starts to its end; exit 1 if it fails")
    p.add_argument("--timeout", type=float, default=1800, help="seconds --wait follows a gate (default 1800)")
    output_option(p)
    p.set_defaults(func=promote)


@command("catalog_artifacts_transition", "catalog_artifacts_gates_start", "catalog_versions_transition",
         "catalog_gates_get")
def promote(args, client) -> int:
    from ..client.errors import ApiError, ClientError

    body = {"to": args.to, "reason": args.reason, "skip_gates": args.skip_gates}
    path = (f"/v1/catalog/artifacts/{args.artifact}/transitions" if args.artifact
            else f"/v1/catalog/apps/{args.slug}/versions/{args.version}/transitions")
    try:
        moved = client.post(path, body)
    except ApiError as exc:
        gate = exc.details.get("gate") if exc.code == "gate_required" else None
        if gate == "staging" and args.artifact and args.to == "staged":
            return _staging(args, client)
        if gate == "smoke":
            raise ClientError(f"{exc.message}: run it with `gpuaas apps smoke {args.slug} {args.version} --project P "
                              "--allocation A --wait` (or --skip-gates, platform admins)") from None
        raise
    if structured(args):
        emit(args, moved)
    else:
        print(f"{args.slug} {'artifact ' + args.artifact if args.artifact else args.version}: {moved['status']}")
    return 0


def _staging(args, client) -> int:
    gate = client.post(f"/v1/catalog/artifacts/{args.artifact}/gates", {"kind": "staging", "reason": args.reason})
    if not structured(args):
        print(f"staging gate {gate['id']}: {gate['status']} (checks: "
              f"{', '.join(c['name'] for c in gate['checks'])})", flush=True)
    if not args.wait:
        if not structured(args):
            print(f"follow it: gpuaas gates show {gate['id']}")
        else:
            emit(args, gate)
        return 0
    deadline = time.monotonic() + args.timeout
    while gate["status"] not in FINAL and time.monotonic() < deadline:
        time.sleep(2)
        gate = client.get(f"/v1/catalog/gates/{gate['id']}")
    if structured(args):
        emit(args, gate)
    else:
        print_gate(gate)
    if gate["status"] not in FINAL:
        print(f"the gate is still {gate['status']} after {args.timeout:.0f} s", file=sys.stderr)
        return 1
    return 0 if gate["status"] == "passed" else 1


def print_gate(gate: dict) -> None:
    """Each check's outcome and its findings: a failing rule with its path and line."""
    print(f"{gate['kind']} gate {gate['id']}: {gate['status']}" + (f" ({gate['reason']})" if gate.get("reason")
                                                                   else ""))
    for check in gate["checks"]:
        print(f"  {check['name']}: {check['status']}" + (f": {check['summary']}" if check.get("summary") else ""))
        for f in check.get("findings") or []:
            where = f"{f['path']}:{f['line']}" if f.get("path") else ""
            print(f"    {f['rule']} {where} {f['message']}".rstrip())


def add_artifact_show(rsub: argparse._SubParsersAction, resolve) -> None:
    p = rsub.add_parser("show", help="one artifact, with its gates and their results")
    p.add_argument("artifact", metavar="ARTIFACT", help="its id or any unique start of it")
    output_option(p)
    p.set_defaults(func=command("catalog_artifacts_get", "catalog_gates_list")(
        lambda args, client: show_artifact(args, client, resolve)))


def show_artifact(args, client, resolve) -> int:
    from ..client.render import fields

    artifact = client.get(f"/v1/catalog/artifacts/{resolve(client, args.artifact, args)}")
    gates = list(client.pages(f"/v1/catalog/apps/{artifact['app_slug']}/gates", artifact_id=artifact["id"]))
    if structured(args):
        emit(args, artifact | {"gates": gates})
        return 0
    print(fields(artifact))
    for gate in gates:
        print()
        print_gate(gate)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from ..client.verbs import resource

    app = arg("slug", metavar="APP", to="path", help="the app's slug (gpuaas apps list)")
    resource(sub, "gates", "promotion gates (a collection build's staging checks, a version's smoke run): list, "
             "show", gate_verbs(app))
