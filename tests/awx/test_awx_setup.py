"""awx/setup.yml, the AWX setup as code, checked without AWX (which cannot run here): the playbook parses with the
awx.awx collection installed (the `ansible` package of the dev extra ships it), every task gives its module only
arguments the module documents, every required one and only allowed choices; it makes a job template for every
Slurm lifecycle playbook, with the survey of awx/surveys/ where there is one; its credential type injects what the
collection's plugins read, and its inventory source is awx/inventory.gpuaas.yml. Whether AWX accepts the objects
is for AWX; the AWX-shaped run (test_awx_runs.py) uses this file's injectors and source variables."""

from __future__ import annotations

import json
import os
import re
import subprocess

import yaml

from .project import BIN, ROOT, SETUP, setup_task
from .test_awx_project import LIFECYCLE, NO_SURVEY

ENV = dict(os.environ, ANSIBLE_NOCOLOR="1")


def module_options() -> dict[str, dict]:
    """Each awx.awx module the setup uses: its documented options."""
    modules = sorted({m for t in SETUP["tasks"] for m in t if m.startswith("awx.awx.")})
    done = subprocess.run([str(BIN / "ansible-doc"), "-j", *modules], env=ENV, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return {name: doc["doc"]["options"] for name, doc in json.loads(done.stdout).items()}


def test_the_setup_parses_with_the_awx_collection():
    done = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", str(ROOT / "awx" / "setup.yml")],
                          env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_task_gives_its_module_documented_arguments():
    options = module_options()
    assert len(options) == 7, sorted(options)
    for task in SETUP["tasks"]:
        (module,) = [m for m in task if m.startswith(("awx.awx.", "ansible.builtin."))]
        if not module.startswith("awx.awx."):
            continue
        args, documented = task[module], options[module]
        assert set(args) <= set(documented), (module, set(args) - set(documented))
        required = {name for name, o in documented.items() if o.get("required")}
        assert required <= set(args), (module, required - set(args))
        for name, value in args.items():
            choices = documented[name].get("choices")
            if choices and isinstance(value, str) and "{{" not in value:
                assert value in choices, (module, name, value, choices)
        # Objects found by name: the names the other tasks give them.
        assert task.get("name") and not task.get("ignore_errors"), task


def test_a_job_template_for_every_slurm_lifecycle_playbook_with_its_survey():
    playbooks = SETUP["vars"]["gpuaas_awx_playbooks"]
    assert sorted(playbooks) == LIFECYCLE
    template = setup_task("awx.awx.job_template")
    assert template["playbook"] == "playbooks/{{ item }}.yml" and not template["ask_limit_on_launch"]
    surveys = {p.stem for p in (ROOT / "awx" / "surveys").glob("*.json")}
    assert surveys == set(playbooks) - NO_SURVEY
    assert "surveys/{{ item }}.json" in json.dumps(SETUP["tasks"][-1]["vars"])


def test_the_credential_type_injects_what_the_plugins_read():
    credential_type = setup_task("awx.awx.credential_type")
    inputs = {f["id"]: f for f in credential_type["inputs"]["fields"]}
    assert inputs["token"]["secret"] and set(credential_type["inputs"]["required"]) == set(inputs)
    env = credential_type["injectors"]["env"]
    assert env["GPUAAS_API"] == "{{ url }}" and env["GPUAAS_TOKEN"] == "{{ token }}"
    assert "gpuaas.apps.run_secrets" in env["ANSIBLE_VARS_ENABLED"].split(",")
    assert "host_group_vars" in env["ANSIBLE_VARS_ENABLED"].split(",")  # the playbooks' group_vars stay on
    inventory_plugin = (ROOT / "plugins" / "inventory" / "gpuaas.py").read_text()
    vars_plugin = (ROOT / "plugins" / "vars" / "run_secrets.py").read_text()
    for plugin in (inventory_plugin, vars_plugin):
        assert "- name: GPUAAS_API" in plugin and "GPUAAS_TOKEN" in plugin
    # The credential's token never sits in the playbook: it is a variable, and its task logs nothing.
    credential = next(t for t in SETUP["tasks"] if "awx.awx.credential" in t)
    assert credential["no_log"] and credential["awx.awx.credential"]["inputs"]["token"] == \
        "{{ gpuaas_awx_service_token }}"


def test_the_inventory_source_is_the_control_service():
    source = setup_task("awx.awx.inventory_source")
    assert source["source"] == "scm" and source["update_on_launch"] and source["overwrite_vars"]
    path = ROOT / source["source_path"]
    assert yaml.safe_load(path.read_text()) == {"plugin": "gpuaas.apps.gpuaas"}
    documented = (ROOT / "plugins" / "inventory" / "gpuaas.py").read_text()
    for name in source["source_vars"]:
        assert re.search(rf"- name: {name}\b", documented), name
