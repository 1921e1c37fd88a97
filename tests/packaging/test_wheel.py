"""Item 1 of issue 11: the wheel carries everything. It is installed into a fresh virtual environment
outside the checkout (offline, from the wheelhouse), and from a directory outside the checkout, with a
bare environment and an empty home, `gpuaas` migrates, serves, answers, stores content in its default
store, backs its database up and restores it into a new embedded server."""

from __future__ import annotations

import hashlib
import signal
import socket
import subprocess
import time
import zipfile
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(wheelhouse, tmp_path_factory):
    where = tmp_path_factory.mktemp("installed")
    venv = where / "venv"
    subprocess.run(["python3", "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin/pip"), "install", "--quiet", "--no-index", "--find-links", str(wheelhouse),
                    "gpuaas-apps"], check=True, capture_output=True, text=True, timeout=600)
    return venv


def bare_env(home: Path, venv: Path, **extra: str) -> dict[str, str]:
    """What a fresh login has: no GPUAAS_* or DATABASE_URL, no XDG dirs, this venv first on PATH."""
    return {"HOME": str(home), "PATH": f"{venv}/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", **extra}


def exited(pid: int) -> bool:
    """Gone, or a zombie (exited; only its status is left for its parent to read)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def gpuaas(venv: Path, args: list[str], env: dict, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin/gpuaas"), *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=180, check=check)


def test_the_wheel_carries_the_migrations(wheelhouse):
    wheel = next(wheelhouse.glob("gpuaas_apps-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(Path(n).name for n in names if n.startswith("gpuaas_api/migrations/") and n.endswith(".sql"))
    assert shipped == sorted(p.name for p in (ROOT / "api/gpuaas_api/migrations").glob("*.sql"))
    assert "gpuaas_api/embedded_db.py" in names
    console = sorted(Path(n).name for n in names if n.startswith("gpuaas_api/console/static/"))
    assert console == sorted(p.name for p in (ROOT / "api/gpuaas_api/console/static").iterdir()), console


def test_installed_outside_the_checkout_migrates_serves_and_answers(installed, tmp_path):
    venv = installed
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir(mode=0o700)
    work.mkdir()
    env = bare_env(home, venv)
    # The package is the installed one, not the checkout's.
    where = subprocess.run([str(venv / "bin/python"), "-c", "import gpuaas_api; print(gpuaas_api.__file__)"],
                           env=env, cwd=work, capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(venv)), where

    migrated = gpuaas(venv, ["db", "upgrade"], env, work)
    assert migrated.stdout.startswith("applied migrations: 0001"), migrated
    state = home / ".local/state/gpuaas"
    assert (state / "postgres/pgdata/PG_VERSION").is_file()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve = subprocess.Popen([str(venv / "bin/gpuaas"), "serve", "--port", str(port)], env=env, cwd=work,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert serve.poll() is None and time.monotonic() < deadline, "serve did not become ready"
            time.sleep(0.3)
        token = gpuaas(venv, ["admin", "bootstrap", "--email", "ops@example.com"], env, work).stdout.strip()
        # The web console's files come from the installed package (tests/console runs the page itself).
        page = httpx.get(f"{base}/console/console.js")
        assert page.status_code == 200, page.text
        assert page.text == (ROOT / "api/gpuaas_api/console/static/console.js").read_text()
        auth = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{base}/v1/me", headers=auth).json()["grants"][0]["role"] == "platform_admin"
        tenant = httpx.post(f"{base}/v1/tenants", headers=auth, json={"name": "acme"})
        assert tenant.status_code == 201, tenant.text

        # The default content store is under the state dir, not in a checkout.
        blob = b"a collection build, as far as the store cares"
        digest = "sha256:" + hashlib.sha256(blob).hexdigest()
        stored = httpx.put(f"{base}/v1/content/{digest}", headers=auth, content=blob)
        assert stored.status_code == 201, stored.text
        assert [p.read_bytes() for p in (state / "content").rglob("*") if p.is_file()] == [blob]

        backup = tmp_path / "gpuaas.dump"
        assert "backup written" in gpuaas(venv, ["db", "backup", str(backup)], env, work).stdout
        assert backup.stat().st_mode & 0o777 == 0o600
        postmaster = int((state / "postgres/pgdata/postmaster.pid").read_text().split()[0])
    finally:
        serve.send_signal(signal.SIGTERM)
        log = serve.communicate(timeout=60)[0]
    assert serve.returncode == 0, log[-2000:]
    assert exited(postmaster), "the embedded PostgreSQL outlived serve's SIGTERM"

    # Restore into a new embedded server: the tenant and the admin are back.
    restored_env = env | {"GPUAAS_DATA_DIR": str(tmp_path / "restored")}
    assert gpuaas(venv, ["db", "restore", str(backup)], restored_env, work).stdout.startswith("restored ")
    again = gpuaas(venv, ["admin", "bootstrap"], restored_env, work, check=False)
    assert again.returncode == 1 and "already exists" in again.stderr
    refused = gpuaas(venv, ["db", "restore", str(backup)], restored_env, work, check=False)
    assert refused.returncode == 1 and "not empty" in refused.stderr


def test_a_bad_setting_in_the_installed_command_is_one_line(installed, tmp_path):
    env = bare_env(tmp_path, installed, GPUAAS_POOL_MAX="ten")
    done = gpuaas(installed, ["serve"], env, tmp_path, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == ["gpuaas: invalid setting GPUAAS_POOL_MAX (pool_max): Input should be a "
                                        "valid integer, unable to parse string as an integer, got 'ten'"]
