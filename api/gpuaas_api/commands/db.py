from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("db", help="database maintenance")
    dbsub = p.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    up = dbsub.add_parser("upgrade", help="apply pending schema migrations (forward only)")
    up.set_defaults(func=upgrade)
    url = dbsub.add_parser("url", help="print the database URL in use (starts the embedded server if needed)")
    url.set_defaults(func=print_url)


def upgrade(args: argparse.Namespace) -> int:
    from .. import db
    from ..config import Settings

    applied = db.upgrade(db.resolve_database_url(Settings()))
    print(f"applied migrations: {', '.join(f'{v:04d}' for v in applied)}" if applied else "schema is up to date")
    return 0


def print_url(args: argparse.Namespace) -> int:
    from .. import db
    from ..config import Settings

    print(db.resolve_database_url(Settings()))
    return 0
