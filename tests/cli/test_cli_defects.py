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
from operations.helpers import make_instance

from .conftest import GPUAAS

SA = "service_account"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
