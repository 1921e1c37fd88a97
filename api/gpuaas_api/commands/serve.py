from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the API (migrates on start; embedded PostgreSQL without DATABASE_URL)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from ..app import SERVER_OPTIONS, create_app

    uvicorn.run(create_app(), host=args.host, port=args.port, log_level="info", **SERVER_OPTIONS)
    return 0
