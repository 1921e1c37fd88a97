"""What the client's `gpuaas` subcommands share: their common options, the connection from the config
file and environment, errors as one line, and running an operation to its end."""

from __future__ import annotations

import argparse
import functools
import logging
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import config
from .errors import ApiError, ClientError
from .follow import EXIT_STATUS, follow
from .render import dump, json_line, operation_view

if TYPE_CHECKING:
    from .http import Client

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130


RUNTIME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def runtime_name(value: str) -> str:
    """argparse type for a name the runtime gives (a job id, a node name): as the service takes them, so that it
    is one path segment of the request."""
    if not RUNTIME_NAME.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a job id or node name (letters, digits, . _ -, up to 64)")
    return value


OUTPUTS = ("table", "json", "yaml")


def output_option(parser: argparse.ArgumentParser, default: str = "table") -> None:
    # `text`, the first name of `table`, is still taken (not listed).
    parser.add_argument("-o", "--output", choices=OUTPUTS, default=default, type=lambda v: {"text": "table"}.get(v, v),
                        help=f"table for people, json or yaml for scripts (the API's objects as they are); "
                             f"default {default}")


def project_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", metavar="ID|NAME",
                        help="the project to look names up in (default: GPUAAS_PROJECT, the project stored by "
                             "`gpuaas login --project`, else every project the token may read)")


def url_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help=f"the control service's URL (default: {config.URL_ENV}, else the one stored by "
                                      "`gpuaas login`)")
    # The first spelling of --url, kept for the scripts that use it; not listed.
    parser.add_argument("--api", dest="url", help=argparse.SUPPRESS)


def operation_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-wait", action="store_true",
                        help="print the operation id and return at once instead of following it to its end")
    parser.add_argument("--idempotency-key", metavar="KEY",
                        help="the Idempotency-Key to send (default: a new random one); the same key returns the "
                             "same operation, so a retried command never runs it twice")
    output_option(parser)
    project_option(parser)


def connect(args: argparse.Namespace) -> Client:
    """A client from --url (where the command has it), GPUAAS_API / GPUAAS_TOKEN or the config file
    `gpuaas login` wrote."""
    settings = config.load()
    args.default_project = settings.project
    url = getattr(args, "url", None) or settings.url
    if not url:
        raise ClientError(f"no service URL: run `gpuaas login --url URL` or set {config.URL_ENV}")
    if not settings.token:
        raise ClientError(f"not logged in to {url}: run `gpuaas login` or set {config.TOKEN_ENV}")
    if settings.source("token") == str(config.config_path()) and config.too_open():
        print(f"gpuaas: warning: {config.config_path()} holds a token and others may read it; chmod 600 it",
              file=sys.stderr)
    from .http import Client

    return Client(url, settings.token)


def quiet_http_log() -> None:
    """httpx logs every request at INFO: that is for debugging a command (--log-level DEBUG), not part
    of its output. gpuaas_api.cli calls it once for every command but the services."""
    if logging.getLogger().level > logging.DEBUG:
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.WARNING)


def project_ref(args: argparse.Namespace) -> str | None:
    return getattr(args, "project", None) or getattr(args, "default_project", None)


def json_output(args: argparse.Namespace) -> bool:
    return getattr(args, "output", "table") == "json"


def structured(args: argparse.Namespace) -> bool:
    """-o json or -o yaml: the API's objects for scripts instead of tables."""
    return getattr(args, "output", "table") in ("json", "yaml")


def emit(args: argparse.Namespace, value: Any) -> None:
    """`value` as -o asks: indented JSON, or YAML."""
    dump(value, fmt=args.output)


Command = Callable[[argparse.Namespace, "Client"], "int | None"]


def command(*operations: str) -> Callable[[Command], Callable[[argparse.Namespace], int]]:
    """A client command calling the routes of these operation ids (the OpenAPI operationIds; the test of
    tests/cli/test_every_route.py reads them): connects, runs, and turns errors into one line on stderr and a
    non-zero status (the service's error envelope as JSON with --output json)."""

    def decorate(fn: Command) -> Callable[[argparse.Namespace], int]:
        @functools.wraps(fn)
        def run(args: argparse.Namespace) -> int:
            try:
                with connect(args) as client:
                    return int(fn(args, client) or 0)
            except ApiError as exc:
                if json_output(args):
                    json_line(exc.envelope(), sys.stderr)
                else:
                    print(f"gpuaas: {exc}", file=sys.stderr)
                return EXIT_ERROR
            except (ClientError, config.ConfigFileError) as exc:
                print(f"gpuaas: {exc}", file=sys.stderr)
                return EXIT_ERROR
            except KeyboardInterrupt:
                return EXIT_INTERRUPTED

        run.operations = operations
        return run

    return decorate


def run_operation(args: argparse.Namespace, client: Client, path: str, body: dict | None = None) -> int:
    """POSTs an operation (with an Idempotency-Key); then, unless --no-wait, follows it to its end and
    exits with its result: 0 succeeded, 1 failed, 3 canceled."""
    op = client.operate(path, body, args.idempotency_key)
    if args.no_wait:
        if structured(args):
            emit(args, op)
        else:
            print(op["id"])
        return 0
    out = sys.stderr if structured(args) else sys.stdout
    print(f"{op['kind']} accepted: operation {op['id']} (correlation_id {op['correlation_id']})", file=out,
          flush=True)
    return wait(args, client, op)


def wait(args: argparse.Namespace, client: Client, op: dict) -> int:
    """Follows an operation: the live panel on a terminal, plain lines elsewhere; progress goes to
    stderr with -o json|yaml, which prints the finished operation on stdout."""
    out = sys.stderr if structured(args) else sys.stdout
    try:
        progress = follow(client, op, operation_view(out))
    except KeyboardInterrupt:
        print(f"\nstopped following; the operation goes on: gpuaas ops follow {op['id']}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(progress.summary(), file=out, flush=True)
    if structured(args):
        emit(args, progress.op)
    return EXIT_STATUS[progress.status]
