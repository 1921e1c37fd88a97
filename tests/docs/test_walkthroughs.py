"""The newcomers' walkthroughs, docs/first-instance.md and docs/try-oci-locally.md, run as a newcomer pastes them:
each page's bash blocks in order, in one shell, from the checkout's root, in an empty home directory, with no
gpuaas, XDG or Ansible variables and without the virtual environment on PATH. Only the API's port (to a free one)
and the test hosts' prefix (to one of this run) are changed.

In a block, a line `# TEXT` is what the command above it prints: the shell's output must hold these lines in
the page's order (`...` stands for any text; runs of spaces count as one). When the page reaches its "Clean up"
section, the shell waits while the test reads the final state from the hosts themselves; then it cleans up as the
page says. Every test host of the run is removed afterwards, and the home directory (tokens, keys, the database)
with it, whatever happened."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from api.test_readme_quickstart import _exited, free_port
from gpuaas_api import testhosts

pytestmark = [pytest.mark.hosts]

ROOT = Path(__file__).resolve().parents[2]
CLEAN_UP = "\n## Clean up\n"


def expected_lines(script: str) -> list[str]:
    """The output a page shows: the `# ` lines of its blocks (a `# ...` alone shows only that more follows)."""
    return [line[2:] for line in script.splitlines() if line.startswith("# ") and line != "# ..."]


def missing_output(expected: list[str], printed: str) -> str | None:
    """The first expected line that the printed lines after the previous one's match do not hold, if any. Runs of
    spaces count as one (a table's columns widen with what they hold)."""
    lines = [" ".join(line.split()) for line in printed.splitlines()]
    at = 0
    for want in expected:
        pattern = re.compile(".*?".join(re.escape(part) for part in " ".join(want.split()).split("...")))
        at = next((i + 1 for i in range(at, len(lines)) if pattern.fullmatch(lines[i])), -1)
        if at < 0:
            return want
    return None


def page_script(page: str, replace: dict[str, str]) -> tuple[str, str]:
    """A page's bash blocks, with `replace` done on them: those before its "Clean up" section, and those in it."""
    text = (ROOT / "docs" / page).read_text()
    for old, new in replace.items():
        assert old in text, f"{page} no longer says {old!r}"
        text = text.replace(old, new)
    assert CLEAN_UP in text, f"{page} lost its clean-up section"
    before, after = text.split(CLEAN_UP)
    blocks = [re.findall(r"```bash\n(.*?)```", part, re.S) for part in (before, after)]
    assert blocks[0] and blocks[1], f"{page} lost its command blocks"
    return "\n".join(blocks[0]), "\n".join(blocks[1])


def newcomer_env(home: Path) -> dict[str, str]:
    venv = str(ROOT / ".venv" / "bin")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUAAS_", "XDG_", "ANSIBLE_")) and k not in {"DATABASE_URL", "PGDATA", "VIRTUAL_ENV"}}
    env["PATH"] = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != venv)
    return env | {"HOME": str(home), "NO_COLOR": "1"}


