"""The README's control-service quickstart, run as a newcomer would paste it: its bash blocks in order,
against a fresh embedded PostgreSQL in an empty home directory. Only the port is changed (to a free
one). The outputs the README shows in its comments must be what the commands print."""

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## The control service: `gpuaas serve` quickstart"


def quickstart_script() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(SECTION):text.index("<!-- control-service:end -->")]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert len(blocks) >= 3, "the quickstart lost its command blocks"
    return "\n".join(blocks)


def _exited(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_readme_quickstart_works_as_written(tmp_path):
    script = quickstart_script().replace("8000", str(free_port()))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUAAS_", "XDG_")) and k not in {"DATABASE_URL", "PGDATA"}}
    env["HOME"] = str(tmp_path)
    # Files, not pipes: `gpuaas serve &` keeps its output open after the script ends.
    stdout, stderr = tmp_path / "stdout", tmp_path / "stderr"
    with stdout.open("w") as out_file, stderr.open("w") as err_file:
        shell = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env,
                                 stdout=out_file, stderr=err_file, start_new_session=True)
    pid_file = tmp_path / ".local/state/gpuaas/postgres/pgdata/postmaster.pid"
    try:
        shell.wait(timeout=300)
    finally:
        postmaster = int(pid_file.read_text().split()[0]) if pid_file.exists() else None
        # The server outlives the script; SIGTERM stops it, and its embedded PostgreSQL with it.
        os.killpg(shell.pid, signal.SIGTERM)
    out, err = stdout.read_text(), stderr.read_text()
    assert shell.returncode == 0, f"the quickstart failed:\n{out[-3000:]}\n{err[-3000:]}"
    assert postmaster is not None, "serve ran no embedded PostgreSQL"
    deadline = time.monotonic() + 60
    while not _exited(postmaster):
        assert time.monotonic() < deadline, "the embedded PostgreSQL outlived serve's SIGTERM"
        time.sleep(0.2)

    version = yaml.safe_load((ROOT / "adapters/slurm.yml").read_text())["version"]
    assert '{"status":"ready"}' in out
    assert re.search(rf"^slurm {re.escape(version)}: active, artifact \S+ \(sha256:[0-9a-f]{{64}}\)$", out, re.M), out
    members = re.findall(r'^\["(controller|worker)","(node-\d)","pending"\]$', out, re.M)
    assert members == [("controller", "node-1"), ("worker", "node-2"), ("worker", "node-3")], out
    assert '["apps.instance.requested","deploy-42"]' in out.splitlines()
    assert ('"reasons":[{"check":"topology.count","message":"role controller count 2 is outside the adapter '
            'bounds 1..1"') in out
    assert re.search(r'"correlation_id":"[0-9a-f-]{36}"\}\}$', out.strip()), out[-500:]
