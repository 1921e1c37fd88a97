#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: oci_image
short_description: Pull an OCI image by digest with podman, or remove it
version_added: "0.1.0"
description:
  - Pulls an image named by digest (C(registry/repository@sha256:<64 hex>)) with C(podman pull), or removes it.
    A tag, also next to a digest, is refused before anything happens, as what runs must be what was pinned.
  - The host's containers trust policy (C(/etc/containers/policy.json), see M(gpuaas.apps.oci_trust)) decides
    whether the image is accepted; a refused pull fails naming the image, the policy file and the scope that
    refused it.
  - Registry credentials (O(auth)) are written to an auth file under O(auth_dir) (mode 0600) for the pull
    alone and removed right after it, also when the pull fails.
  - With O(service), the image is added to that workload's record on the host, so that the workload's teardown
    (M(gpuaas.apps.oci_service) with O(gpuaas.apps.oci_service#module:state=absent)) removes it too.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  name:
    description: The image, C(registry/repository@sha256:<64 hex digits>).
    type: str
    required: true
  state:
    description:
      - V(present) pulls the image unless the host has it.
      - V(absent) removes it; fails while a container uses it.
    type: str
    choices: [present, absent]
    default: present
  auth:
    description:
      - Credentials for the image's registry. The password is never logged.
    type: dict
    suboptions:
      registry:
        description: The registry they are for (C(host[:port])); must be the image's registry.
        type: str
        required: true
      username:
        description: User name.
        type: str
        required: true
      password:
        description: Password or token.
        type: str
        required: true
  auth_dir:
    description:
      - Directory of the short-lived auth file. A tmpfs (C(/run)) keeps credentials off the disk.
    type: path
    default: /run
  service:
    description:
      - Name of the gpuaas OCI workload the image is for; the pull is recorded in its record
        (C(/var/lib/gpuaas-oci/<service>.json)).
    type: str
  policy_path:
    description: The containers policy podman uses, named in messages about refused pulls.
    type: path
    default: /etc/containers/policy.json
notes:
  - Supports check mode (reports whether it would pull or remove) and diff mode.
  - Written for podman 4.3 (Debian 12).
attributes:
  check_mode:
    description: Can run in check mode and report what would change without changing anything.
    support: full
  diff_mode:
    description: Reports whether the image is present before and after and, with O(service), whether the workload's
      record lists it.
    support: full
"""

EXAMPLES = r"""
- name: Pull the workload's image
  gpuaas.apps.oci_image:
    name: registry.example.com/team/app@sha256:4d4f...e1
    service: web
    auth: "{{ registry_credential }}"

- name: Remove it
  gpuaas.apps.oci_image:
    name: registry.example.com/team/app@sha256:4d4f...e1
    state: absent
"""

RETURN = r"""
image:
  description: The image reference.
  returned: always
  type: str
  sample: registry.example.com/team/app@sha256:4d4f0a...
repository:
  description: Its repository, C(registry/repository) (the trust policy scope of its own repository).
  returned: always
  type: str
  sample: registry.example.com/team/app
digest:
  description: Its digest.
  returned: always
  type: str
  sample: sha256:4d4f0a...
id:
  description: podman's image id, when the host has the image.
  returned: when present
  type: str
  sample: 732d74b65f71...
pulled:
  description: Whether this run pulled it.
  returned: always
  type: bool
  sample: true
removed:
  description: Whether this run removed it.
  returned: always
  type: bool
  sample: false
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - Ansible modules import after their documentation
from ansible_collections.gpuaas.apps.plugins.module_utils.oci import OciError, Podman, check_name, parse_reference  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.oci_steps import auth_argument_spec, image  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            auth=auth_argument_spec(),
            auth_dir=dict(type="path", default="/run"),
            service=dict(type="str"),
            policy_path=dict(type="path", default="/etc/containers/policy.json"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        reference = parse_reference(params["name"])
        if params["service"]:
            check_name(params["service"])
        result = image(module, Podman(module), reference, params["state"], params["auth"], params["auth_dir"],
                       params["service"], params["policy_path"], module.check_mode)
    except OciError as error:
        module.fail_json(msg=str(error))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
