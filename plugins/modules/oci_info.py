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
    C(/var/lib/gpuaas-oci)), or only the one named by O(name), and checks each once (its unit is active, its
    container runs the recorded image, and its probe answers (one look, with the probe's C(timeout))).
  - With O(node), also returns RV(member_states) for this host, the member of that name, as the control service
    reads it back on a refresh (the adapter's status module). V(active) when at least one workload is there and
    every one is healthy, else V(failed). Each replica host speaks for itself; the platform merges the answers.
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
  probe:
    description: Run each workload's probe once (V(false) only checks the unit, the container and its image).
    type: bool
    default: true
notes:
  - Reads only; check mode runs it in full.
extends_documentation_fragment:
  - gpuaas.apps.attributes.read_only
"""

EXAMPLES = r"""
- name: Read the workloads and report this member's state
  gpuaas.apps.oci_info:
    node: "{{ inventory_hostname }}"
    members: [replica-1, replica-2]
  register: oci

- name: Fail unless every workload here is healthy
  ansible.builtin.assert:
    that: oci.services | rejectattr('healthy') | list | length == 0
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
      description: That image's digest.
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
      description: What the last check found.
      type: str
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
member_states:
  description: This member (O(node)) and its state in the platform's words, V(active) or V(failed); empty when
    O(members) is given and does not name O(node).
  returned: when O(node) is given
  type: dict
  sample: {replica-1: active}
"""

import os  # noqa: E402 - Ansible modules import after their documentation

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.oci import (  # noqa: E402
    RECORD_DIR,
    OciError,
    Podman,
    check_name,
    container_name,
    normalize_probe,
    probe_once,
    read_json,
    record_path,
    unit_name,
)


def workload_names(name):
    if name:
        return [check_name(name)]
    try:
        entries = sorted(os.listdir(RECORD_DIR))
    except OSError:
        return []
    return [e[:-len(".json")] for e in entries if e.endswith(".json")]


def service_info(module, podman, systemctl, name, run_probe):
    record = read_json(record_path(name, RECORD_DIR))
    unit, container = unit_name(name), container_name(name)
    info = dict(name=name, unit=unit, container=container, image="", images=[], running_image="", running_digest="",
                active=False, running=False, healthy=False, detail="")
    if record is None:
        info["detail"] = "no workload %s on this host (no record %s)" % (name, record_path(name, RECORD_DIR))
        return info
    info["image"], info["images"] = record.get("image", ""), record.get("images", [])
    info["active"] = module.run_command([systemctl, "is-active", "--quiet", unit], check_rc=False)[0] == 0
    state = podman.container(container) if podman else None
    if state:
        info["running"] = (state.get("State") or {}).get("Status") == "running"
        info["running_image"] = state.get("ImageName", "")
        info["running_digest"] = state.get("ImageDigest", "")
    if not info["active"]:
        info["detail"] = "unit %s is not active" % unit
    elif not info["running"]:
        info["detail"] = "container %s does not run" % container
    elif info["running_image"] != info["image"]:
        info["detail"] = "container %s runs %s, not %s" % (container, info["running_image"], info["image"])
    elif run_probe:
        probe = normalize_probe(record.get("probe"))
        ok, info["detail"] = probe_once(podman, probe, container)
        info["healthy"] = ok
    else:
        info["healthy"], info["detail"] = True, "running %s" % info["image"]
    return info


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str"),
            node=dict(type="str"),
            members=dict(type="list", elements="str"),
            probe=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        podman = Podman(module)
        podman = podman if podman.available() else None
        systemctl = module.get_bin_path("systemctl", required=True)
        services = [service_info(module, podman, systemctl, n, params["probe"]) for n in workload_names(params["name"])]
        result = dict(changed=False, services=services)
        if params["node"]:
            members = None if params["members"] is None else [m.strip() for m in params["members"] if m.strip()]
            if members is None or params["node"] in members:
                healthy = bool(services) and all(s["healthy"] for s in services)
                result["member_states"] = {params["node"]: "active" if healthy else "failed"}
            else:
                result["member_states"] = {}
        module.exit_json(**result)
    except OciError as error:
        module.fail_json(msg=str(error))


if __name__ == "__main__":
    main()
