#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: oci_trust
short_description: Make podman accept only images signed with a given key from some repositories
version_added: "0.1.0"
description:
  - Edits the containers trust policy (C(policy.json), see containers-policy.json(5)) so that images of the given
    docker O(scopes) must carry a sigstore signature by O(public_key) for their own repository
    (C(sigstoreSigned), C(signedIdentity) C(matchRepository)). Only those scopes are touched; the default,
    the other transports and every other scope stay as they are.
  - Writes C(registries.d/gpuaas-<name>.yaml) so that podman looks for the signatures as sigstore attachments
    in the registry (C(use-sigstore-attachments)). That file also records which scopes this O(name) manages,
    every one it was ever given, so that O(state=absent) removes exactly those.
  - With O(insecure_registries), writes C(registries.conf.d/gpuaas-<name>.conf), which lets podman reach those
    registries over plain HTTP.
  - O(state=absent) removes this O(name)'s scopes from the policy (except those another C(gpuaas-*.yaml)
    drop-in also records) and both drop-ins.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  name:
    description: Who the trust is for (usually the workload's name); names the drop-in files.
    type: str
    required: true
  state:
    description: V(present) or V(absent).
    type: str
    choices: [present, absent]
    default: present
  scopes:
    description:
      - Docker transport scopes to require signatures for, C(registry[:port]/namespace/repository) (one repository)
        or C(registry[:port]) (all of a registry). Required with V(present).
    type: list
    elements: str
    default: []
  public_key:
    description: The signer's public key, PEM (C(-----BEGIN PUBLIC KEY-----)). Required unless O(unsigned=true).
    type: str
  unsigned:
    description:
      - Accept unsigned images from O(scopes) (C(insecureAcceptAnything)) instead of requiring a signature. An
        explicit opt-out; never the default.
    type: bool
    default: false
  insecure_registries:
    description: Registries (C(host[:port])) podman may reach over plain HTTP.
    type: list
    elements: str
    default: []
  policy_path:
    description: The trust policy.
    type: path
    default: /etc/containers/policy.json
  registries_d:
    description: Directory of registries.d drop-ins.
    type: path
    default: /etc/containers/registries.d
  registries_conf_d:
    description: Directory of registries.conf drop-ins.
    type: path
    default: /etc/containers/registries.conf.d
notes:
  - Supports check mode and diff mode (the policy and both drop-ins).
  - When the policy file does not exist, it is created with an C(insecureAcceptAnything) default (what Debian's
    containers-common ships) and these scopes.
extends_documentation_fragment:
  - gpuaas.apps.attributes.check_and_diff
"""

EXAMPLES = r"""
- name: Require the publisher's signature for the workload's repository
  gpuaas.apps.oci_trust:
    name: web
    scopes: [registry.example.com/team/web]
    public_key: "{{ lookup('file', 'cosign.pub') }}"

- name: A plain-HTTP registry (a test registry)
  gpuaas.apps.oci_trust:
    name: web
    scopes: [10.88.0.5:5000/test/web]
    public_key: "{{ signer_public_key }}"
    insecure_registries: [10.88.0.5:5000]

- name: Remove it again
  gpuaas.apps.oci_trust:
    name: web
    state: absent
"""

RETURN = r"""
scopes:
  description: The scopes this name manages after the run (none after V(absent)).
  returned: always
  type: list
  elements: str
  sample: [registry.example.com/team/web]
removed_scopes:
  description: Scopes V(absent) took out of the policy.
  returned: always
  type: list
  elements: str
  sample: []
kept_scopes:
  description: Scopes V(absent) left in the policy because another gpuaas drop-in records them too.
  returned: always
  type: list
  elements: str
  sample: []
files:
  description: The drop-in files this name has after the run.
  returned: always
  type: list
  elements: str
  sample: [/etc/containers/registries.d/gpuaas-web.yaml]
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - Ansible modules import after their documentation
from ansible_collections.gpuaas.apps.plugins.module_utils.oci import OciError  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.oci_steps import trust  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            scopes=dict(type="list", elements="str", default=[]),
            public_key=dict(type="str"),
            unsigned=dict(type="bool", default=False),
            insecure_registries=dict(type="list", elements="str", default=[]),
            policy_path=dict(type="path", default="/etc/containers/policy.json"),
            registries_d=dict(type="path", default="/etc/containers/registries.d"),
            registries_conf_d=dict(type="path", default="/etc/containers/registries.conf.d"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = trust(p["name"], p["state"], p["scopes"], p["public_key"], p["unsigned"], p["insecure_registries"],
                       module.check_mode, p["policy_path"], p["registries_d"], p["registries_conf_d"])
    except OciError as error:
        module.fail_json(msg=str(error))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
