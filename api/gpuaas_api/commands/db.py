from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("db", help="database maintenance: migrations, URL, backup and restore")
    dbsub = p.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    up = dbsub.add_parser("upgrade", help="apply pending schema migrations (forward only)")
    up.set_defaults(func=upgrade)
    url = dbsub.add_parser("url", help="print the database URL in use: DATABASE_URL, or the running embedded "
                                       "server's (start `gpuaas serve` first)")
    url.set_defaults(func=print_url)
    backup = dbsub.add_parser("backup", help="write the whole database to FILE (pg_dump custom format, mode 0600); "
                                             "safe while the service runs")
    backup.add_argument("file", type=Path)
    backup.set_defaults(func=backup_db)
    restore = dbsub.add_parser("restore", help="load a backup into an empty database (a new data_dir, or a new "
                                               "database in DATABASE_URL), then apply this release's migrations")
    restore.add_argument("file", type=Path)
    restore.set_defaults(func=restore_db)


def upgrade(args: argparse.Namespace) -> int:
    from .. import db
    from ..config import Settings

    with db.database_url(Settings.from_model(args.settings)) as url:
        applied = db.upgrade(url)
    print(f"applied migrations: {', '.join(f'{v:04d}' for v in applied)}" if applied else "schema is up to date")
    return 0


def print_url(args: argparse.Namespace) -> int:
    from .. import db
    from ..config import Settings

    settings = Settings.from_model(args.settings)
    url = settings.database_url or db.embedded_server(settings).attach()
    if url is None:
        print(f"gpuaas db url: no embedded PostgreSQL runs in {settings.data_dir}: start `gpuaas serve` "
              "(or set DATABASE_URL)", file=sys.stderr)
        return 1
    print(url)
    return 0


def _tool(name: str, settings) -> str:
    """pg_dump / pg_restore: the embedded server's own, or for DATABASE_URL the one on PATH (else
    Debian's newest)."""
    import shutil

    from ..embedded_db import EmbeddedError, debian_bin_dirs, find_bin_dir

    if not settings.database_url:
        path = find_bin_dir(settings.postgres_bin_dir) / name
    else:
        found = shutil.which(name) or next((str(d / name) for d in debian_bin_dirs() if (d / name).is_file()), None)
        path = Path(found) if found else None
    if path is None or not Path(path).is_file():
        raise EmbeddedError(f"{name} not found: install Debian's postgresql-client package")
    return str(path)


def backup_db(args: argparse.Namespace) -> int:
    import os
    import subprocess

    from .. import db
    from ..config import Settings

    settings = Settings.from_model(args.settings)
    pg_dump = _tool("pg_dump", settings)
    with db.database_url(settings) as url:
        os.close(os.open(args.file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        os.chmod(args.file, 0o600)
        done = subprocess.run([pg_dump, "--format=custom", "--no-owner", f"--file={args.file}", f"--dbname={url}"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"gpuaas db backup: pg_dump failed: {done.stderr.strip()}", file=sys.stderr)
        return 1
    print(f"backup written to {args.file} ({args.file.stat().st_size} bytes)")
    return 0


def restore_db(args: argparse.Namespace) -> int:
    import subprocess

    import psycopg

    from .. import db
    from ..config import Settings

    settings = Settings.from_model(args.settings)
    if not args.file.is_file():
        print(f"gpuaas db restore: {args.file}: no such file", file=sys.stderr)
        return 2
    pg_restore = _tool("pg_restore", settings)
    with db.database_url(settings) as url:
        with psycopg.connect(url) as conn:
            used = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0]
        if used:
            print("gpuaas db restore: the database is not empty: restore into a new data_dir (GPUAAS_DATA_DIR) "
                  "or a new, empty database (DATABASE_URL)", file=sys.stderr)
            return 1
        done = subprocess.run([pg_restore, "--exit-on-error", "--single-transaction", "--no-owner",
                               f"--dbname={url}", str(args.file)], stdin=subprocess.DEVNULL, capture_output=True,
                              text=True)
        if done.returncode != 0:
            print(f"gpuaas db restore: pg_restore failed: {done.stderr.strip()}", file=sys.stderr)
            return 1
        applied = db.upgrade(url)
    print(f"restored {args.file}" + (f"; applied migrations: {', '.join(f'{v:04d}' for v in applied)}"
                                      if applied else "; schema is up to date"))
    return 0
