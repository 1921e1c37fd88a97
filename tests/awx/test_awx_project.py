"""What an AWX (automation controller) project made from this repository gets, checked without AWX: the
execution environment's build context (ansible-builder, offline), the collection installed from
collections/requirements.yml as a project update does it, the project's playbook list as AWX computes it, and
one survey per lifecycle playbook whose variables are the playbook's own. AWX itself (job templates, survey
rendering) is not run here; tests/e2e runs a job the way AWX runs one."""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from .project import BIN, ROOT, project_update

SURVEYS = sorted((ROOT / "awx" / "surveys").glob("*.json"))
LIFECYCLE = sorted(p.stem for p in (ROOT / "playbooks").glob("slurm_*.yml"))
# Every playbook at the top of playbooks/ is a lifecycle action (slurm_*, oci_*): a job template's playbook.
JOB_TEMPLATES = sorted(f"playbooks/{p.name}" for p in (ROOT / "playbooks").glob("*.yml"))
# Files AWX lists too, although they are no job templates (docs/awx.md names them): molecule scenarios, test
# playbooks, the YAML example inventories (their `hosts:` keys match AWX's playbook pattern), the benchmarks' and the
# AWX setup (awx/setup.yml, run against AWX's API).
LISTED_BUT_NOT_JOB_TEMPLATES = ("molecule/", "tests/", "inventories/", "bench/", "awx/")
SURVEY_TYPES = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}


def test_the_execution_environment_context_builds_offline(tmp_path):
    done = subprocess.run([str(BIN / "ansible-builder"), "create", "-f", "execution-environment.yml", "-c",
                           str(tmp_path / "context"), "--output-filename", "Containerfile"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    containerfile = (tmp_path / "context" / "Containerfile").read_text()
    assert "ansible-core>=2.19,<2.20" in containerfile and "ansible-runner>=2.4,<2.5" in containerfile
    # A supported base (CentOS Stream 9, as AWX's own awx-ee; ansible-builder takes only dnf/microdnf images), with
    # the Python that ansible-core 2.19 needs on a controller (3.11; the stream's python3 is 3.9).
    assert 'ARG EE_BASE_IMAGE="quay.io/centos/centos:stream9"' in containerfile, containerfile
    assert 'ARG PYCMD="/usr/bin/python3.11"' in containerfile and 'ARG PYPKG="python3.11"' in containerfile
    assert 'ARG PKGMGR="/usr/bin/dnf"' in containerfile
    build = tmp_path / "context" / "_build"
    assert "openssh-client" in (build / "bindep.txt").read_text()


def test_a_project_update_installs_the_collection_from_the_checkout(tmp_path):
    installed = project_update(tmp_path)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(tmp_path))
    manifest = json.loads((installed / "MANIFEST.json").read_text())["collection_info"]
    assert manifest["version"] == yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    for playbook in LIFECYCLE:
        assert (installed / "playbooks" / f"{playbook}.yml").is_file(), playbook
    assert (installed / "plugins" / "inventory" / "gpuaas.py").is_file()
    # Every playbook resolves its imports (the shared plays in playbooks/.internal/) from the installed copy.
    done = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,",
                           *(f"gpuaas.apps.{Path(p).stem}" for p in JOB_TEMPLATES)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(f"{installed}/playbooks/") == len(JOB_TEMPLATES), done.stdout


# AWX's playbook list for a project (Project.playbooks in awx/main/models/projects.py, with skip_directory and
# could_be_playbook from awx/main/utils/ansible.py; ansible/awx devel, 2024): os.walk over the project's checkout
# without following directory links; a directory is skipped when an element of its path is `roles`, `tasks`,
# `group_vars` or `host_vars` or starts with `.`; a .yml/.yaml file is listed when a line matches the pattern
# below (or the first line opens an Ansible Vault). AWX passes the absolute path, whose project root
# (/var/lib/awx/projects/_<id>__<name>) has none of those elements: the path inside the project decides.
AWX_PLAYBOOK_LINE = re.compile(
    r"^\s*?-?\s*?(?:hosts|(ansible\.builtin\.)?include|(ansible\.builtin\.)?import_playbook):\s*?.*?$")


def awx_skips_directory(directory: str) -> bool:
    elements = directory.split("/")
    return (bool({"roles", "tasks", "group_vars", "host_vars"} & set(elements))
            or any(e.startswith(".") for e in elements))


def awx_could_be_playbook(path: Path) -> bool:
    if path.suffix not in (".yml", ".yaml") or not path.is_file():
        return False
    with path.open(encoding="utf-8", errors="ignore") as f:
        return any(AWX_PLAYBOOK_LINE.match(line) or (n == 0 and line.startswith("$ANSIBLE_VAULT;"))
                   for n, line in enumerate(f))


def awx_playbook_list() -> list[str]:
    # The project is a clone: the files git tracks, and new ones it does not ignore (not committed yet).
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    return sorted((f for f in files if not awx_skips_directory(os.path.dirname(f))
                   and awx_could_be_playbook(ROOT / f)), key=str.lower)


def test_awx_lists_the_lifecycle_playbooks_and_not_the_plays_they_share():
    listed = awx_playbook_list()
    shared = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "playbooks" / ".internal").glob("*.yml"))
    assert shared, "the shared plays moved: update this test and docs/awx.md"
    assert not set(shared) & set(listed)
    assert [p for p in listed if p.startswith("playbooks/")] == JOB_TEMPLATES
    assert {f"playbooks/{s}.yml" for s in LIFECYCLE} <= set(JOB_TEMPLATES)
    others = [p for p in listed if not p.startswith("playbooks/")]
    assert [p for p in others if not p.startswith(LISTED_BUT_NOT_JOB_TEMPLATES)] == []
    docs = (ROOT / "docs" / "awx.md").read_text()
    for prefix in LISTED_BUT_NOT_JOB_TEMPLATES:
        assert f"`{prefix}`" in docs, f"docs/awx.md does not say that AWX lists {prefix}"


def playbook_text(name: str) -> str:
    """The playbook, the internal playbooks it imports, and the documented options of the collection's
    Slurm roles (meta/argument_specs.yml), where role variables such as the package pins live."""
    text = (ROOT / "playbooks" / f"{name}.yml").read_text()
    for imported in re.findall(r"import_playbook:\s*(\S+\.yml)", text):
        text += (ROOT / "playbooks" / imported).read_text()
    for spec in ROOT.glob("roles/*/meta/argument_specs.yml"):
        text += spec.read_text()
    return text


# A job against a control service instance gets what the service's run of it would (test_awx_runs.py): the catalog's
# pins, the parameters, the secrets and the access map. Playbooks that take nothing else have no survey: a survey's
# answer would be an extra variable overriding them (AWX passes a blank optional answer as an empty value).
NO_SURVEY = {"slurm_deploy", "slurm_reconfigure", "slurm_access"}
SLURM = yaml.safe_load((ROOT / "adapters" / "slurm.yml").read_text())
FROM_THE_SERVICE = (set(SLURM["vars"]) | set(SLURM["parameters"]["properties"]) | set(SLURM["secrets"])
                    | {SLURM["access"]["variable"]})


def test_every_lifecycle_playbook_that_takes_a_jobs_own_variables_has_a_survey():
    assert [p.stem for p in SURVEYS] == sorted(set(LIFECYCLE) - NO_SURVEY)


@pytest.mark.parametrize("path", SURVEYS, ids=lambda p: p.stem)
def test_no_survey_overrides_what_the_service_gives_a_run(path):
    asked = {q["variable"] for q in json.loads(path.read_text())["spec"]}
    assert not asked & FROM_THE_SERVICE


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
