#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: oci_workload
short_description: Trust, pull, run and wait for an OCI workload on its host in one step, or tear it all down
version_added: "0.2.0"
description:
  - One module run for what M(gpuaas.apps.oci_trust), M(gpuaas.apps.oci_image), M(gpuaas.apps.oci_service) and
    M(gpuaas.apps.oci_probe) do one step at a time, with the same code and the same results. Every option is
    checked against this host (volume sources, devices, podman) before anything changes.
  - O(state=pulled) requires signatures by O(public_key) for the image's repository, pulls the image by digest
    unless the host has it, and records it for the workload; a running container is left alone. It reports
    in RV(start_pending) whether O(state=started) would change anything (the unit, the environment, the record,
    a container that does not run or does not answer its probe now). With O(start_idle), a workload whose unit
    does not run on the host starts right away. The gpuaas.apps OCI playbooks run it so on every host first,
    then O(state=started) one running replica at a time, only where a start is pending.
  - O(state=started) does the same, then runs the workload as its systemd unit (a changed unit or environment
    restarts it), then waits until its probe answers; it fails at the probe's deadline with the last answer and
    the unit's last log lines.
  - O(state=absent) stops and removes the unit, the container, the environment file, every image of the record
    and the record, removes the trust this workload alone asked for, and any registry credential file an
    interrupted pull left.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  name:
    description: The workload's name; 1 to 63 lowercase letters, digits, C(.), C(_) or C(-).
    type: str
    required: true
  state:
    description: V(pulled), V(started) or V(absent) (see the description).
    type: str
    choices: [pulled, started, absent]
    default: started
  image:
    description: The image, by digest only (C(registry/repository@sha256:<64 hex>)). Required unless V(absent).
    type: str
  auth:
    description:
      - Credentials for the pull, written to a 0600 file under O(auth_dir) for the pull alone and removed right
        after it, also when it fails.
    type: dict
    suboptions:
      registry:
        description: The registry, C(host[:port]) (the image's).
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
    description: Where the credential file lives during the pull.
    type: path
    default: /run
  public_key:
    description: The PEM public key the image's repository must be signed with (sigstore).
    type: str
  unsigned:
    description: Accept unsigned images of the repository instead, explicitly.
    type: bool
    default: false
  insecure_registries:
    description: Registries podman may reach over plain HTTP.
    type: list
    elements: str
    default: []
  wait:
    description: With V(started), wait until the probe answers.
    type: bool
    default: true
  start_idle:
    description:
      - With V(pulled), where the workload's unit does not run on this host, go on as V(started) does, in the same
        module run. Nobody is served by such a replica, so it needs no turn in a rolling restart; one whose unit
        runs is left alone.
    type: bool
    default: false
notes:
  - Supports check mode (it reports what would change and changes nothing) and diff mode (the trust files,
    the image's presence, the unit, the environment with its values hidden, the record).
extends_documentation_fragment:
  - gpuaas.apps.attributes.check_and_diff
  - gpuaas.apps.oci_service_options
"""

EXAMPLES = r"""
- name: Trust and pull on every host first; start where the unit does not run, leave running ones alone
  gpuaas.apps.oci_workload:
    name: web
    state: pulled
    start_idle: true
    image: registry.example.com/team/web@sha256:4d4f...e1
    public_key: "{{ lookup('file', 'cosign.pub') }}"
    probe: {type: http, port: 8080, path: /healthz}
  register: web_pulled

- name: Then restart the running ones where something changed, one at a time, each until it answers
  gpuaas.apps.oci_workload:
    name: web
    image: registry.example.com/team/web@sha256:4d4f...e1
    public_key: "{{ lookup('file', 'cosign.pub') }}"
    probe: {type: http, port: 8080, path: /healthz}
  when: web_pulled.start_pending
  throttle: 1

- name: Tear it down
  gpuaas.apps.oci_workload:
    name: web
    state: absent
"""

RETURN = r"""
image:
  description: The image, by digest.
  returned: unless state is absent
  type: str
  sample: registry.example.com/team/web@sha256:4d4f...
pulled:
  description: Whether this run pulled the image.
  returned: unless state is absent
  type: bool
  sample: true
trust_changed:
  description: Whether this run changed the trust policy or its drop-ins.
  returned: always
  type: bool
  sample: false
start_pending:
  description: With V(pulled), whether V(started) would (still) change anything on this host.
  returned: when state is pulled
  type: bool
  sample: true
running:
  description:
    - With V(pulled), whether the workload's unit runs on this host (it may serve clients, so it waits for its turn
      in a rolling restart; a replica whose unit does not run serves nobody).
  returned: when state is pulled
  type: bool
  sample: true
start_reason:
  description: With V(pulled), why a start is pending (or that nothing is).
  returned: when state is pulled
  type: str
  sample: the unit changed
restarted:
  description: Whether this run (re)started the service.
  returned: when state is started, or pulled with O(start_idle) on a host where the unit did not run
  type: bool
  sample: true
ready:
  description: Whether the workload answered its probe.
  returned: when it was started and waited for (O(wait))
  type: bool
  sample: true
detail:
  description: What the last probe found.
  returned: when it was started and waited for (O(wait))
  type: str
  sample: "GET http://127.0.0.1:8080/healthz: HTTP 200"
attempts:
  description: How many looks the wait took.
  returned: when it was started and waited for (O(wait))
  type: int
  sample: 2
seconds:
  description: How long the wait took.
  returned: when it was started and waited for (O(wait))
  type: float
  sample: 0.06
probe:
  description: The probe waited for.
  returned: when it was started and waited for (O(wait))
  type: dict
  sample: {type: http, port: 8080, path: /healthz, host: 127.0.0.1, status: [200, 399], timeout: 2.0, interval: 1.0,
           deadline: 120.0}
retired_images:
  description: Images removed from the host (older than the kept ones, or all of them when absent).
  returned: always
  type: list
  elements: str
  sample: []
images:
  description: With V(absent), every image the workload's record listed, removed now or before.
  returned: when state is absent
  type: list
  elements: str
  sample: []
removed:
  description: With V(absent), what was removed (unit, container, images, files).
  returned: when state is absent
  type: list
  elements: str
  sample: [unit gpuaas-oci-web.service, container gpuaas-oci-web]
file_artifacts:
  description:
    - With V(absent), the file artifacts (by path) the workload mounted that it removed (or would remove); one another
      workload's record lists stays.
  returned: when state is absent
  type: list
  elements: str
  sample: [/var/lib/gpuaas/files/sha256/4d4f...]
removed_scopes:
  description: With V(absent), the trust policy scopes removed.
  returned: when state is absent
  type: list
  elements: str
  sample: [registry.example.com/team/web]
"""

import os  # noqa: E402 - Ansible modules import after their documentation

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.files import remove_file  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.oci import (  # noqa: E402
    PODMAN_MISSING,
    RUNNING,
    OciError,
    Podman,
    container_name,
    normalize_probe,
    parse_reference,
    look,
)
from ansible_collections.gpuaas.apps.plugins.module_utils.oci_steps import (  # noqa: E402
    Systemd,
    auth_argument_spec,
    image,
    remove,
    service_argument_spec,
    service_spec,
    workload_problems,
    start,
    trust,
    wait,
)


def as_list(diff):
    return diff if isinstance(diff, list) else [diff]


def pending_start(module, podman, systemd, params):
    """(pending, running, reason): whether a start would change anything, and whether the workload's unit runs
    now, found without changing anything. A running replica may serve clients, answering or not: it waits for
    its turn in a rolling restart. One whose unit does not run serves nobody."""
    plan = start(module, podman, systemd, params, check=True)
    running = podman.available() and systemd.active(plan["unit"])
    if plan["restarted"]:
        return True, running, ("the unit, its environment or a mounted file changed" if running
                               else "its unit does not run")
    if plan["changed"]:
        return True, running, "the unit is not enabled, or the record or the kept images change"
    # The unit is active, so its container runs: an http or tcp look needs no podman call.
    answer = look(podman, normalize_probe(params["probe"]), container_name(params["name"]), RUNNING)
    detail = "%s: %s" % (answer["target"], answer["answer"])
    if answer["ok"]:
        return False, running, "nothing: it runs and answers (%s)" % detail
    return True, running, "it does not answer: %s" % detail


def prepared(module, podman, systemd, result):
    """Trust and pull, after every option was checked, the request's first, then against this host: the steps
    before a start. Adds what it did to ``result``."""
    p, check = module.params, module.check_mode
    problems = workload_problems(p)
    if problems:
        raise OciError(" ".join(problems))
    if not podman.available() and not check:
        raise OciError(PODMAN_MISSING)
    service_spec(p, podman.path if podman.available() else "/usr/bin/podman")
    reference = parse_reference(p["image"])
    trusted = trust(p["name"], "present", [reference.name], p["public_key"], p["unsigned"],
                    p["insecure_registries"], check)
    result.update(trust_changed=trusted["changed"], changed=trusted["changed"], diff=trusted["diff"])
    pulled = image(module, podman, reference, "present", p["auth"], p["auth_dir"], p["name"], check=check)
    result.update(image=pulled["image"], pulled=pulled["pulled"], changed=result["changed"] or pulled["changed"],
                  diff=result["diff"] + as_list(pulled["diff"]))


def started(module, podman, systemd, result):
    """Runs the unit and waits until the workload answers; adds what it did to ``result``."""
    p = module.params
    done = start(module, podman, systemd, p, module.check_mode)
    result.update(restarted=done["restarted"], retired_images=done["retired_images"], warnings=done["warnings"],
                  changed=result["changed"] or done["changed"], diff=result["diff"] + done["diff"])
    if p["wait"] and not module.check_mode:
        result.update(wait(module, podman, p["name"], normalize_probe(p["probe"]), systemd=systemd))


def absent(module, podman, systemd):
    p, check = module.params, module.check_mode
    removed = remove(podman, systemd, p["name"], p["image"], p["stop_timeout"], check)
    untrusted = trust(p["name"], "absent", [], check=check)
    leftover = os.path.join(p["auth_dir"], "gpuaas-oci-auth-%s.json" % p["name"])
    has_leftover = os.path.lexists(leftover)
    if has_leftover and not check:
        remove_file(leftover)
    return dict(removed=removed["removed"] + (["file %s" % leftover] if has_leftover else []),
                images=removed["images"], retired_images=removed["retired_images"],
                file_artifacts=removed["file_artifacts"],
                removed_scopes=untrusted["removed_scopes"], trust_changed=untrusted["changed"],
                changed=removed["changed"] or untrusted["changed"] or has_leftover,
                diff=as_list(removed["diff"]) + untrusted["diff"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", choices=["pulled", "started", "absent"], default="started"),
            image=dict(type="str"),
            auth=auth_argument_spec(),
            auth_dir=dict(type="path", default="/run"),
            public_key=dict(type="str"),
            unsigned=dict(type="bool", default=False),
            insecure_registries=dict(type="list", elements="str", default=[]),
            wait=dict(type="bool", default=True),
            start_idle=dict(type="bool", default=False),
            **service_argument_spec(),
        ),
        required_if=[("state", "pulled", ["image"]), ("state", "started", ["image"])],
        supports_check_mode=True,
    )
    p = module.params
    # Filled step by step, so that a failure still reports what the steps before it changed.
    result = dict(changed=False, retired_images=[], diff=[])
    try:
        podman, systemd = Podman(module), Systemd(module)
        if p["state"] == "absent":
            result = absent(module, podman, systemd)
        else:
            prepared(module, podman, systemd, result)
            if p["state"] == "pulled":
                pending, running, reason = pending_start(module, podman, systemd, p)
                result.update(start_pending=pending, running=running, start_reason=reason)
                if pending and not running and p["start_idle"]:
                    started(module, podman, systemd, result)
                    result["start_pending"] = False
            else:
                started(module, podman, systemd, result)
    except OciError as error:
        result.pop("warnings", None)
        module.fail_json(msg=str(error), **dict(result, **getattr(error, "result", {})))
    for warning in result.pop("warnings", []):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
