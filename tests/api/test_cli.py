"""The `gpuaas` command against real PostgreSQL: db upgrade, admin bootstrap, and serve with the
embedded server in a private state directory."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import psycopg
from gpuaas_api import db as dbmod
from gpuaas_api.cli import build_parser

CLI = [sys.executable, "-m", "gpuaas_api.cli"]


def run(args, env, check=True):
    return subprocess.run(CLI + args, env=os.environ | env, capture_output=True, text=True, timeout=120, check=check)


def test_cli_discovers_subcommand_modules():
    choices = build_parser()._subparsers._group_actions[0].choices
    assert {"serve", "db", "admin"} <= set(choices)


def test_db_upgrade_and_bootstrap(pg_uri, tmp_path):
    from psycopg.conninfo import make_conninfo

    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS cli_empty WITH (FORCE)")
        conn.execute("CREATE DATABASE cli_empty")
    url = make_conninfo(pg_uri, dbname="cli_empty")
    env = {"DATABASE_URL": url}
    assert "applied migrations: 0001" in run(["db", "upgrade"], env).stdout
    assert "schema is up to date" in run(["db", "upgrade"], env).stdout
    boot = run(["admin", "bootstrap", "--email", "ops@example.com"], env)
    token = boot.stdout.strip()
    assert token.startswith("gpa_") and "shown only once" in boot.stderr
    again = run(["admin", "bootstrap"], env, check=False)
    assert again.returncode == 1 and "already exists" in again.stderr and "gpa_" not in again.stdout
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == len(dbmod.available_migrations())
        stored = conn.execute("SELECT token_hash FROM api_tokens").fetchone()[0]
    assert token not in stored


def test_serve_with_embedded_postgres(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | {"GPUAAS_DATA_DIR": str(tmp_path / "pg"), "XDG_RUNTIME_DIR": str(tmp_path)}
    env.pop("DATABASE_URL", None)
    proc = subprocess.Popen(CLI + ["serve", "--port", str(port)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
                if r.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "gpuaas serve did not become ready"
            time.sleep(0.3)
        assert r.json() == {"status": "ready"}
        assert (tmp_path / "pg" / "PG_VERSION").exists()
        spec = httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=5).json()
        assert "/v1/projects/{project_id}/instances" in spec["paths"]
        boot = run(["admin", "bootstrap"], {"GPUAAS_DATA_DIR": str(tmp_path / "pg"), "XDG_RUNTIME_DIR": str(tmp_path)})
        me = httpx.get(f"http://127.0.0.1:{port}/v1/me", headers={"Authorization": f"Bearer {boot.stdout.strip()}"})
        assert me.status_code == 200 and me.json()["grants"][0]["role"] == "platform_admin"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
