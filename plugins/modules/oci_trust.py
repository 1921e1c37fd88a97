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

import glob  # noqa: E402 - Ansible modules import after their documentation
import json  # noqa: E402
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.files import read_text, remove_file, write_file  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.oci import (  # noqa: E402
    OciError,
    check_name,
    check_scope,
    docker_scopes,
    insecure_registries_text,
    read_json,
    registries_d_scopes,
    registries_d_text,
    remove_scopes,
    requirement,
    set_scopes,
    trust_paths,
)


def policy_text(policy):
    return json.dumps(policy, indent=4, sort_keys=True) + "\n" if policy is not None else ""


def scopes_of_others(registries_d, own_path):
    """Scopes that other gpuaas drop-ins record (another workload's trust keeps them)."""
    others = set()
    for path in glob.glob(os.path.join(registries_d, "gpuaas-*.yaml")):
        if path != own_path:
            try:
                others.update(registries_d_scopes(read_text(path)))
            except OciError:
                continue
    return others


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
        name = check_name(p["name"])
        d_path, conf_path = trust_paths(name, p["registries_d"], p["registries_conf_d"])
        old_d, old_conf = read_text(d_path), read_text(conf_path)
        recorded = registries_d_scopes(old_d) if old_d else []
        given = [check_scope(s) for s in p["scopes"]]
        policy = read_json(p["policy_path"])
        result = dict(removed_scopes=[], kept_scopes=[])

        if p["state"] == "present":
            if not given:
                raise OciError("state=present needs scopes (the repositories whose images must be signed)")
            if not p["public_key"] and not p["unsigned"]:
                raise OciError("public_key is required: images are accepted only when signed by it (unsigned=true "
                               "accepts unsigned images instead, explicitly)")
            if p["public_key"] and p["unsigned"]:
                raise OciError("give either public_key or unsigned=true, not both")
            new_policy = set_scopes(policy, given, requirement(None if p["unsigned"] else p["public_key"]))
            managed = sorted(set(recorded) | set(given))
            new_d = registries_d_text(managed, sigstore=not p["unsigned"])
            new_conf = insecure_registries_text(p["insecure_registries"]) if p["insecure_registries"] else None
            result["scopes"] = managed
        else:
            managed = sorted(set(recorded) | set(given))
            others = scopes_of_others(p["registries_d"], d_path)
            result["kept_scopes"] = [s for s in managed if s in others]
            in_policy = docker_scopes(policy) if policy is not None else {}
            result["removed_scopes"] = [s for s in managed if s not in others and s in in_policy]
            new_policy = remove_scopes(policy, result["removed_scopes"]) if policy is not None else None
            new_d = new_conf = None
            result["scopes"] = []

        changes = [(p["policy_path"], policy_text(policy), policy_text(new_policy), 0o644),
                   (d_path, old_d or "", new_d or "", 0o644),
                   (conf_path, old_conf or "", new_conf or "", 0o644)]
        # Only a semantic change rewrites the policy: its formatting is the operator's until then.
        policy_changed = new_policy != policy
        changed_files = [c for c in changes if (c[0] == p["policy_path"] and policy_changed)
                         or (c[0] != p["policy_path"] and c[1] != c[2])]
        result["diff"] = [dict(before_header=path, after_header=path, before=before, after=after)
                          for path, before, after, mode in changes]
        if not module.check_mode:
            for path, _before, after, mode in changed_files:
                if after:
                    write_file(path, after, mode)
                else:
                    remove_file(path)
        result["files"] = [path for path, before, after, mode in changes[1:] if after]
        module.exit_json(changed=bool(changed_files), **result)
    except OciError as error:
        module.fail_json(msg=str(error))


if __name__ == "__main__":
    main()
