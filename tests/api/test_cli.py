"""The `gpuaas` command against real PostgreSQL: db upgrade, admin bootstrap, and serve with the
embedded server in a private state directory."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

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


def test_the_client_commands_of_jobs_nodes_keys_and_logins_are_registered():
    parser = build_parser()
    assert {"jobs", "nodes", "keys"} <= set(parser._subparsers._group_actions[0].choices)
    for argv, module in ((["jobs", "list", "hpc"], "jobs"), (["nodes", "drain", "hpc", "n1", "--reason", "r"], "nodes"),
                         (["keys", "list"], "keys"), (["instances", "access", "hpc"], "instances"),
                         (["instances", "access-sync", "hpc"], "instances")):
        assert parser.parse_args(argv).func.__module__ == f"gpuaas_api.commands.{module}", argv


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


def test_migrators_that_start_together_on_a_new_database_all_succeed(pg_uri):
    # Serve replicas started at once against a new database each migrate it (issue 28).
    from concurrent.futures import ThreadPoolExecutor

    from psycopg.conninfo import make_conninfo

    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS cli_racing WITH (FORCE)")
        conn.execute("CREATE DATABASE cli_racing")
    url = make_conninfo(pg_uri, dbname="cli_racing")
    with ThreadPoolExecutor(4) as pool:
        applied = list(pool.map(lambda _: dbmod.upgrade(url), range(4)))
    assert sorted(v for versions in applied for v in versions) == [m.version for m in dbmod.available_migrations()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(proc, port: int) -> httpx.Response:
    deadline = time.monotonic() + 60
    while True:
        try:
            r = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
            if r.status_code == 200:
                return r
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "gpuaas serve did not become ready"
        time.sleep(0.3)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie has exited: only its exit status is left for its parent to read
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"


def test_serve_with_embedded_postgres_and_sigterm(tmp_path):
    """serve starts the embedded PostgreSQL as its own child, in GPUAAS_DATA_DIR (as root here: in a user
    namespace of its own); `admin bootstrap` attaches to it; SIGTERM to serve stops both. No user is
    added, and nothing outside the data directory changes mode."""
    port = _free_port()
    users = Path("/etc/passwd").read_text()
    parent = tmp_path / "private"
    parent.mkdir(mode=0o700)
    data_dir = parent / "pg"
    env = os.environ | {"GPUAAS_DATA_DIR": str(data_dir), "XDG_RUNTIME_DIR": str(tmp_path)}
    env.pop("DATABASE_URL", None)
    proc = subprocess.Popen(CLI + ["serve", "--port", str(port)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert _wait_ready(proc, port).json() == {"status": "ready"}
        assert (data_dir / "pgdata" / "PG_VERSION").exists()
        postmaster = int((data_dir / "pgdata" / "postmaster.pid").read_text().split()[0])
        assert Path(f"/proc/{postmaster}/stat").read_text().split(")")[-1].split()[1] == str(proc.pid)
        spec = httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=60).json()  # built on first request
        assert "/v1/projects/{project_id}/instances" in spec["paths"]
        boot = run(["admin", "bootstrap"], {"GPUAAS_DATA_DIR": str(data_dir), "XDG_RUNTIME_DIR": str(tmp_path)})
        me = httpx.get(f"http://127.0.0.1:{port}/v1/me", headers={"Authorization": f"Bearer {boot.stdout.strip()}"})
        assert me.status_code == 200 and me.json()["grants"][0]["role"] == "platform_admin"
        assert _alive(postmaster), "admin bootstrap stopped a server it did not start"
        url = run(["db", "url"], {"GPUAAS_DATA_DIR": str(data_dir)}).stdout.strip()
        assert url.startswith("postgresql://") and "host=" in url
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, out[-2000:]
    assert not _alive(postmaster), "the embedded PostgreSQL outlived serve's SIGTERM"
    assert "embedded PostgreSQL" in out and "stopped" in out
    assert stat.S_IMODE(parent.stat().st_mode) == 0o700
    assert Path("/etc/passwd").read_text() == users, "starting the embedded PostgreSQL added a user"
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    gone = run(["db", "url"], {"GPUAAS_DATA_DIR": str(data_dir)}, check=False)
    assert gone.returncode == 1 and "no embedded PostgreSQL runs" in gone.stderr


def test_serve_log_level_reaches_uvicorn(tmp_path, pg_uri):
    """--log-level after `serve` sets uvicorn's level too: at WARNING its INFO lines are gone."""
    port = _free_port()
    env = os.environ | {"DATABASE_URL": pg_uri}
    outputs = {}
    for level in ("info", "warning"):
        proc = subprocess.Popen(CLI + ["serve", "--port", str(port), "--log-level", level], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            _wait_ready(proc, port)
        finally:
            proc.send_signal(signal.SIGTERM)
            outputs[level] = proc.communicate(timeout=60)[0]
    assert "Uvicorn running on" in outputs["info"] and "Application startup complete" in outputs["info"]
    assert "Uvicorn running on" not in outputs["warning"], outputs["warning"]
    assert "INFO" not in outputs["warning"], outputs["warning"]


def test_a_bad_setting_is_one_line_that_names_it(tmp_path):
    for env, name in (({"GPUAAS_POOL_MAX": "ten"}, "GPUAAS_POOL_MAX"),
                      ({"GPUAAS_SSH_HOST_KEY_CHECKING": "maybe"}, "GPUAAS_SSH_HOST_KEY_CHECKING"),
                      ({"GPUAAS_OPERATION_TIMEOUTS": "deploy=soon"}, "GPUAAS_OPERATION_TIMEOUTS")):
        for command in (["serve"], ["worker"], ["db", "upgrade"]):
            done = run(command, env, check=False)
            assert done.returncode == 2, done
            assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
            assert done.stderr.startswith(f"gpuaas: invalid setting {name} (") and "Traceback" not in done.stderr
    secret = run(["serve"], {"GPUAAS_SECRET_KEY": "hunter2"}, check=False)
    assert secret.returncode == 2 and "GPUAAS_SECRET_KEY" in secret.stderr and "hunter2" not in secret.stderr
    config = tmp_path / "gpuaas.toml"
    config.write_text('pool_max = "many"\n')
    done = run(["--config", str(config), "serve"], {}, check=False)
    assert done.returncode == 2 and done.stderr.strip() == (
        f"gpuaas: invalid setting pool_max in {config}: Input should be a valid integer, unable to parse "
        "string as an integer, got 'many'")
