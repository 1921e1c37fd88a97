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

import os  # noqa: E402 - Ansible modules import after their documentation

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.files import write_file  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.oci import (  # noqa: E402
    PODMAN_MISSING,
    OciError,
    Podman,
    auth_file_text,
    check_name,
    parse_reference,
    read_json,
    record_path,
    record_text,
    remember_image,
    scope_for,
)


def pull_failure(reference, stderr, policy_path):
    """A message for a failed pull that says which of the usual causes it was."""
    detail = (stderr or "").strip().splitlines()
    detail = detail[-1] if detail else "no output"
    text = stderr or ""
    if "sigstore disabled" in text:
        return ("podman on this host cannot verify sigstore signatures (Debian 12's podman has them patched out), so "
                "the trust policy %s refuses every image it requires them for, %s too: run signed workloads on hosts "
                "whose podman verifies them (Debian 13), or accept unsigned images explicitly (oci_trust_unsigned): %s"
                % (policy_path, reference, detail))
    if "Source image rejected" in text or "signature" in text.lower():
        policy = read_json(policy_path) or {}
        scope = scope_for(policy, reference)
        where = "transports.docker[%r]" % scope if scope != "default" else "its default"
        return ("the trust policy %s (%s) refused image %s: %s" % (policy_path, where, reference, detail))
    if "unauthorized" in text or "authentication required" in text or "401" in text:
        return "registry %s refused to serve image %s without valid credentials: %s" % (
            reference.registry, reference, detail)
    if "manifest unknown" in text:
        return "registry %s has no image %s (manifest unknown)" % (reference.registry, reference)
    return "pulling image %s failed: %s" % (reference, detail)


def pull(module, podman, reference):
    """podman pull, with the credentials in an auth file that exists only for the pull."""
    auth = module.params["auth"]
    args = ["pull", "--quiet", str(reference)]
    auth_path = None
    try:
        if auth:
            name = module.params["service"] or "pull"
            auth_path = os.path.join(module.params["auth_dir"], "gpuaas-oci-auth-%s.json" % name)
            if os.path.lexists(auth_path):
                os.unlink(auth_path)  # a leftover of an interrupted run
            fd = os.open(auth_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(auth_file_text(auth["registry"], auth["username"], auth["password"]))
            args[1:1] = ["--authfile", auth_path]
        rc, out, err = podman.run(args, check=False)
    finally:
        if auth_path and os.path.lexists(auth_path):
            os.unlink(auth_path)
    if rc != 0:
        raise OciError(pull_failure(reference, err or out, module.params["policy_path"]))


def record_pull(module, reference):
    """Add the image to its workload's record; True when the record changed."""
    name = module.params["service"]
    path = record_path(name)
    record = read_json(path) or {"name": name, "images": []}
    if str(reference) in record.get("images", []):
        return False
    record["images"] = remember_image(record.get("images"), str(reference))
    if not module.check_mode:
        write_file(path, record_text(record), 0o644)
    return True


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            # Only the password is secret: no_log on the whole dict would also mask the registry's address
            # wherever it appears in the result (the image reference, messages).
            auth=dict(type="dict", no_log=False, options=dict(
                registry=dict(type="str", required=True),
                username=dict(type="str", required=True),
                password=dict(type="str", required=True, no_log=True),
            )),
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
        auth = params["auth"]
        if auth and not (str(reference).startswith(auth["registry"].rstrip("/") + "/")):
            raise OciError("the credentials are for registry %s, but image %s is in %s"
                           % (auth["registry"], reference, reference.registry))
        podman = Podman(module)
        if podman.available():
            before = podman.image(reference)
        elif module.check_mode:
            module.warn("podman is not installed yet")
            before = None
        else:
            raise OciError(PODMAN_MISSING)
        result = dict(image=str(reference), repository=reference.name, digest=reference.digest, pulled=False,
                      removed=False)
        recorded = None  # (before, after): whether the workload's record lists the image
        if params["state"] == "present":
            changed = before is None
            if changed and not module.check_mode:
                pull(module, podman, reference)
                result["pulled"] = True
            after = podman.image(reference) if not module.check_mode else before
            if after:
                result["id"] = after.get("Id")
            if params["service"]:
                added = record_pull(module, reference)
                changed = added or changed
                recorded = (not added, True)
        else:
            changed = before is not None
            if changed and not module.check_mode:
                rc, out, err = podman.run(["rmi", str(reference)], check=False)
                if rc != 0 and "image not known" not in (err or ""):
                    raise OciError("removing image %s failed: %s" % (reference, (err or out).strip()))
                result["removed"] = True
        result["changed"] = changed
        result["diff"] = dict(before={"image": str(reference), "present": before is not None},
                              after={"image": str(reference), "present": params["state"] == "present"})
        if recorded:  # a change of the record alone must show in the diff too
            result["diff"]["before"]["recorded"], result["diff"]["after"]["recorded"] = recorded
        module.exit_json(**result)
    except OciError as error:
        module.fail_json(msg=str(error))


if __name__ == "__main__":
    main()
