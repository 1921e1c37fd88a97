"""Runs a playbook for real with the project's ansible-playbook on a local inventory, for the tests of this
folder: the hosts are names on the control node (ansible_connection=local) unless an inventory says otherwise."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOKS = Path(__file__).parent / "playbooks"


def ansible_env(**extra):
    return dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "build/collections"), ANSIBLE_NOCOLOR="1",
                ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
                ANSIBLE_RETRY_FILES_ENABLED="false", **extra)


def local_inventory(path, groups, host_vars=None):
    """An ini inventory of `groups` ({group: [host or "host var=value", ...]}) whose hosts are the control node."""
    lines = []
    for group, hosts in groups.items():
        lines += [f"[{group}]", *hosts, ""]
    lines += ["[all:vars]", "ansible_connection=local", f"ansible_python_interpreter={sys.executable}",
              *(f"{k}={v}" for k, v in (host_vars or {}).items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_playbook(playbook, inventory, extra=None, args=(), timeout=300):
    """(rc, output) of ansible-playbook; `playbook` is a path or a gpuaas.apps.<name>."""
    cmd = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook), *args]
    if extra:
        cmd += ["-e", json.dumps(extra)]
    proc = subprocess.run(cmd, env=ansible_env(), capture_output=True, text=True, timeout=timeout, check=False)
    return proc.returncode, proc.stdout + proc.stderr
