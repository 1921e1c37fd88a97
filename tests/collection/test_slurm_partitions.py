"""Free-form partition keywords: the Slurm app's parameter schema (what a tenant may set through the platform) and
the playbooks' own check (gpuaas.apps.slurm_preflight, for operators) allow the same keywords, and a tenant's value
is one slurm.conf word. tests/integration/test_slurm_lifecycle.py writes them to real clusters and shows the
playbooks' refusal."""

from pathlib import Path

import pytest
import yaml
from gpuaas_api.catalog import parameters
from gpuaas_api.catalog.adapter import AppDescriptor
from gpuaas_api.errors import ApiError

ROOT = Path(__file__).resolve().parents[2]
FIELDS = ["name", "nodes", "default", "max_time"]


@pytest.fixture(scope="module")
def spec():
    return AppDescriptor.model_validate(yaml.safe_load((ROOT / "adapters/slurm.yml").read_text())).spec()


def test_the_schema_and_the_playbooks_allow_the_same_keywords(spec):
    partition = spec.parameters["properties"]["slurm_controller_partitions"]["items"]["properties"]
    role = yaml.safe_load((ROOT / "roles/slurm_preflight/vars/main.yml").read_text())
    assert set(partition) - set(FIELDS) == set(role["slurm_preflight_partition_keywords"])
    assert role["slurm_preflight_partition_fields"] == FIELDS


@pytest.mark.parametrize("options", [{"OverSubscribe": "FORCE:2", "AllowAccounts": "proj-a,proj-b"},
                                     {"PriorityTier": 2, "DefMemPerCPU": 4096, "State": "DOWN"},
                                     {"TRESBillingWeights": "CPU=1.0,Mem=0.25G,GRES/gpu=2.0"}])
def test_a_tenant_sets_partition_keywords(spec, options):
    values = {"slurm_controller_partitions": [{"name": "main", "default": True, **options}]}
    parameters.validate(spec.parameters, values, spec.platform_variables())


@pytest.mark.parametrize(("options", "said"), [
    ({"Oversubscribe": "NO"}, "'Oversubscribe' was unexpected"),
    ({"OverSubscribe": "NO SlurmUser=nobody"}, "slurm_controller_partitions.0.OverSubscribe"),
    ({"AllowAccounts": "a\nNodeName=evil"}, "slurm_controller_partitions.0.AllowAccounts"),
    ({"PriorityTier": ["2"]}, "slurm_controller_partitions.0.PriorityTier"),
])
def test_a_keyword_slurm_conf_would_misread_is_refused_naming_it(spec, options, said):
    values = {"slurm_controller_partitions": [{"name": "main", **options}]}
    with pytest.raises(ApiError) as refused:
        parameters.validate(spec.parameters, values, spec.platform_variables())
    assert refused.value.code == "invalid_parameters" and said in refused.value.message, refused.value.message
