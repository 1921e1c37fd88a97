"""What an AWX (automation controller) project made from this repository gets, checked without AWX: the
execution environment's build context (ansible-builder, offline), the collection installed from
collections/requirements.yml as a project update does it, and one survey per lifecycle playbook whose
variables are the playbook's own. AWX itself (job templates, survey rendering) is not run here."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SURVEYS = sorted((ROOT / "awx" / "surveys").glob("*.json"))
LIFECYCLE = sorted(p.stem for p in (ROOT / "playbooks").glob("slurm_*.yml"))
SURVEY_TYPES = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}


def test_the_execution_environment_context_builds_offline(tmp_path):
    done = subprocess.run([str(BIN / "ansible-builder"), "create", "-f", "execution-environment.yml", "-c",
                           str(tmp_path / "context"), "--output-filename", "Containerfile"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    containerfile = (tmp_path / "context" / "Containerfile").read_text()
    assert "ansible-core>=2.19,<2.20" in containerfile and "ansible-runner>=2.4,<2.5" in containerfile
    build = tmp_path / "context" / "_build"
    assert "openssh-client" in (build / "bindep.txt").read_text()


def test_a_project_update_installs_the_collection_from_the_checkout(tmp_path):
    # AWX runs this from the project's root, into a fresh directory of its own.
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(tmp_path))
    done = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "-r", "collections/requirements.yml",
                           "-p", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    installed = tmp_path / "ansible_collections" / "gpuaas" / "apps"
    manifest = json.loads((installed / "MANIFEST.json").read_text())["collection_info"]
    assert manifest["version"] == yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    for playbook in LIFECYCLE:
        assert (installed / "playbooks" / f"{playbook}.yml").is_file(), playbook
    assert (installed / "plugins" / "inventory" / "gpuaas.py").is_file()


def playbook_text(name: str) -> str:
    """The playbook, the internal playbooks it imports, and the documented options of the collection's
    Slurm roles (meta/argument_specs.yml), where role variables such as the package pins live."""
    text = (ROOT / "playbooks" / f"{name}.yml").read_text()
    for imported in re.findall(r"import_playbook:\s*(\S+\.yml)", text):
        text += (ROOT / "playbooks" / imported).read_text()
    for spec in ROOT.glob("roles/*/meta/argument_specs.yml"):
        text += spec.read_text()
    return text


def test_every_lifecycle_playbook_has_a_survey():
    assert [p.stem for p in SURVEYS] == LIFECYCLE


@pytest.mark.parametrize("path", SURVEYS, ids=lambda p: p.stem)
def test_a_survey_asks_only_for_the_playbooks_variables(path):
    survey = json.loads(path.read_text())
    assert survey["name"] == path.stem and survey["description"]
    text = playbook_text(path.stem)
    for question in survey["spec"]:
        assert question["type"] in SURVEY_TYPES, question
        assert re.search(rf"\b{question['variable']}\b", text), f"{path.stem} never reads {question['variable']}"
        if question["type"] == "multiplechoice":
            assert question["default"] in question["choices"], question
    targeted = {"slurm_members", "slurm_member_old"} & {q["variable"] for q in survey["spec"]}
    if path.stem.startswith("slurm_member_"):
        assert targeted and all(q["required"] for q in survey["spec"] if q["variable"] in targeted)
