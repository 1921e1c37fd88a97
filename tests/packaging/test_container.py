"""Item 1 of issue 11: packaging/Containerfile builds the service image with podman (from the
wheelhouse, on the test hosts' Debian 12 base since no registry is reachable here), the image serves
and stops cleanly, and packaging/systemd's units run `serve` and `worker` under a real systemd (the
image booted as a system container, with the wheel installed where the units expect it)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest
from gpuaas_api import testhosts

ROOT = Path(__file__).resolve().parents[2]
PREFIX = f"gpuaas-pkgtest-{uuid.uuid4().hex[:6]}"


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check, timeout=timeout)


@pytest.fixture(scope="module")
def image(wheelhouse):
    base = testhosts.build("base")
    ref = f"localhost/{PREFIX}:test"
    context = Path(tempfile.mkdtemp(prefix="gpuaas-image-"))
    try:
        shutil.copytree(wheelhouse, context / "wheels")
        podman("build", "--network", "host", "-f", str(ROOT / "packaging/Containerfile"),
               "--build-arg", f"BASE={base}", "-t", ref, str(context), timeout=900)
        yield ref
    finally:
        shutil.rmtree(context, ignore_errors=True)
        podman("rmi", "-f", ref, check=False)


@pytest.fixture
def container():
    names = []

    def name(role: str) -> str:
        names.append(f"{PREFIX}-{role}")
        return names[-1]

    yield name
    for n in names:
        podman("rm", "-f", "-t", "0", n, check=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_image_serves_unprivileged_and_stops_with_its_database(image, container):
    name, port = container("serve"), free_port()
    # Host networking on loopback only: nothing else reaches it.
    podman("run", "-d", "--name", name, "--network", "host", "-e", "GPUAAS_HOST=127.0.0.1",
           "-e", f"GPUAAS_PORT={port}", image)
    base = f"http://127.0.0.1:{port}"

    def ready():
        try:
            return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            assert podman("inspect", "-f", "{{.State.Running}}", name).stdout.strip() == "true", \
                podman("logs", name).stdout[-2000:]
            return False

    wait_for(ready, 120, "the container's API")
    token = podman("exec", name, "gpuaas", "admin", "bootstrap").stdout.strip()
    me = httpx.get(f"{base}/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert me.status_code == 200 and me.json()["grants"][0]["role"] == "platform_admin"
    processes = podman("top", name, "user", "args").stdout
    assert any(line.startswith("gpuaas") and "postgres -D /var/lib/gpuaas/postgres/pgdata" in line
               for line in processes.splitlines()), processes
    assert not any(line.startswith("root") for line in processes.splitlines()[1:]), processes

    podman("stop", "-t", "60", name, timeout=120)
    code = podman("inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip()
    logs = podman("logs", name)
    assert code == "0", logs.stdout + logs.stderr
    assert "embedded PostgreSQL /var/lib/gpuaas/postgres/pgdata stopped" in logs.stdout + logs.stderr


def test_a_bad_setting_stops_the_image_with_one_line(image):
    done = podman("run", "--rm", "--network", "none", "-e", "GPUAAS_LOG_LEVEL=chatty", image, check=False)
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == ["gpuaas: invalid setting GPUAAS_LOG_LEVEL (log_level): Input should be "
                                        "'DEBUG', 'INFO', 'WARNING', 'ERROR' or 'CRITICAL', got 'CHATTY'"]


def test_systemd_units_run_serve_and_worker_and_stop_them(image, container):
    name = container("systemd")
    podman("run", "-d", "--name", name, "--network", "none", "--systemd=always", "--user", "root",
           "--entrypoint", "/sbin/init", image)

    def sh(command: str, check: bool = True) -> subprocess.CompletedProcess:
        return podman("exec", name, "sh", "-c", command, check=check, timeout=180)

    wait_for(lambda: sh("systemctl is-system-running", check=False).stdout.strip() in ("running", "degraded"),
             90, "systemd in the container")
    for unit in ("gpuaas-serve.service", "gpuaas-worker.service"):
        podman("cp", str(ROOT / "packaging/systemd" / unit), f"{name}:/etc/systemd/system/{unit}")
    sh("install -d -m 0755 /etc/gpuaas && printf 'GPUAAS_PORT=8080\\nGPUAAS_LOG_LEVEL=INFO\\n' "
       "> /etc/gpuaas/gpuaas.env && chmod 0600 /etc/gpuaas/gpuaas.env && systemctl daemon-reload")
    sh("systemctl start gpuaas-serve.service")
    probe = ("python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8080/readyz', "
             "timeout=2).read().decode())\"")
    wait_for(lambda: '"ready"' in sh(probe, check=False).stdout, 120, "gpuaas-serve to answer /readyz")
    sh("systemctl start gpuaas-worker.service")
    wait_for(lambda: "started (concurrency 1)" in sh("journalctl -u gpuaas-worker --no-pager", check=False).stdout,
             90, "the worker to start")
    assert sh("systemctl is-active gpuaas-serve gpuaas-worker").stdout.split() == ["active", "active"]
    server = sh("pgrep -u gpuaas -f 'postgres -D /var/lib/gpuaas/postgres/pgdata' | head -1").stdout.strip()
    assert server.isdigit()
    assert sh(f"ps -o ppid= -p {server}").stdout.strip() == \
        sh("systemctl show -p MainPID --value gpuaas-serve").stdout.strip()

    sh("systemctl stop gpuaas-worker.service gpuaas-serve.service")
    for unit in ("gpuaas-serve", "gpuaas-worker"):
        state = [sh(f"systemctl show -p {p} --value {unit}").stdout.strip() for p in ("ActiveState", "Result")]
        assert state == ["inactive", "success"], (unit, state)
    assert sh("pgrep -u gpuaas postgres", check=False).returncode == 1, "PostgreSQL outlived gpuaas-serve"
    journal = sh("journalctl -u gpuaas-serve --no-pager").stdout
    assert "embedded PostgreSQL /var/lib/gpuaas/postgres/pgdata stopped" in journal, journal[-3000:]
