"""Fixtures for the client CLI tests: the operations tests' world (embedded PostgreSQL, tenants,
projects, tokens, the test app of tests/apps/opsapp registered through the API, in-process workers),
the app served over real HTTP, and `gpuaas` run as its own process against it, with a home and a
config directory of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from gpuaas_api.config import DEFAULT_OPERATION_TIMEOUTS, OperationSettings
from operations import conftest as ops_fixtures
from operations.helpers import serving

pg_uri, db_url, database, client = ops_fixtures.pg_uri, ops_fixtures.db_url, ops_fixtures.database, ops_fixtures.client
app, ops, _no_stray_env = ops_fixtures.app, ops_fixtures.ops, ops_fixtures._no_stray_env
local_hosts = ops_fixtures.local_hosts


@pytest.fixture
def op_settings(tmp_path) -> OperationSettings:
    # As the operations tests', with a longer lease: these tests look at one attempt of each run, and a
    # 3 s lease can expire on a loaded machine (new attempts are the queue tests' subject).
    return OperationSettings(state_dir=tmp_path / "state", ssh_private_key_file=None, ssh_host_key_checking=False,
                             secret_key=Fernet.generate_key().decode(), lease_seconds=30, max_attempts=2,
                             poll_seconds=0.2, timeouts=dict(DEFAULT_OPERATION_TIMEOUTS),
                             # statuses follow the runs alone here; the health check has tests of its own
                             health_concurrency=0)

GPUAAS = str(Path(sys.executable).parent / "gpuaas")


@dataclass
class Cli:
    url: str
    home: Path

    @property
    def config_file(self) -> Path:
        return self.home / "config" / "gpuaas" / "config.toml"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUAAS_", "XDG_"))}
        return env | {"HOME": str(self.home), "XDG_CONFIG_HOME": str(self.home / "config"), "NO_COLOR": "1"} | extra

    def __call__(self, *args: str, token: str | None = None, stdin: str | None = None, timeout: float = 180,
                 api: bool = True, umask: int | None = None, cwd: Path | None = None,
                 **env: str) -> subprocess.CompletedProcess:
        """`gpuaas ARGS` (in `cwd`, default this process's) with GPUAAS_API set to the served app (unless not
        `api`: the config file only), and GPUAAS_TOKEN when `token` is given."""
        extra = ({"GPUAAS_API": self.url} if api else {}) | ({"GPUAAS_TOKEN": token} if token else {}) | env
        return subprocess.run([GPUAAS, *args], env=self.env(**extra), input=stdin, capture_output=True, text=True,
                              timeout=timeout, cwd=cwd, preexec_fn=None if umask is None else lambda: os.umask(umask))

    def popen(self, *args: str, token: str, **kwargs) -> subprocess.Popen:
        return subprocess.Popen([GPUAAS, *args], env=self.env(GPUAAS_API=self.url, GPUAAS_TOKEN=token),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.fixture
def served(app):
    with serving(app) as url:
        yield url


@pytest.fixture
def cli(served, tmp_path) -> Cli:
    home = tmp_path / "home"
    home.mkdir()
    return Cli(served, home)


def out(done) -> str:
    """The stdout of a CLI run that must have succeeded."""
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


def rows(done) -> list[list[str]]:
    """A successful CLI run's table, split into words per line."""
    return [line.split() for line in out(done).splitlines()]
