"""The collection as Galaxy and Automation Hub receive it: galaxy-importer (PyPI), the importer those services
run, on the built tarball; the release notes antsibull-changelog builds from changelogs/fragments; the license.

galaxy-importer runs offline here with every check but one: ansible-test sanity, which it runs inside a
container (`ansible-test sanity --docker`, or an image built from quay.io's base with RUN_ANSIBLE_TEST and
ANSIBLE_TEST_LOCAL_IMAGE) whose image no registry here serves. RUN_ANSIBLE_TEST=False turns that step off;
scripts/sanity.sh runs the same ansible-test sanity outside a container in `make lint`. What runs: the
manifest and file checksums, galaxy.yml's metadata rules (required tags included), ansible-doc on every
plugin, the role and collection READMEs, meta/runtime.yml, the changelog check and ansible-lint's
production profile (offline).

galaxy.yml names no repository URL because the project publishes none yet, and galaxy-importer requires one:
the tarball as built is refused for exactly that, and the full import runs on the same content built with
the URL of the checkout it came from, as a release would be built with the project's own URL.
"""

import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import ansible.release
import pytest
import yaml

from .ansible_run import BIN, ROOT

CONTAINER_STEP_OFF = {"GALAXY_IMPORTER_RUN_ANSIBLE_TEST": "False"}


def build(source, out):
    proc = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out), str(source)],
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (tarball,) = Path(out).glob("gpuaas-apps-*.tar.gz")
    return tarball


def extract(tarball, dest):
    with tarfile.open(tarball) as tar:
        tar.extractall(dest, filter="data")
    return dest


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    return build(ROOT, tmp_path_factory.mktemp("shipped"))


@pytest.fixture(scope="module")
def with_repository(shipped, tmp_path_factory):
    """The shipped content, built again with a repository URL: the checkout it came from."""
    src = extract(shipped, tmp_path_factory.mktemp("src") / "ansible_collections/gpuaas/apps")
    for generated in ("MANIFEST.json", "FILES.json"):
        (src / generated).unlink()
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    (src / "galaxy.yml").write_text(yaml.safe_dump({**galaxy, "repository": ROOT.as_uri()}))
    return build(src, tmp_path_factory.mktemp("release"))


def galaxy_importer(tarball, workdir, **config):
    """(rc, output lines, result JSON or None) of `python -m galaxy_importer.main <tarball>` in workdir."""
    # A home of its own: ansible-lint puts ~/.ansible/collections first on the collections path, and a
    # gpuaas.apps installed there by an earlier run would be linted instead of the tarball's.
    (workdir / "home").mkdir()
    env = dict(os.environ, HOME=str(workdir / "home"), PATH=f"{BIN}:{os.environ['PATH']}",
               GALAXY_IMPORTER_ANSIBLE_LOCAL_TMP=str(workdir / "tmp"),
               GALAXY_IMPORTER_TMP_ROOT_DIR=str(workdir), GALAXY_IMPORTER_CHECK_REQUIRED_TAGS="True",
               GALAXY_IMPORTER_CONFIG=str(workdir / "none.cfg"), **CONTAINER_STEP_OFF, **config)
    proc = subprocess.run([str(BIN / "python"), "-m", "galaxy_importer.main", str(tarball)], cwd=workdir, env=env,
                          capture_output=True, text=True, check=False, timeout=900)
    result = workdir / "importer_result.json"
    return proc.returncode, (proc.stdout + proc.stderr).splitlines(), (json.loads(result.read_text())
                                                                       if result.exists() else None)


def problems(lines):
    return [line for line in lines if re.match(r"(WARNING|ERROR|CRITICAL): ", line)]


def test_importer_refuses_the_tarball_as_built_only_for_its_missing_repository_url(shipped, tmp_path):
    rc, lines, _ = galaxy_importer(shipped, tmp_path, GALAXY_IMPORTER_RUN_ANSIBLE_LINT="False",
                                   GALAXY_IMPORTER_RUN_ANSIBLE_DOC="False")
    assert rc != 0
    assert problems(lines) == ["ERROR: The import failed for the following reason: Invalid collection metadata. "
                               "'repository' is required"], lines


