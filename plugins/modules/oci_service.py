#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: oci_service
short_description: Run an OCI image as a systemd service with podman, or tear it down
version_added: "0.1.0"
description:
  - Runs one container, C(gpuaas-oci-<name>), as the systemd unit C(gpuaas-oci-<name>.service). The unit is
    the one C(podman generate systemd --new --name) would write for it (podman 4.3 on Debian 12 has no
    quadlet), written by this module so that its text follows from the options alone; it never pulls
    (C(--pull=never)), so the image must be on the host, pulled by digest with M(gpuaas.apps.oci_image).
  - The environment goes to C(/etc/gpuaas-oci/<name>.env) (mode 0600), not into the unit, which any user may
    read through systemd.
  - A change of the unit or the environment restarts the service; otherwise a running service is left alone.
  - The workload's record (C(/var/lib/gpuaas-oci/<name>.json)) keeps its image, the images it used before
    and its probe, for M(gpuaas.apps.oci_probe), M(gpuaas.apps.oci_info) and the teardown. Images older than
    the O(keep_images) previous ones are removed.
  - O(state=absent) stops and removes the unit, the container, the environment file, every image of the
    record and the record.
  - Every option is checked before anything changes, also in check mode, so a check-mode run is the
    preflight of a deploy.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  name:
    description: The workload's name; 1 to 63 lowercase letters, digits, C(.), C(_) or C(-).
    type: str
    required: true
  state:
    description: V(started) runs it (and keeps it enabled at boot); V(absent) removes everything it consists of.
    type: str
    choices: [started, absent]
    default: started
  image:
    description: The image, by digest (C(registry/repository@sha256:<64 hex>)). Required for V(started).
    type: str
notes:
  - Supports check mode and diff mode (the unit, the environment with its values hidden, and the record).
  - Runs rootful podman 4.3 (Debian 12) under systemd.
extends_documentation_fragment:
  - gpuaas.apps.attributes.check_and_diff
  - gpuaas.apps.oci_service_options
"""

EXAMPLES = r"""
- name: Run the web workload on its published port
  gpuaas.apps.oci_service:
    name: web
    image: registry.example.com/team/web@sha256:4d4f...e1
    ports:
      - {host_port: 8080, container_port: 80}
    env:
      MODE: production
    memory: 2g
    cpus: 2
    probe: {type: http, port: 8080, path: /healthz, deadline: 60}

- name: Tear it down
  gpuaas.apps.oci_service:
    name: web
    state: absent
"""

RETURN = r"""
unit:
  description: The systemd unit.
  returned: always
  type: str
  sample: gpuaas-oci-web.service
container:
  description: The container's name.
  returned: always
  type: str
  sample: gpuaas-oci-web
image:
  description: The image it runs (V(started)).
  returned: when state is started
  type: str
  sample: registry.example.com/team/web@sha256:4d4f...
restarted:
  description: Whether this run (re)started the service.
  returned: always
  type: bool
  sample: true
devices:
  description: The devices the container gets, GPUs found through CDI included.
  returned: when state is started
  type: list
  elements: str
  sample: [nvidia.com/gpu=all]
retired_images:
  description: Images this run removed from the host (older than the kept ones, or all of them when absent).
  returned: always
  type: list
  elements: str
  sample: []
images:
  description: With V(absent), every image the workload's record listed (and O(image)), removed now or before.
  returned: when state is absent
  type: list
  elements: str
  sample: []
removed:
  description: What V(absent) removed (unit, container, files).
  returned: when state is absent
  type: list
  elements: str
  sample: [unit gpuaas-oci-web.service, container gpuaas-oci-web]
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - Ansible modules import after their documentation
from ansible_collections.gpuaas.apps.plugins.module_utils.oci import OciError, Podman  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.oci_steps import (  # noqa: E402
    StepFailed,
    Systemd,
    remove,
    service_argument_spec,
    start,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", choices=["started", "absent"], default="started"),
            image=dict(type="str"),
            **service_argument_spec(),
        ),
        required_if=[("state", "started", ["image"])],
        supports_check_mode=True,
    )
    params = module.params
    try:
        podman, systemd = Podman(module), Systemd(module)
        if params["state"] == "started":
            result = start(module, podman, systemd, params, module.check_mode)
        else:
            result = remove(podman, systemd, params["name"], params["image"], params["stop_timeout"], module.check_mode)
    except StepFailed as error:
        module.fail_json(msg=str(error), **error.result)
    except OciError as error:
        module.fail_json(msg=str(error))
    for warning in result.pop("warnings", []):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
