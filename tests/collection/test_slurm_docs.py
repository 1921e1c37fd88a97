"""docs/slurm-playbooks.md documents every variable the Slurm playbooks and roles read: a row of its tables for
each one an operator may set, a mention for each one the playbooks set themselves."""

import re

import pytest
import yaml

from .ansible_run import ROOT

DOC = (ROOT / "docs/slurm-playbooks.md").read_text()
ROWS = set(re.findall(r"^\| `([a-z_]+)` \|", DOC, re.M))
SOURCES = [*ROOT.glob("playbooks/slurm_*.yml"), *ROOT.glob("playbooks/.internal/slurm_*.yml"),
           *(p for role in ("slurm_controller", "slurm_worker", "slurm_preflight", "munge", "apt_repositories")
             for p in (ROOT / "roles" / role / "tasks").glob("*.yml"))]
# Read with a default by the plays: the playbooks' own variables.
READ = {m for path in SOURCES for m in re.findall(r"\b((?:slurm|gpuaas|munge)_[a-z_]+) *\| *default\(",
                                                   path.read_text())}
# The playbooks set these for the roles, or the roles keep them to themselves.
SET_BY_PLAYBOOKS = {"slurm_drain_missing_ok", "slurm_controller_nodes_add", "slurm_controller_nodes_remove",
                    "slurm_controller_check_nodes", "slurm_controller_check_timeout", "slurm_controller_check_run_job",
                    "gpuaas_host_info", "munge_hand_over", "munge_file_set", "slurm_worker_munge",
                    "slurm_controller_munge", "slurm_join_named", "slurm_access_hosts"}
INTERNAL = {"slurm_preflight_hosts_by_name"}


def role_options(role):
    specs = yaml.safe_load((ROOT / "roles" / role / "meta/argument_specs.yml").read_text())["argument_specs"]
    return set(specs["main"].get("options") or {})


@pytest.mark.parametrize("variable", sorted(READ - SET_BY_PLAYBOOKS - INTERNAL))
def test_every_playbook_variable_has_a_row(variable):
    assert variable in ROWS


@pytest.mark.parametrize("role", ["slurm_controller", "slurm_worker", "munge", "apt_repositories"])
def test_every_role_variable_an_operator_sets_has_a_row(role):
    missing = role_options(role) - SET_BY_PLAYBOOKS - ROWS
    assert not missing, f"{role}: not in docs/slurm-playbooks.md: {sorted(missing)}"


def test_what_the_playbooks_set_themselves_is_named_as_such():
    said = DOC[DOC.index("Set by the playbooks themselves"):]
    for variable in SET_BY_PLAYBOOKS:
        assert f"`{variable}`" in said, variable
