"""What an AWX project update does with this repository, for the tests that run a job as AWX would: the
collection installed from collections/requirements.yml, run from the project's root into a fresh directory; and
what awx/setup.yml tells AWX to give an inventory sync and a job (the credential's and the source's environment)."""

import os
import subprocess
import sys
from pathlib import Path

import jinja2
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def project_update(dest: Path) -> Path:
    """Installs the collection into `dest` as AWX's project update does; returns the installed collection
    (dest/ansible_collections/gpuaas/apps). Jobs then run with ANSIBLE_COLLECTIONS_PATH=dest."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(dest))
    done = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "-r", "collections/requirements.yml",
                           "-p", str(dest)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return dest / "ansible_collections" / "gpuaas" / "apps"


class _SetupLoader(yaml.SafeLoader):
    """Reads awx/setup.yml: `!unsafe` marks AWX's own templates (the credential type's injectors) as plain text."""


_SetupLoader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))
SETUP = yaml.load((ROOT / "awx" / "setup.yml").read_text(), Loader=_SetupLoader)[0]  # noqa: S506 - a SafeLoader


def setup_task(module: str) -> dict:
    """The arguments of awx/setup.yml's task that runs `module`."""
    (task,) = [t for t in SETUP["tasks"] if module in t]
    return task[module]


def credential_env(url: str, token: str) -> dict[str, str]:
    """What the control service credential type of awx/setup.yml injects into an inventory sync and a job."""
    inputs = {"url": url, "token": token}
    return {name: jinja2.Template(value).render(inputs)
            for name, value in setup_task("awx.awx.credential_type")["injectors"]["env"].items()}


def inventory_source_env(**setup_vars) -> dict[str, str]:
    """The environment awx/setup.yml's inventory source gives its sync (AWX sets a project-sourced inventory
    source's source variables as environment variables), for the setup's variables `setup_vars`."""
    return {name: jinja2.Template(value).render(setup_vars)
            for name, value in setup_task("awx.awx.inventory_source")["source_vars"].items()}
