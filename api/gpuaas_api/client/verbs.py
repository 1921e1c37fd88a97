"""Verbs from a table: a route of the public API as `gpuaas <resource> <verb>`, described once (the operation id,
method and path, the arguments and where each goes, the columns of its table) instead of a parser and a function
each. Used for the routes that read or change one kind of object and print it; the commands with more to do
(following an operation, writing a credential file) are functions of their own.

Output: a list prints a table (headers only when it is empty, exit 0), a read of one object every field of it, a
change the changed object as a one-row table (a 204 its `done` line); -o json|yaml the API's objects as they are."""

from __future__ import annotations

import argparse
import itertools
import string
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .cli import command, emit, output_option, structured

if TYPE_CHECKING:
    from .http import Client

# (client, the argument's value or None, all arguments) -> what the request carries: an id for a name, a body value.
Resolve = Callable[["Client", Any, argparse.Namespace], Any]


class Keys(dict):
    """Several values one argument gives (path keys, body fields)."""


@dataclass(frozen=True)
class Arg:
    """One argument of a verb: argparse's flags and options, and where its value goes (`to`: body, query, path,
    or "" for one that only other arguments read) under which key (`key`, default: the argument's dest). A
    resolver that returns Keys gives several keys at once (a service account: its project's id and its own).
    Arguments of one `exclusive` group exclude each other (the group is required when one of them says so)."""
    flags: tuple[str, ...]
    options: dict
    to: str = "body"
    key: str | None = None
    resolve: Resolve | None = None
    exclusive: str = ""

    @property
    def dest(self) -> str:
        if "dest" in self.options:
            return self.options["dest"]
        return max(self.flags, key=len).lstrip("-").replace("-", "_")


def arg(*flags: str, to: str = "body", key: str | None = None, resolve: Resolve | None = None, exclusive: str = "",
        **options) -> Arg:
    return Arg(flags, options, to, key, resolve, exclusive)


@dataclass(frozen=True)
class Verb:
    name: str
    operation: str  # the route's OpenAPI operationId
    method: str
    path: str  # {key} placeholders are filled from the path arguments
    help: str
    args: tuple[Arg, ...] = ()
    # The table of a list, or of an object a change returns: API keys, or (HEADER, key or function) pairs.
    columns: tuple[str | tuple[str, str | Callable[[dict], Any]], ...] = ()
    done: str = ""  # what a change that returns nothing (204) prints, formatted with the arguments
    listing: bool = False  # a list route (every `list` verb): every page, a table
    rows: str = ""  # a read of one object whose table is this list of it (a policy's dimensions)
    most: int = 0  # a list that may be long (the audit log): --limit N items, this many by default
    output: str = "table"  # the default -o (json for a document other tools read, as an inventory)

    def __post_init__(self):
        object.__setattr__(self, "listing", self.listing or self.name == "list")


def header(column) -> str:
    """A column's header: its own, or its key's words (`created_at`: CREATED, `project_id`: PROJECT)."""
    if isinstance(column, tuple):
        return column[0]
    if column != "id":
        column = column.removesuffix("_at").removesuffix("_id").removesuffix("_slug")
    return column.replace("_", " ").upper()


def value(column, obj: dict) -> Any:
    from .render import cell

    if isinstance(column, tuple):
        get = column[1]
        return get(obj) if callable(get) else cell(get, obj.get(get))
    return cell(column, obj.get(column))


def rows_table(columns, items: Iterable[dict]) -> str:
    from .render import table

    return table([header(c) for c in columns], [[value(c, i) for c in columns] for i in items])


def add(sub: argparse._SubParsersAction, verb: Verb) -> argparse.ArgumentParser:
    """The verb's parser under `sub` (a resource's subcommands)."""
    parser = sub.add_parser(verb.name, help=verb.help, description=verb.help)
    groups: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for a in verb.args:
        if not a.exclusive:
            parser.add_argument(*a.flags, **a.options)
            continue
        if a.exclusive not in groups:
            required = any(b.options.get("required") for b in verb.args if b.exclusive == a.exclusive)
            groups[a.exclusive] = parser.add_mutually_exclusive_group(required=required)
        groups[a.exclusive].add_argument(*a.flags, **{k: v for k, v in a.options.items() if k != "required"})
    if verb.most:
        parser.add_argument("-n", "--limit", type=int, default=verb.most, metavar="N",
                            help=f"at most N, newest first (default {verb.most})")
    output_option(parser, verb.output)
    parser.set_defaults(func=command(verb.operation)(lambda args, client: run(verb, args, client)))
    return parser


def resource(sub: argparse._SubParsersAction, name: str, help_text: str, verbs: Iterable[Verb]) -> None:
    """A resource (`gpuaas NAME ...`) of table verbs."""
    parser = sub.add_parser(name, help=help_text, description=help_text)
    rsub = parser.add_subparsers(dest=f"{name}_command", metavar="ACTION", required=True)
    for verb in verbs:
        add(rsub, verb)


