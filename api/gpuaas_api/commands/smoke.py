"""gpuaas apps smoke: start a draft version's smoke gate (a deploy and a decommission of it on allocations the
publisher names; a pass makes the version canary) and, with --wait, follow it to its end."""

from __future__ import annotations

import argparse
import sys
import time

from ..client.cli import command, emit, output_option, structured, url_option

# How often --wait reads the gate: its deploy and decommission each take a run on hosts.
POLL_SECONDS = 2.0


def register(asub: argparse._SubParsersAction) -> None:
    p = asub.add_parser("smoke", help="smoke-test a draft version: deploy and decommission one instance of it on "
                        "allocations of a project (you publish the app and run instances there); a pass makes it "
                        "canary")
    p.add_argument("slug", metavar="APP", help="the app's slug")
    p.add_argument("version", metavar="VERSION", help="the draft version")
    p.add_argument("--project", required=True, metavar="ID|NAME", help="the project the smoke instance lives in")
    p.add_argument("--allocation", dest="allocations", action="append", required=True, metavar="ID|NAME",
                   help="an allocation of the project whose hosts the smoke instance uses (repeatable)")
    p.add_argument("--topology", action="append", default=[], metavar="ROLE=COUNT",
                   help="members per role (repeatable; absent roles get the adapter's minimum)")
    p.add_argument("--param", dest="parameters", action="append", default=[], metavar="KEY=VALUE",
                   help="a parameter of the smoke instance (repeatable; VALUE read as YAML)")
    p.add_argument("--reason", required=True, help="why (audited)")
    p.add_argument("--wait", action="store_true", help="follow the gate to its end; exit 0 passed, 1 failed")
    url_option(p)
    output_option(p)
    p.set_defaults(func=smoke)


def _topology(pairs: list[str]) -> list[dict]:
    roles = []
    for pair in pairs:
        role, _, count = pair.partition("=")
        if not role or not count.isdigit():
            raise SystemExit(f"gpuaas apps smoke: --topology takes ROLE=COUNT, not {pair!r}")
        roles.append({"role": role, "count": int(count)})
    return roles


def _parameters(pairs: list[str]) -> dict:
    import yaml

    values = {}
    for pair in pairs:
        key, eq, text = pair.partition("=")
        if not key or not eq:
            raise SystemExit(f"gpuaas apps smoke: --param takes KEY=VALUE, not {pair!r}")
        try:
            values[key] = yaml.safe_load(text)
        except yaml.YAMLError:
            values[key] = text  # not YAML: the text itself, as given
    return values


@command("catalog_versions_gates_start", "catalog_gates_get")
def smoke(args, client) -> int:
    from ..client import lookup

    project = lookup.project(client, args.project)["id"]
    gate = client.post(f"/v1/catalog/apps/{args.slug}/versions/{args.version}/gates", {
        "kind": "smoke", "project_id": project, "topology": _topology(args.topology), "reason": args.reason,
        "parameters": _parameters(args.parameters),
        "allocation_ids": [lookup.allocation(client, project, ref) for ref in args.allocations]})
    out = sys.stderr if structured(args) else sys.stdout
    print(f"smoke gate {gate['id']} of {args.slug} {args.version}: instance {gate['smoke'].get('instance_name')} "
          f"(correlation_id {gate['correlation_id']})", file=out, flush=True)
    while args.wait and gate["status"] in ("queued", "running"):
        time.sleep(POLL_SECONDS)
        gate = client.get(f"/v1/catalog/gates/{gate['id']}")
    if structured(args):
        emit(args, gate)
    else:
        ran = ", ".join(f"{o['kind']} {o['status']}" for o in gate["smoke"].get("operations", []))
        print(f"{gate['status']}: {ran}" + (f" ({gate['reason']})" if gate.get("reason") else ""))
    return 1 if gate["status"] == "failed" else 0
