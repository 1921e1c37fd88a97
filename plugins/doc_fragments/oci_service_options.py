# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # How the container runs, shared by gpuaas.apps.oci_service and gpuaas.apps.oci_workload (the options of
    # module_utils.oci_steps.SERVICE_OPTIONS other than name and image):
    # extends_documentation_fragment: [gpuaas.apps.oci_service_options]
    DOCUMENTATION = r"""
options:
  command:
    description: Arguments given to the image's entrypoint (replacing its default command).
    type: list
    elements: str
    default: []
  env:
    description: Environment variables of the container.
    type: dict
    default: {}
  network:
    description:
      - V(bridge) puts the container on podman's default network and publishes O(ports).
      - V(host) shares the host's network; the container listens on the host's ports itself and O(ports) are not
        published.
    type: str
    choices: [bridge, host]
    default: bridge
  ports:
    description: Ports published on the host (V(bridge) network only).
    type: list
    elements: dict
    default: []
    suboptions:
      host_port:
        description: Port on the host (default the container port).
        type: int
      container_port:
        description: Port in the container (default the host port).
        type: int
      protocol:
        description: V(tcp) or V(udp).
        type: str
        default: tcp
      host_ip:
        description: Host address to bind (default every address).
        type: str
  volumes:
    description: Bind mounts of host directories or files, which must exist.
    type: list
    elements: dict
    default: []
    suboptions:
      source:
        description: Absolute path on the host.
        type: path
        required: true
      target:
        description: Absolute path in the container.
        type: str
        required: true
      read_only:
        description: Mount read-only.
        type: bool
        default: false
  cpus:
    description: CPU limit (number of CPUs, may be fractional). Enforced only with O(cgroups=true).
    type: float
  memory:
    description: Memory limit (C(512m), C(4g), ...). Enforced only with O(cgroups=true).
    type: str
  cgroups:
    description:
      - Whether the host gives containers cgroups (production hosts do). V(true) runs the container with
        C(--cgroups=no-conmon) and the O(cpus) and O(memory) limits.
      - V(false) is for hosts without cgroups for containers (such as test hosts that are themselves
        containers), with C(--cgroups=disabled) and without the limits (a warning says so).
    type: bool
    default: true
  restart:
    description: systemd's C(Restart=) for the unit.
    type: str
    choices: ["no", on-failure, always]
    default: on-failure
  restart_sec:
    description: Seconds systemd waits before a restart.
    type: int
    default: 5
  stop_timeout:
    description: Seconds the container gets to stop before it is killed.
    type: int
    default: 10
  gpus:
    description:
      - V(auto) gives the container every GPU (CDI device C(nvidia.com/gpu=all)) when a CDI spec under
        C(/etc/cdi) or C(/var/run/cdi) declares it and O(devices) names no GPU; V(none) never adds it.
    type: str
    choices: [auto, none]
    default: auto
  devices:
    description: Devices for the container, CDI names (C(nvidia.com/gpu=0)) or paths under C(/dev).
    type: list
    elements: str
    default: []
  probe:
    description:
      - The readiness and health probe, kept in the record for M(gpuaas.apps.oci_probe) and
        M(gpuaas.apps.oci_info). Keys C(type) (V(http), V(tcp), V(command), V(none)), C(port), C(path),
        C(host), C(status) ([lowest, highest]), C(command) (argv run in the container), C(timeout),
        C(interval), C(deadline) (seconds).
    type: dict
    default: {}
  keep_images:
    description:
      - How many of the images that ran before to keep on the host (for a fast rollback). Older ones, and images
        pulled for the workload that never ran (a refused start), are removed.
    type: int
    default: 1
  files:
    description:
      - Files by digest (file artifacts) mounted read-only into the container. Each is at
        C(/var/lib/gpuaas/files/sha256/<64 hex>) on the host, the path computed from its digest alone, placed and
        verified there first by M(gpuaas.apps.file_artifact); a file not there refuses the start.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The file's name (for messages).
        type: str
        required: true
      digest:
        description: C(sha256:<64 lowercase hex>).
        type: str
        required: true
      mount:
        description:
          - Absolute path in the container, mounted read-only.
          - Without one, the file is placed and recorded with the workload but not mounted.
        type: str
      size:
        description: Ignored (the platform's file entry carries it).
        type: int
      media_type:
        description: Ignored (the platform's file entry carries it).
        type: str
      path:
        description: Ignored; the path on the host is computed from O(files[].digest).
        type: str
      src:
        description: Ignored (where M(gpuaas.apps.file_artifact) took the bytes from).
        type: str
      url:
        description: Ignored (where M(gpuaas.apps.file_artifact) took the bytes from).
        type: str
"""
