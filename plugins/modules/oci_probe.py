#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: oci_probe
short_description: Wait until an OCI workload is ready
version_added: "0.1.0"
description:
  - Probes the workload run by M(gpuaas.apps.oci_service) until it answers or the deadline passes; a deploy or
    an upgrade is done when this returns. Fails at the deadline with the last probe's answer, the container's
    state and the unit's last log lines.
  - The probe is the one the workload's record holds (set by M(gpuaas.apps.oci_service)) unless O(probe) is given.
    V(http) expects an HTTP status in its range from C(http://host:port/path) (the host is C(127.0.0.1) unless
    set), V(tcp) a connection, V(command) exit status 0 of a command run in the container, V(none) only a
    running container. Each look also requires the container to run.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  name:
    description: The workload's name (as given to M(gpuaas.apps.oci_service)).
    type: str
    required: true
  probe:
    description:
      - A probe to use instead of the recorded one (keys as in the O(gpuaas.apps.oci_service#module:probe) option of
        M(gpuaas.apps.oci_service)).
    type: dict
  deadline:
    description: Seconds to wait at most, instead of the probe's C(deadline).
    type: float
notes:
  - In check mode nothing is waited for; the module only reports the probe it would use.
attributes:
  check_mode:
    description: Waits for nothing in check mode.
    support: full
  diff_mode:
    description: Changes nothing, so there is no diff.
    support: none
"""

EXAMPLES = r"""
- name: Wait until the web workload answers
  gpuaas.apps.oci_probe:
    name: web

- name: Wait at most 30 seconds for a TCP port
  gpuaas.apps.oci_probe:
    name: db
    probe: {type: tcp, port: 5432}
    deadline: 30
"""

RETURN = r"""
ready:
  description: Whether the workload answered.
  returned: always
  type: bool
  sample: true
attempts:
  description: How many looks it took.
  returned: always
  type: int
  sample: 3
seconds:
  description: How long it waited.
  returned: always
  type: float
  sample: 2.04
detail:
  description: What the last look found.
  returned: always
  type: str
  sample: "GET http://127.0.0.1:8080/: HTTP 200"
probe:
  description: The probe used.
  returned: always
  type: dict
  sample: {type: http, port: 8080, path: /, host: 127.0.0.1, status: [200, 399], timeout: 2.0, interval: 1.0,
           deadline: 120.0}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - Ansible modules import after their documentation
from ansible_collections.gpuaas.apps.plugins.module_utils.oci import (  # noqa: E402
    RECORD_DIR,
    OciError,
    Podman,
    check_name,
    normalize_probe,
    read_json,
    record_path,
)
from ansible_collections.gpuaas.apps.plugins.module_utils.oci_steps import StepFailed, wait  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            probe=dict(type="dict"),
            deadline=dict(type="float"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        name = check_name(params["name"])
        if params["probe"] is not None:
            probe = normalize_probe(params["probe"])
        else:
            record = read_json(record_path(name, RECORD_DIR))
            if record is None:
                raise OciError("workload %s has no record on this host (%s): deploy it first (gpuaas.apps.oci_service)"
                               % (name, record_path(name, RECORD_DIR)))
            probe = normalize_probe(record.get("probe"))
        if params["deadline"] is not None and params["deadline"] < 0:
            raise OciError("deadline must not be negative")
        if module.check_mode:
            module.exit_json(changed=False, ready=False, attempts=0, seconds=0.0, detail="check mode: not probed",
                             probe=probe)
        module.exit_json(changed=False, **wait(module, Podman(module), name, probe, params["deadline"]))
    except StepFailed as error:
        module.fail_json(msg=str(error), **error.result)
    except OciError as error:
        module.fail_json(msg=str(error))


if __name__ == "__main__":
    main()
