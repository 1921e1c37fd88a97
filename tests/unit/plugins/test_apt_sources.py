"""apt_sources through `ansible -m` on the control node, with its sources file in a temporary directory: the file
holds exactly the lines given, goes away with none, check mode and diff, bad lines refused, and the installed
packages read from this machine's real dpkg. The apt-get update of a listed repository runs on real test hosts
with a local repository (tests/integration/test_slurm_lifecycle.py, the pinned upgrade)."""

import subprocess
import sys

import live_ansible
import pytest

LINE = "deb [trusted=yes] file:/srv/gpuaas-repo ./"


@pytest.fixture
def node(tmp_path):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"node ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    sources = tmp_path / "gpuaas.list"

    class Node:
        path = sources

        def run(self, check=False, diff=False, **args):
            return live_ansible.run(inventory, "node", "apt_sources", dict(args, path=str(sources)),
                                    check=check, diff=diff)[0]

    return Node()


def test_installed_packages_are_dpkgs_own_answer(node):
    result = node.run()
    assert not result.get("failed") and not result["changed"], result.get("msg") or result
    version = subprocess.run(["dpkg-query", "--show", "--showformat=${Version}", "dpkg"], check=True,
                             capture_output=True, text=True).stdout
    assert f"dpkg ii dpkg {version}" in result["installed"]
    assert len(result["installed"]) > 50


def test_check_mode_and_diff_show_the_file_without_writing_it(node):
    result = node.run(check=True, diff=True, lines=[LINE])
    assert result["changed"] and not node.path.exists(), result
    assert result["diff"]["after"] == f"# Managed by gpuaas.apps (gpuaas_apt_repositories).\n{LINE}\n"
    assert result["installed"], "check mode still reads what is installed"


def test_an_empty_list_removes_the_file_and_a_second_run_changes_nothing(node):
    node.path.write_text(f"# Managed by gpuaas.apps (gpuaas_apt_repositories).\n{LINE}\n")
    result = node.run(diff=True, lines=[])
    assert result["changed"] and not node.path.exists(), result
    assert LINE in result["diff"]["before"] and result["diff"]["after"] == ""
    assert not node.run(lines=[])["changed"]


@pytest.mark.parametrize("line", ["", "   ", f"{LINE}\ndeb http://elsewhere.example/ ./"])
def test_a_line_that_is_not_one_source_is_refused_and_nothing_is_written(node, line):
    result = node.run(lines=[line])
    assert result.get("failed") and "one non-empty line" in result["msg"], result
    assert not node.path.exists()
