"""The oci-service app's tenant parameters (adapters/oci_service.yml) never let a tenant choose what of its host a
container gets: bind mounts of host paths (oci_workload_volumes) and host devices (oci_workload_devices) are
the operator's, set in the inventory (docs/oci.md, "Volumes and devices"). Checked with the control service's
own validation of a run's parameters, the one every path that stores or runs them goes through."""

from pathlib import Path

import pytest
import yaml
from gpuaas_api.catalog import parameters
from gpuaas_api.catalog.adapter import AppDescriptor
from gpuaas_api.errors import ApiError

DESCRIPTOR = Path(__file__).resolve().parents[3] / "adapters" / "oci_service.yml"


@pytest.fixture(scope="module")
def spec():
    return AppDescriptor.model_validate(yaml.safe_load(DESCRIPTOR.read_text())).spec()


def validate(spec, values):
    parameters.validate(spec.parameters, values, spec.platform_variables())


def test_a_tenant_sets_the_containers_environment(spec):
    validate(spec, {"oci_workload_env": {"MODE": "production"}, "oci_workload_ports": [{"container_port": 80}]})


@pytest.mark.parametrize("values", [
    {"oci_workload_volumes": [{"source": "/etc", "target": "/host-etc", "read_only": True}]},
    {"oci_workload_devices": ["/dev/sda"]},
], ids=["volumes", "devices"])
def test_a_tenant_cannot_give_the_container_a_host_path_or_device(spec, values):
    (name,) = values
    with pytest.raises(ApiError) as refused:
        validate(spec, values)
    assert refused.value.status == 422 and refused.value.code == "invalid_parameters"
    assert refused.value.message == f"parameter {name!r} is not declared by this app version"
