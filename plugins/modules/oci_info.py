#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: oci_info
short_description: Read the OCI workloads of a host and their health, in the platform's words
version_added: "0.1.0"
description:
  - Reads the workloads M(gpuaas.apps.oci_service) runs on this host (from their records under
    C(/var/lib/gpuaas-oci)), or only the one named by O(name), and checks each once, now. Per workload that is
    one C(systemctl show) of its unit, one C(podman container inspect) of its container and one look with its
    probe (at most O(probe_timeout) seconds), with no retry and no pull. It is the adapter's status module, which
    the platform runs every few seconds on every replica host.
  - A workload is healthy when its unit is active, its container runs the image its record says was deployed
    (the digest podman reports for the running container, not the unit's text) and its probe answers.
  - With O(node), also returns RV(member_states) and RV(member_details) for this host's member of that name,
    as the platform reads them back (refresh and the scheduled health check). Each replica host speaks for
    itself; the platform merges the answers.
  - Changes nothing.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  name:
    description: Read only this workload (default every workload on the host).
    type: str
  node:
    description:
      - The member name of this host (the platform names members by their inventory host name, so the adapter's
        status options set it to C({{ inventory_hostname }})).
    type: str
  members:
    description:
      - Member names the caller asks about (the platform passes every replica's). RV(member_states) names this host's
        O(node) when it is one of them; a comma-separated string is accepted too.
    type: list
    elements: str
  image:
    description:
      - The image the platform pins for this instance, C(registry/repository@sha256:<64 hex>). RV(member_details)
        then says whether the running container's digest is that one (C(digest_matches)); without it (or empty),
        it compares with the image the workload's record says was deployed here. The health itself is always
        judged against the record.
    type: str
  probe:
    description: Run each workload's probe once (V(false) only checks the unit, the container and its image).
    type: bool
    default: true
  probe_timeout:
    description:
      - Seconds the probe's look may take at most (the probe's own C(timeout) when shorter). Keeps a check of a
        workload that does not answer short.
    type: float
    default: 2
notes:
  - Reads only; check mode runs it in full.
extends_documentation_fragment:
  - gpuaas.apps.attributes.read_only
"""

EXAMPLES = r"""
- name: Read the workload and report this member's state and runtime detail
  gpuaas.apps.oci_info:
    name: workload
    node: "{{ inventory_hostname }}"
    members: [replica-1, replica-2]
    image: "{{ oci_workload_image }}"
  register: oci

- name: Fail unless every workload here is healthy
  ansible.builtin.assert:
    that: oci.services | rejectattr('healthy') | list | length == 0
    fail_msg: "{{ oci.services | rejectattr('healthy') | map(attribute='detail') | join('; ') }}"
"""

RETURN = r"""
services:
  description: One entry per workload.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The workload's name.
      type: str
    unit:
      description: Its systemd unit.
      type: str
    container:
      description: Its container's name.
      type: str
    image:
      description: The image its record says it runs.
      type: str
    images:
      description: Every image of the record (the current one and those kept for a rollback).
      type: list
      elements: str
    running_image:
      description: The image the running container was started from; empty when none runs.
      type: str
    running_digest:
      description: That image's digest, as podman reports it for the container.
      type: str
    active:
      description: Whether the unit is active.
      type: bool
    running:
      description: Whether the container runs.
      type: bool
    healthy:
      description: Active, running the recorded image, and (with O(probe)) answering its probe.
      type: bool
    detail:
      description: Why it is not healthy, or, when it is, the probe's answer.
      type: str
    details:
      description: The runtime detail of the workload, the keys of RV(member_details).
      type: dict
  sample:
    - name: web
      unit: gpuaas-oci-web.service
      container: gpuaas-oci-web
      image: registry.example.com/team/web@sha256:4d4f...
      images: [registry.example.com/team/web@sha256:4d4f...]
      running_image: registry.example.com/team/web@sha256:4d4f...
      running_digest: sha256:4d4f...
      active: true
      running: true
      healthy: true
      detail: "GET http://127.0.0.1:8080/: HTTP 200"
      details: {workload: web, unit: active, probe: HTTP 200, reason: ""}
member_states:
  description: This member (O(node)) and its state in the platform's words, V(active) when at least one workload is
    here and every one is healthy, else V(failed); empty when O(members) is given and does not name O(node).
  returned: when O(node) is given
  type: dict
  sample: {replica-1: active}
member_details:
  description:
    - This member (O(node)) and its runtime detail, which the platform stores and shows; empty when
      RV(member_states) is. At most 16 keys, each a string (at most 200 characters), a number, a boolean or null.
      With several workloads on the host, the detail is that of the first one that is not healthy (else the first).
    - C(workload) its name; C(unit) the unit's state (C(active), C(inactive (exit code 137)), C(activating
      (auto-restart, exit code 137)), C(not installed)); C(restarts) how often systemd restarted it; C(container)
      the container's state (C(running), C(exited), C(paused), C(absent)); C(exit_code) the container's exit code
      when it has stopped; C(started_at) when the running container started; C(image) the image reference it was
      started from; C(running_digest) the digest podman reports for it; C(pinned_digest) the digest of O(image), or
      of the recorded image without it; C(digest_matches) whether those are equal (null when either is unknown);
      C(probe) the probe's answer now (C(HTTP 200), C(connection refused), C(timed out after 2s), C(rc=1 ...));
      C(probe_target) what it asked (C(GET http://127.0.0.1:8080/healthz)); C(probe_code) the HTTP status or the
      command's exit status; C(probe_ok) whether the answer counts as ready; C(reason) one line saying why the
      member is failed, empty when it is active.
  returned: when O(node) is given
  type: dict
  sample:
    replica-1:
      workload: workload
      unit: inactive (exit code 137)
      restarts: 0
      container: absent
      exit_code: null
      started_at: ""
      image: ""
      running_digest: ""
      pinned_digest: sha256:4d4f...
      digest_matches: null
      probe: connection refused
      probe_target: GET http://127.0.0.1:8080/healthz
      probe_code: null
      probe_ok: false
      reason: the unit gpuaas-oci-workload.service is inactive (exit code 137)
"""

import os  # noqa: E402 - Ansible modules import after their documentation

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.oci import (  # noqa: E402
    PODMAN_MISSING,
    RECORD_DIR,
    OciError,
    Podman,
    check_name,
    container_name,
    look,
    normalize_probe,
    parse_reference,
    read_json,
    record_path,
    replica_health,
    unit_name,
    unit_state,
)


def workload_names(name):
    if name:
        return [check_name(name)]
    try:
        entries = sorted(os.listdir(RECORD_DIR))
    except OSError:
        return []
    return [e[:-len(".json")] for e in entries if e.endswith(".json")]


def service_info(module, podman, systemctl, name, run_probe, probe_timeout, pinned):
    """One workload, read now: its entry of ``services`` (with its ``details``)."""
    record = read_json(record_path(name, RECORD_DIR))
    unit, container = unit_name(name), container_name(name)
    props = unit_state(module, systemctl, unit) if record is not None else {}
    state = podman.container(container) if podman and record is not None else None
    answer = None
    if record is not None and run_probe:
        answer = look(podman, normalize_probe(record.get("probe")), container, state, probe_timeout)
    healthy, details = replica_health(name, record, props, state, answer, pinned)
    if record is not None and podman is None:
        healthy, details["reason"] = False, PODMAN_MISSING
    state = state or {}
    return dict(name=name, unit=unit, container=container, image=(record or {}).get("image", ""),
                images=(record or {}).get("images", []), running_image=state.get("ImageName", ""),
                running_digest=state.get("ImageDigest", ""), active=props.get("ActiveState") == "active",
                running=details["container"] == "running", healthy=healthy,
                detail=details["reason"] or (("%s: %s" % (answer["target"], answer["answer"])) if answer
                                             else "running %s" % (record or {}).get("image", "")),
                details=details)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str"),
            node=dict(type="str"),
            members=dict(type="list", elements="str"),
            image=dict(type="str"),
            probe=dict(type="bool", default=True),
            probe_timeout=dict(type="float", default=2),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        if params["probe_timeout"] <= 0:
            raise OciError("probe_timeout must be a positive number of seconds")
        pinned = str(parse_reference(params["image"])) if params["image"] else ""
        podman = Podman(module)
        podman = podman if podman.available() else None
        systemctl = module.get_bin_path("systemctl", required=True)
        services = [service_info(module, podman, systemctl, n, params["probe"], params["probe_timeout"], pinned)
                    for n in workload_names(params["name"])]
        result = dict(changed=False, services=services)
        if params["node"]:
            members = None if params["members"] is None else [m.strip() for m in params["members"] if m.strip()]
            result["member_states"], result["member_details"] = {}, {}
            if members is None or params["node"] in members:
                judged = next((s for s in services if not s["healthy"]), services[0] if services else None)
                healthy = bool(services) and all(s["healthy"] for s in services)
                result["member_states"] = {params["node"]: "active" if healthy else "failed"}
                result["member_details"] = {params["node"]: judged["details"] if judged else {
                    "reason": "no OCI workload on this host (no record under %s)" % RECORD_DIR}}
        module.exit_json(**result)
    except OciError as error:
        module.fail_json(msg=str(error))


if __name__ == "__main__":
    main()