def test_importer_passes_with_no_warning(with_repository, tmp_path):
    rc, lines, result = galaxy_importer(with_repository, tmp_path)
    assert rc == 0 and "Importer processing completed successfully" in lines, "\n".join(lines[-60:])
    # The one warning: the build ships tests/sanity's ignore file, which ansible-test sanity on the build (the catalog's
    # staging gate) reads; it holds only entries of the kinds the gate allows (catalog/staging.py).
    ignores = len([line for line in (ROOT / "tests/sanity/ignore-2.19.txt").read_text().splitlines() if line.strip()])
    assert problems(lines) == [f"WARNING: Ignore files skip ansible-test sanity tests, found ignore-2.19.txt with "
                               f"{ignores} statement(s)"], "\n".join(problems(lines))
    assert "Linting collection via ansible-lint" in " ".join(lines)  # the lint step ran, and said nothing

    contents = {(c["content_type"], c["name"]) for c in result["contents"]}
    expected = ({("role", p.name) for p in (ROOT / "roles").iterdir()}
                | {("module", p.stem) for p in (ROOT / "plugins/modules").glob("*.py")}
                | {("playbook", p.name) for p in (ROOT / "playbooks").glob("*.yml")})
    assert expected <= contents, expected - contents
    # A role and a module may share a name (oci_trust): key the docs by both.
    docs = {(c["content_type"], c["content_name"]): c for c in result["docs_blob"]["contents"]}
    for role in (ROOT / "roles").iterdir():
        assert docs[("role", role.name)]["readme_html"], f"role {role.name} has no README Galaxy can show"
    for module in (ROOT / "plugins/modules").glob("*.py"):
        # ansible-doc skips a module whose documentation it cannot read, and the importer says nothing.
        doc = (docs[("module", module.stem)].get("doc_strings") or {}).get("doc") or {}
        assert doc.get("short_description"), f"Galaxy would show no documentation for module {module.stem}"
    assert result["docs_blob"]["collection_readme"]["html"]
    assert result["requires_ansible"] == yaml.safe_load((ROOT / "meta/runtime.yml").read_text())["requires_ansible"]
    assert result["metadata"]["repository"] == ROOT.as_uri()


def test_requires_ansible_is_what_the_tests_run():
    required = yaml.safe_load((ROOT / "meta/runtime.yml").read_text())["requires_ansible"]
    running = ".".join(ansible.release.__version__.split(".")[:2])
    assert required == f">={running}.0", f"tests run ansible-core {ansible.release.__version__}; runtime: {required}"


def test_galaxy_metadata_names_no_placeholder_and_no_content_that_does_not_ship():
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    for key in ("repository", "documentation", "homepage", "issues"):
        assert key not in galaxy, f"{key}: the project has no such URL yet"
    text = (galaxy["description"] + " " + " ".join(galaxy["tags"])).lower()
    for absent in ("kubernetes", "rke2", "k8s"):
        assert absent not in text, f"galaxy.yml promises {absent} content, which does not ship"
    assert galaxy["license"] == ["Apache-2.0"]


def test_the_license_ships_in_full_and_every_python_file_names_it(shipped, tmp_path):
    root = extract(shipped, tmp_path / "x")
    license_text = (root / "LICENSE").read_text()
    assert license_text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in license_text and len(license_text) > 11000
    for path in root.rglob("*.py"):
        head = path.read_text().splitlines()[:6]
        assert any("Apache License 2.0" in line for line in head), f"{path.relative_to(root)} has no license header"


def test_release_notes_build_from_the_fragments(shipped, tmp_path):
    """antsibull-changelog lints the fragments and writes a release from them, new modules included."""
    lint = subprocess.run([str(BIN / "antsibull-changelog"), "lint"], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=120)
    assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr
    coll = extract(shipped, tmp_path / "ansible_collections/gpuaas/apps")
    shutil.copy(ROOT / "galaxy.yml", coll)
    shutil.copytree(ROOT / "changelogs/fragments", coll / "changelogs/fragments")
    release = subprocess.run([str(BIN / "antsibull-changelog"), "release", "--version", "9.9.9", "--date",
                              "2030-01-01"], cwd=coll, capture_output=True, text=True, check=False, timeout=300,
                             env=dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}"))
    assert release.returncode == 0, release.stdout + release.stderr
    changes = yaml.safe_load((coll / "changelogs/changelog.yaml").read_text())["releases"]["9.9.9"]
    fragments = sorted(p.name for p in (ROOT / "changelogs/fragments").glob("*.yml"))
    assert changes["fragments"] == fragments
    notes = (coll / "changelogs/CHANGELOG.md").read_text()
    assert "## v9\\.9\\.9" in notes
