"""Run a gpuaas.apps module for real on a test host with `ansible <host> -m` (over SSH, AnsiballZ, the module's
action plugin and all)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ANSIBLE = Path(sys.executable).parent / "ansible"
_JSON_START = re.compile(r"^\{", re.M)


def collections_path():
    from ansible_collections.gpuaas import apps  # conftest made it importable

    return str(Path(list(apps.__path__)[0]).parents[2])


def run(inventory, host, module, args, check=False, diff=False):
    """(the module's result dict, with 'failed' when it failed; what ansible printed before its JSON result)."""
    cmd = [str(ANSIBLE), host, "-i", str(inventory), "-m", f"gpuaas.apps.{module}", "-a", json.dumps(args)]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=collections_path(),
        ANSIBLE_STDOUT_CALLBACK="json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_HOST_KEY_CHECKING="False",
        ANSIBLE_PIPELINING="1",
        ANSIBLE_NOCOLOR="1",
    )
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    start = _JSON_START.search(proc.stdout)
    try:
        output = json.loads(proc.stdout[start.start():] if start else proc.stdout)
    except ValueError as error:
        raise AssertionError(f"ansible gave no JSON (rc={proc.returncode}): {proc.stdout}\n{proc.stderr}") from error
    return output["plays"][0]["tasks"][0]["hosts"][host], proc.stdout[: start.start()] if start else ""
