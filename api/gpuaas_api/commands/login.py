"""`gpuaas login` and `gpuaas logout`: the client's URL and token in its config file (mode 0600)."""

from __future__ import annotations

import argparse
import getpass
import os
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("login", help="store the service URL and a token for the client commands "
                                     "(checked against the service first; file mode 0600)")
    p.add_argument("--url", help="the control service's URL (default: GPUAAS_API, else the stored one)")
    p.add_argument("--token-stdin", action="store_true",
                   help="read the token from standard input (default: prompt for it on a terminal); a token "
                        "is never an argument, which other users could see in the process list")
    p.add_argument("--project", metavar="ID|NAME", help="a default project for names (stored as its id)")
    p.set_defaults(func=login)
    out = sub.add_parser("logout", help="remove the stored token (the URL and default project stay)")
    out.set_defaults(func=logout)


def login(args: argparse.Namespace) -> int:
    from ..client import config, lookup
    from ..client.errors import ApiError, ClientError
    from ..client.http import Client

    try:
        stored = config.read_file()
        url = args.url or os.environ.get(config.URL_ENV) or stored.get("url")
        if not url:
            raise ClientError("pass --url URL (or set GPUAAS_API)")
        if args.token_stdin:
            token = sys.stdin.readline().strip()
        elif sys.stdin.isatty():
            token = getpass.getpass(f"token for {url}: ").strip()
        else:
            raise ClientError("standard input is not a terminal: pass the token with --token-stdin")
        if not token:
            raise ClientError("no token given")
        with Client(url, token) as client:
            me = client.get("/v1/me")
            project = lookup.project(client, args.project)["id"] if args.project else stored.get("project")
        path = config.write({"url": url, "token": token, "project": project})
    except ApiError as exc:
        print(f"gpuaas login: {url} refused the token: {exc}", file=sys.stderr)
        return 1
    except (ClientError, config.ConfigFileError) as exc:
        print(f"gpuaas login: {exc}", file=sys.stderr)
        return 1
    print(f"logged in to {url} as {me['kind']} {me['name']}; token stored in {path} (mode 0600)")
    if os.environ.get(config.TOKEN_ENV):
        print(f"note: {config.TOKEN_ENV} is set and overrides the stored token", file=sys.stderr)
    return 0


def logout(args: argparse.Namespace) -> int:
    from ..client import config

    try:
        stored = config.read_file()
        if not stored.get("token"):
            print("not logged in: no token stored")
            return 0
        path = config.write({k: v for k, v in stored.items() if k != "token"})
    except config.ConfigFileError as exc:
        print(f"gpuaas logout: {exc}", file=sys.stderr)
        return 1
    print(f"logged out of {stored.get('url', 'the service')}: token removed from {path}")
    if os.environ.get(config.TOKEN_ENV):
        print(f"note: {config.TOKEN_ENV} is still set in this environment", file=sys.stderr)
    return 0
