"""The collection as users receive it: the Galaxy tarball's contents, ansible-doc for every module,
and argument specs for every role."""

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MODULES = sorted(p.stem for p in (ROOT / "plugins/modules").glob("*.py") if p.stem != "__init__")
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir())
PLAYBOOKS = ["slurm_deploy", "slurm_member_add", "slurm_member_drain", "slurm_member_resume", "slurm_member_remove",
             "slurm_member_replace", "slurm_reconfigure", "slurm_decommission", "slurm_member_cleanup",
             "oci_member_cleanup"]


@pytest.fixture(scope="module")
def tarball_members(tmp_path_factory):
    out = tmp_path_factory.mktemp("galaxy")
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out), str(ROOT)],
                   check=True, capture_output=True, text=True)
    (tarball,) = out.glob("gpuaas-apps-*.tar.gz")
    with tarfile.open(tarball) as tar:
        return {m.name for m in tar.getmembers()}


def test_tarball_holds_the_collection_and_nothing_else(tarball_members):
    tops = {name.split("/")[0] for name in tarball_members}
    assert tops == {"MANIFEST.json", "FILES.json", "README.md", "CHANGELOG.md", "LICENSE", "changelogs", "meta",
                    "plugins", "roles", "playbooks", "inventories", "docs", "adapters", "tests"}, tops
    # Release notes ship as antsibull-changelog writes them; their fragments stay in the repository.
    assert not any(name.startswith("changelogs/fragments") for name in tarball_members)
    # Each app's descriptor ships next to the playbooks it names.
    assert "adapters/slurm.yml" in tarball_members
    for playbook in PLAYBOOKS:
        assert f"playbooks/{playbook}.yml" in tarball_members
    for module in MODULES:
        assert f"plugins/modules/{module}.py" in tarball_members


def test_tarball_leaves_out_the_service_tests_and_dev_files(tarball_members):
    # Of tests/, only the sanity ignore file ships: ansible-test sanity on the build (the staging gate) reads it.
    assert "tests/sanity/ignore-2.19.txt" in tarball_members
    for name in tarball_members:
        if name in ("tests", "tests/sanity", "tests/sanity/ignore-2.19.txt"):
            continue
        assert not name.startswith(("api/", "tests/", "scripts/", "bench/", "molecule/", "build/", ".")), name
        assert name not in {"pyproject.toml", "Makefile", "AGENTS.md"}, name


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_documents_every_module(module):
    env = {"ANSIBLE_COLLECTIONS_PATH": str(ROOT / "build/collections"), "PATH": f"{BIN}:/usr/bin:/bin"}
    proc = subprocess.run([str(BIN / "ansible-doc"), "--json", f"gpuaas.apps.{module}"], env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)[f"gpuaas.apps.{module}"]
    assert doc["doc"]["short_description"]
    assert doc["examples"].strip()
    assert doc["return"]
    assert "check_mode" in doc["doc"]["attributes"]


@pytest.mark.parametrize("role", ROLES)
def test_every_role_has_argument_specs(role):
    specs = yaml.safe_load((ROOT / "roles" / role / "meta/argument_specs.yml").read_text())["argument_specs"]
    assert "main" in specs
    defaults = ROOT / "roles" / role / "defaults/main.yml"
    # A default is documented by the entry point that reads it (main, or tasks_from files such as os).
    documented = {name for spec in specs.values() for name in (spec.get("options") or {})}
    if defaults.exists():
        undocumented = set(yaml.safe_load(defaults.read_text()) or {}) - documented
        assert not undocumented, f"{role}: defaults without an argument spec: {sorted(undocumented)}"
