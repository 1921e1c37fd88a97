"""What an OCI workload host must look like once the workload is gone, read from outside (independently of
the playbook's own teardown check). Used by the playbook tests and by the end-to-end test through the API."""

from __future__ import annotations

import json
from collections.abc import Callable


def assert_no_workload_files(sh: Callable[[str], str], policy_before: dict) -> None:
    """No image, no unit, no workload or credential file, and the trust policy as the site had it.
    `sh` runs a shell command on the host and returns its output, stripped."""
    assert sh("podman images --format '{{.Digest}}'") == ""
    assert sh("systemctl list-unit-files 'gpuaas-oci-*' --no-legend || true") == ""
    assert sh("ls /etc/systemd/system/gpuaas-oci-* /etc/gpuaas-oci /var/lib/gpuaas-oci "
              "/etc/containers/registries.d/gpuaas-* /etc/containers/registries.conf.d/gpuaas-* "
              "/run/gpuaas-oci-auth-* 2>/dev/null || true") == ""
    assert json.loads(sh("cat /etc/containers/policy.json")) == policy_before
