from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("admin", help="platform administration")
    asub = p.add_subparsers(dest="admin_command", metavar="ACTION", required=True)
    boot = asub.add_parser("bootstrap", help="create the first platform admin and print its token once")
    boot.add_argument("--email", default="admin@gpuaas.local")
    boot.add_argument("--ttl-days", type=int, default=30)
    boot.set_defaults(func=bootstrap)


def bootstrap(args: argparse.Namespace) -> int:
    from .. import db
    from ..config import Settings
    from ..errors import ApiError
    from ..iam.service import bootstrap_platform_admin

    with db.database_url(Settings.from_model(args.settings)) as url:
        db.upgrade(url)
        database = db.Database(url, min_size=1, max_size=1)
        database.open()
        try:
            with database.transaction() as conn:
                token = bootstrap_platform_admin(conn, args.email, args.ttl_days)
        except ApiError as exc:
            print(f"gpuaas admin bootstrap: {exc.message}", file=sys.stderr)
            return 1
        finally:
            database.close()
    print(token)
    print(f"platform admin {args.email} created; the token above is shown only once", file=sys.stderr)
    return 0
