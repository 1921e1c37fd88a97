"""Every public route of the control service has a `gpuaas` verb (issue 27, item 1): each client command names the
operation ids (OpenAPI operationIds) it exists for, and every operation of the service's own document is one of
them, or in NOT_FOR_THE_CLI with the reason. A new route without a verb fails here."""

from __future__ import annotations

import argparse

from gpuaas_api.app import create_app
from gpuaas_api.cli import build_parser
from gpuaas_api.config import Settings

# Routes a person or a script has no use for as a verb, and why.
NOT_FOR_THE_CLI = {
    "health_live": "a probe for load balancers and systemd; a command that cannot reach the service names its address",
    "health_ready": "a probe for load balancers and systemd (is the database there?), as health_live",
    "content_get": "a collection build by digest: what workers and AWX download to run it; `apps register` uploads "
                   "it (content_head, content_put)",
}
METHODS = {"get", "put", "post", "patch", "delete", "head"}


def commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()):
    """(words, the function it runs) of every command under `parser`."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*words, name))
    if parser.get_default("func") is not None:
        yield " ".join(words), parser.get_default("func")


def test_every_public_route_has_a_verb():
    spec = create_app(database=object(), settings=Settings()).openapi()
    routes = {op["operationId"]: f"{method.upper()} {path}" for path, item in spec["paths"].items()
              for method, op in item.items() if method in METHODS}
    verbs: dict[str, list[str]] = {}
    for words, func in commands(build_parser()):
        for operation in getattr(func, "operations", ()):
            verbs.setdefault(operation, []).append(words)

    assert not verbs.keys() - routes.keys(), f"commands name operations the service does not have: " \
                                             f"{sorted(verbs.keys() - routes.keys())}"
    missing = {op: routes[op] for op in sorted(routes.keys() - verbs.keys() - NOT_FOR_THE_CLI.keys())}
    assert not missing, f"public routes without a gpuaas verb (add one, or list it in NOT_FOR_THE_CLI with why): " \
                        f"{missing}"
    assert NOT_FOR_THE_CLI.keys() <= routes.keys(), "NOT_FOR_THE_CLI names a route that is gone"
    assert not NOT_FOR_THE_CLI.keys() & verbs.keys(), "a route in NOT_FOR_THE_CLI has a verb now: take it out"
    # The shape asked for: `gpuaas <resource> <verb>` for the lifecycle and the IAM objects.
    for op, words in (("instances_create", "instances create"), ("instances_decommission", "instances decommission"),
                      ("tenants_create", "tenants create"), ("service_accounts_tokens_create", "tokens create"),
                      ("allocations_release", "allocations release"), ("policy_overlays_create", "policies create")):
        assert words in verbs[op], (op, verbs[op])


def test_every_client_command_names_its_routes_and_reads_take_yaml():
    parser = build_parser()
    for words, func in commands(parser):
        if func.__module__.startswith("gpuaas_api.commands.") and hasattr(func, "operations"):
            assert func.operations, words
    for argv in (["instances", "list", "-o", "yaml"], ["tenants", "list", "-o", "yaml"],
                 ["usage", "-o", "yaml"], ["events", "tail", "x", "-o", "yaml"], ["ops", "show", "x", "-o", "yaml"],
                 ["instances", "show", "x", "-o", "text"]):  # `text`: the first name of `table`, still taken
        assert parser.parse_args(argv).output in ("yaml", "table"), argv