def request(verb: Verb, args: argparse.Namespace, client: Client) -> tuple[list[str], dict[str, dict]]:
    """The verb's paths (several when a path argument resolved to several ids: a list over every project), and its
    body, query and headers, from the arguments."""
    parts: dict[str, dict] = {"body": {}, "query": {}, "path": {}, "header": {}, "": {}}
    for a in verb.args:
        given = getattr(args, a.dest)
        resolved = a.resolve(client, given, args) if a.resolve else given
        if isinstance(resolved, Keys):
            parts[a.to].update(resolved)
        elif resolved is not None:
            parts[a.to][a.key or a.dest] = resolved
    keys = [k for _, k, _, _ in string.Formatter().parse(verb.path) if k]
    paths = [verb.path]
    for key in keys:
        values = parts["path"][key]
        # Each value one path segment, whatever it holds (a slug or version as typed).
        paths = [p.replace(f"{{{key}}}", urllib.parse.quote(str(v), safe="")) for p in paths
                 for v in (values if isinstance(values, list) else [values])]
    return paths, parts


def run(verb: Verb, args: argparse.Namespace, client: Client) -> int:
    from .render import fields

    paths, parts = request(verb, args, client)
    body, query, headers = parts["body"], parts["query"], parts["header"] or None
    if verb.listing:
        items = (item for path in paths for item in client.pages(path, headers=headers, **query))
        items = list(itertools.islice(items, args.limit) if verb.most else items)
        if structured(args):
            emit(args, items)
        else:
            print(rows_table(verb.columns, items))
        return 0
    (path,) = paths
    if verb.method == "GET":
        result = client.get(path, headers=headers, **query)
    else:
        result = client.request(verb.method, path, json_body=body or None, params=query or None, headers=headers,
                                retry=False)
    if result is None:
        if not structured(args):
            print(verb.done.format_map(vars(args)))
        return 0
    if structured(args):
        emit(args, result)
    elif verb.rows:
        print(rows_table(verb.columns, result[verb.rows]))
    elif verb.method == "GET" or not verb.columns:
        print(fields(result))
    else:
        print(rows_table(verb.columns, [result]))
    return 0


# -- resolvers and arguments many verbs share --------------------------------------------------------------

def optional(find: Resolve) -> Resolve:
    """`find`, for an argument that may be left out (then it sends nothing)."""
    return lambda client, ref, args: None if ref is None else find(client, ref, args)


def project_id(client: Client, ref: str | None, args: argparse.Namespace) -> str:
    """A project's id: by id or name, else the default project (GPUAAS_PROJECT, `gpuaas login --project`), else
    the one project the token may read (a service account's own)."""
    from . import lookup
    from .cli import project_ref
    from .errors import ClientError

    ref = ref or project_ref(args)
    if ref:
        return lookup.project(client, ref)["id"]
    readable = lookup.visible_projects(client, "iam.project.read")
    if len(readable) != 1:
        raise ClientError(f"which project? this token may read {len(readable)}: pass --project (or store one: "
                          "gpuaas login --project)")
    return readable[0]["id"]


def project_ids(client: Client, ref: str | None, args: argparse.Namespace) -> list[str]:
    """The named (or default) project, else every project the token may read."""
    from . import lookup
    from .cli import project_ref

    return [p["id"] for p in lookup.projects(client, ref or project_ref(args), "iam.project.read")]


def tenant_id(client: Client, ref: str | None, args: argparse.Namespace) -> str:
    from . import lookup

    return lookup.tenant_id(client, ref)


def tenant_ids(client: Client, ref: str | None, args: argparse.Namespace) -> list[str]:
    from . import lookup

    return lookup.tenant_ids(client, ref)


def instance_id(client: Client, ref: str, args: argparse.Namespace) -> str:
    from . import lookup
    from .cli import project_ref

    return lookup.instance(client, ref, project_ref(args))["id"]


def project(to: str = "path", key: str = "project_id", *, each: bool = False, only: bool = False) -> Arg:
    """--project ID|NAME, as an id. `each`: a list's, every project the token may read when none is named;
    `only`: a filter, nothing when none is named."""
    if only:
        return arg("--project", metavar="ID|NAME", to=to, key=key, resolve=optional(project_id),
                   help="only this project's")
    return arg("--project", metavar="ID|NAME", to=to, key=key, resolve=project_ids if each else project_id,
               help="the project, by id or name (default: GPUAAS_PROJECT, the project stored by `gpuaas login "
                    "--project`" + (", else every project the token may read)" if each else ")"))


def tenant(to: str = "path", key: str = "tenant_id", *, each: bool = False, only: bool = False) -> Arg:
    """--tenant ID|NAME, as an id (default: the token's tenant). `each`: a list's, every tenant for a token of none
    (a platform admin's); `only`: a filter, nothing when none is named."""
    if only:
        return arg("--tenant", metavar="ID|NAME", to=to, key=key, resolve=optional(tenant_id),
                   help="only this tenant's")
    return arg("--tenant", metavar="ID|NAME", to=to, key=key, resolve=tenant_ids if each else tenant_id,
               help="the tenant, by id or name (default: the token's own tenant"
                    + ("; every tenant for a platform admin)" if each else ")"))