def walk(page: str, tmp_path: Path, prefix: str, replace: dict[str, str],
         check: Callable[[Path], None], serves: bool = False, timeout: float = 600) -> None:
    """Runs the page in a new home under tmp_path and checks what it printed; calls check(home) before its
    clean-up. A page that `serves` runs the service, whose embedded PostgreSQL its clean-up must stop."""
    home = tmp_path / "home"
    home.mkdir()
    body, clean_up = page_script(page, replace)
    ready, go = tmp_path / "ready", tmp_path / "go"
    script = f"{body}\ntouch {ready}; while [ ! -e {go} ]; do sleep 0.2; done\n{clean_up}"
    stdout, stderr = tmp_path / "stdout", tmp_path / "stderr"
    postmaster = None
    try:
        # Files, not pipes: `gpuaas serve &` keeps its output open after the script ends.
        with stdout.open("w") as out_file, stderr.open("w") as err_file:
            shell = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=newcomer_env(home),
                                     stdout=out_file, stderr=err_file, start_new_session=True)
        deadline = time.monotonic() + timeout
        try:
            while not ready.exists() and shell.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            # The embedded PostgreSQL of a page that starts the service, in the state directory it chose.
            for pid_file in home.glob("**/pgdata/postmaster.pid"):
                postmaster = int(pid_file.read_text().split()[0])
            assert ready.exists(), f"{page} stopped before its clean-up:\n{tail(stdout)}\n{tail(stderr)}{logs(home)}"
            check(home)
        finally:
            go.touch()
            try:
                shell.wait(timeout=max(60.0, deadline - time.monotonic()))
            finally:
                with contextlib.suppress(ProcessLookupError):  # what the page left running, if it stopped early
                    os.killpg(shell.pid, signal.SIGTERM)
        out = stdout.read_text()
        assert shell.returncode == 0, f"{page} failed:\n{tail(stdout)}\n{tail(stderr)}{logs(home)}"
        assert "gpa_" not in out + stderr.read_text(), f"{page} printed a token"
        missing = missing_output(expected_lines(body + clean_up), out)
        assert missing is None, f"{page} shows {missing!r}, which its commands did not print:\n{out}"
        if serves:
            assert postmaster is not None, f"{page} ran no embedded PostgreSQL"
            assert stopped(postmaster), "the embedded PostgreSQL outlived the page's clean-up"
    finally:
        testhosts.down(prefix)
        # Images the page built under the run's prefix (its clean-up removes them when it gets there).
        if built := images(f"localhost/{prefix}-*"):
            subprocess.run(["podman", "image", "rm", "--force", *built], capture_output=True, timeout=120)
        if postmaster is not None and not stopped(postmaster):
            os.kill(postmaster, signal.SIGKILL)
        shutil.rmtree(home, ignore_errors=True)  # the tokens, the hosts' key, the database


def stopped(pid: int, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while not _exited(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _exited(pid)


def images(reference: str) -> list[str]:
    listed = subprocess.run(["podman", "images", "--filter", f"reference={reference}", "--format",
                             "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True, timeout=60)
    return listed.stdout.split()


def tail(path: Path, chars: int = 3000) -> str:
    return path.read_text()[-chars:]


def logs(home: Path) -> str:
    return "".join(f"\n--- {log.name}:\n{tail(log)}" for log in sorted(home.glob("*/*.log")))


def host_sh(container: str, command: str) -> str:
    done = subprocess.run(["podman", "exec", container, "sh", "-c", command], capture_output=True, text=True,
                          timeout=60)
    return done.stdout.strip()


@pytest.mark.slow
def test_first_instance(tmp_path):
    prefix = f"first{uuid.uuid4().hex[:6]}"

    def check(home: Path) -> None:
        # The service's record, read as the platform admin the page logged in (break-glass, with its reason).
        shown = subprocess.run([str(ROOT / ".venv/bin/gpuaas"), "admin", "instances", "show", "hpc", "-o", "json",
                                "--reason", "walkthrough test: final state"], env=newcomer_env(home),
                               capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        instance = json.loads(shown.stdout)
        assert instance["status"] == "stopped", instance
        # The hosts themselves: no Slurm daemon runs, and its configuration, keys and state are gone.
        for host in ("ctl", "w1", "w2"):
            left = host_sh(f"{prefix}-{host}", "systemctl is-active munge slurmd slurmctld; "
                                               "ls -d /etc/slurm/slurm.conf /etc/munge/munge.key /var/lib/slurm/slurm* "
                                               "2>/dev/null || true")
            assert left.split() == ["inactive"] * 3, f"{host}: {left}"

    walk("first-instance.md", tmp_path, prefix,
         {"8000": str(free_port()), "--prefix first": f"--prefix {prefix}", "first-": f"{prefix}-"}, check, serves=True)


def test_try_oci_locally(tmp_path):
    prefix = f"try{uuid.uuid4().hex[:6]}"

    def check(home: Path) -> None:
        # On each replica: no unit, container or image of the workload, and no trust scope or drop-in of it.
        for host in ("web1", "web2"):
            left = host_sh(f"{prefix}-{host}",
                           "systemctl list-unit-files 'gpuaas-oci-*' --no-legend; podman ps -aq; podman images -q; "
                           "ls /etc/containers/registries.d/gpuaas-* /etc/containers/registries.conf.d/gpuaas-* "
                           "2>/dev/null; grep -c /try/web /etc/containers/policy.json || true")
            assert left.split() == ["0"], f"{host}: {left}"

    walk("try-oci-locally.md", tmp_path, prefix,
         {"--prefix try": f"--prefix {prefix}", "try-": f"{prefix}-"}, check)
