"""Run a gpuaas.apps module for real through `ansible localhost -m` (AnsiballZ and all)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ANSIBLE = Path(sys.executable).parent / "ansible"


def collections_path():
    from ansible_collections.gpuaas import apps  # conftest made it importable

    return str(Path(list(apps.__path__)[0]).parents[2])


def run(module, args, check=False, diff=False):
    """The module's result dict (with 'failed' when it failed) and the warnings it emitted."""
    cmd = [
        str(ANSIBLE),
        "localhost",
        "-m",
        f"gpuaas.apps.{module}",
        "-a",
        json.dumps(args),
        "-e",
        f"ansible_python_interpreter={sys.executable}",
    ]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=collections_path(),
        ANSIBLE_STDOUT_CALLBACK="json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_NOCOLOR="1",
    )
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    try:
        output = json.loads(proc.stdout)
    except ValueError as error:
        raise AssertionError(f"ansible gave no JSON (rc={proc.returncode}): {proc.stdout}\n{proc.stderr}") from error
    return output["plays"][0]["tasks"][0]["hosts"]["localhost"]
