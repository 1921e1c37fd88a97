"""The client defects of issue 27 (item 2), one test each, every command run as its own process: `apps
register` reads the login like the other commands and names the address it cannot reach, ids are
taken by any unique prefix, a closed pipe ends a command quietly, serve and worker warn about the
development secret key when they start, and `--help` lists the development commands apart."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading

from gpuaas_api.cli import build_parser
from operations.helpers import TEST_APP, make_instance, opsapp_build

from .conftest import GPUAAS

SA = "service_account"
HEX = "0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_apps_register_reads_the_login_and_names_the_address_it_cannot_reach(ops, cli):
    admin = ops.w.tokens["platform_admin"]
    build = str(opsapp_build("1.0.0"))  # the ops fixture registered it: registering it again changes nothing
    assert cli("login", "--url", cli.url, "--token-stdin", stdin=admin + "\n", api=False).returncode == 0

    # The login alone: no GPUAAS_TOKEN, no URL option; and no `INFO httpx` line per request.
    done = cli("apps", "register", build, api=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{TEST_APP} 1.0.0: active, artifact "), done.stdout
    assert done.stderr == ""

    # --url overrides the stored URL; an address where nothing listens is named.
    dead = f"http://127.0.0.1:{free_port()}"
    refused = cli("apps", "register", build, "--url", dead, api=False)
    assert refused.returncode == 1 and refused.stderr.startswith(f"gpuaas: cannot reach {dead} (ConnectError: "), \
        refused.stderr
    assert len(refused.stderr.splitlines()) == 1, refused.stderr

    # The old form still works (the demo and scripts use it): --api with GPUAAS_TOKEN, nothing stored.
    assert cli("logout", api=False).returncode == 0
    old = cli("apps", "register", build, "--api", cli.url, token=admin, api=False)
    assert old.returncode == 0 and old.stdout.startswith(f"{TEST_APP} 1.0.0: active"), old.stderr
    assert "--api" not in cli("apps", "register", "--help").stdout


def test_ids_are_taken_by_any_unique_prefix(ops, cli):
    w, token = ops.w, ops.w.tokens[SA]
    instance, _ = make_instance(ops, "prefixes", workers=1)
    op = w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()  # no worker: it stays queued

    shown = cli("ops", "show", op["id"][:8], token=token)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == f"operation {op['id']}"
    assert cli("instances", "show", instance["id"][:8], token=token).stdout.splitlines()[0] == \
        f"prefixes  {instance['id']}"
    member = next(m for m in w.call(SA, "GET", f"/v1/instances/{instance['id']}/members", 200).json()["items"]
                  if m["role"] == "worker")
    listed = cli("members", "list", instance["id"][:5], token=token)
    assert listed.returncode == 0 and member["id"] in listed.stdout, listed.stderr
    canceled = cli("ops", "cancel", op["id"][:4], token=token)
    assert canceled.returncode == 0 and canceled.stdout.startswith(f"deploy {op['id']}: canceled"), canceled
    followed = cli("ops", "follow", op["id"][:6], token=token)
    assert followed.returncode == 3, (followed.stdout, followed.stderr)

    # No match: a first digit no operation of the project's instances starts with.
    other = next(d for d in HEX if not op["id"].startswith(d))
    missing = cli("ops", "show", other, token=token)
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == f"gpuaas: no operation with an id starting {other} in the projects this token may read\n"

    # Ambiguous: among 17 projects two ids share their first digit (16 digits).
    tenant = w.ids["tenant_a"]
    projects = w.call("tenant_admin", "GET", f"/v1/tenants/{tenant}/projects", 200).json()["items"]
    while not (shared := [d for d in HEX if sum(p["id"].startswith(d) for p in projects) > 1]):
        projects.append(w.call("tenant_admin", "POST", f"/v1/tenants/{tenant}/projects", 201,
                               json={"name": f"prefix-{len(projects)}"}).json())
    digit = shared[0]
    ambiguous = cli("instances", "list", "--project", digit, token=w.tokens["tenant_admin"])
    matches = ", ".join(sorted(p["id"] for p in projects if p["id"].startswith(digit)))
    assert (ambiguous.returncode, ambiguous.stdout) == (1, "")
    assert ambiguous.stderr == f"gpuaas: project id prefix {digit} is ambiguous: matches {matches}\n"


def test_a_closed_pipe_ends_a_command_quietly(ops, cli):
    make_instance(ops, "piped")
    # `gpuaas instances show piped | head -0`: the reader is gone before the command writes.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([GPUAAS, "instances", "show", "piped"], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=120, env=cli.env(GPUAAS_API=cli.url, GPUAAS_TOKEN=ops.w.tokens[SA]))
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")


def test_serve_and_worker_warn_about_the_development_key_when_they_start(db_url, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUAAS_")}
    env |= {"DATABASE_URL": db_url, "GPUAAS_STATE_DIR": str(tmp_path / "state")}
    for command, started in ((["serve", "--port", str(free_port())], "Application startup complete"),
                             (["worker"], "started (concurrency 1)")):
        proc = subprocess.Popen([GPUAAS, *command], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        watchdog = threading.Timer(120, proc.kill)
        watchdog.start()
        lines = []
        try:
            for line in proc.stdout:
                lines.append(line)
                if started in line:
                    break
        finally:
            watchdog.cancel()
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
        assert started in lines[-1], lines
        assert any("GPUAAS_SECRET_KEY is not set: using the development key in " in line for line in lines), lines


def test_help_lists_the_development_commands_apart():
    parser = build_parser()
    text = parser.format_help()
    production, _, development = text.partition("development and testing:\n")
    assert development, text

    def commands(section: str) -> list[str]:
        return re.findall(r"^    (\S+)  ", section, re.M)  # as argparse lists them: four spaces, the name

    assert commands(development) == ["demo", "testhosts"], development
    assert {"serve", "worker", "instances", "ops"} <= set(commands(production)), production
    assert not {"demo", "testhosts"} & set(commands(production)), production
    # Still commands.
    assert parser.parse_args(["demo"]).func.__module__ == "gpuaas_api.commands.demo"
    assert parser.parse_args(["testhosts", "down", "--all"]).command == "testhosts"
