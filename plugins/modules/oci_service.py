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
notes:
  - Supports check mode and diff mode (the unit, the environment with its values hidden, and the record).
  - Runs rootful podman 4.3 (Debian 12) under systemd.
extends_documentation_fragment:
  - gpuaas.apps.attributes.check_and_diff
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
removed:
  description: What V(absent) removed (unit, container, files).
  returned: when state is absent
  type: list
  elements: str
  sample: [unit gpuaas-oci-web.service, container gpuaas-oci-web]
"""

import contextlib  # noqa: E402 - Ansible modules import after their documentation
import hashlib  # noqa: E402
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.files import read_text, remove_file, write_file  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.oci import (  # noqa: E402
    ENV_DIR,
    PODMAN_MISSING,
    RECORD_DIR,
    UNIT_DIR,
    OciError,
    Podman,
    cdi_devices,
    check_devices,
    check_memory,
    check_name,
    container_name,
    env_file_text,
    env_path,
    normalize_ports,
    normalize_probe,
    normalize_volumes,
    parse_reference,
    read_json,
    record_path,
    record_text,
    plan_images,
    resolve_devices,
    unit_journal,
    unit_name,
    unit_text,
)


class Systemd:
    def __init__(self, module):
        self.module = module
        self.bin = module.get_bin_path("systemctl", required=True)

    def run(self, *args, **kw):
        return self.module.run_command([self.bin] + list(args), check_rc=kw.get("check", True))

    def active(self, unit):
        return self.run("is-active", "--quiet", unit, check=False)[0] == 0

    def enabled(self, unit):
        return self.run("is-enabled", "--quiet", unit, check=False)[0] == 0


def hidden_env(text):
    """The environment file with each value replaced by a short hash, for diffs."""
    lines = []
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            line = "%s=(sha256 %s)" % (key, hashlib.sha256(value.encode("utf-8")).hexdigest()[:12])
        lines.append(line)
    return "\n".join(lines) + ("\n" if lines else "")


def build_spec(module, podman_path):
    """The checked request: everything the unit, environment file and record are made of."""
    p = module.params
    name = check_name(p["name"])
    if not p["image"]:
        raise OciError("state=started needs image (registry/repository@sha256:...)")
    image = parse_reference(p["image"])
    for arg in p["command"]:
        if "\n" in arg or "\0" in arg:
            raise OciError("command arguments must be single lines")
    volumes = normalize_volumes(p["volumes"])
    for v in volumes:
        if not os.path.exists(v["source"]):
            raise OciError("volume source %s does not exist on this host" % v["source"])
    available = cdi_devices()
    for device in check_devices(p["devices"]):
        if device.startswith("/dev/"):
            if not os.path.exists(device):
                raise OciError("device %s does not exist on this host" % device)
        elif device not in available:
            raise OciError("device %s: no CDI spec under /etc/cdi or /var/run/cdi declares it (found: %s)"
                           % (device, ", ".join(sorted(available)) or "none"))
    if p["keep_images"] < 0 or p["stop_timeout"] < 0 or p["restart_sec"] < 0:
        raise OciError("keep_images, stop_timeout and restart_sec must not be negative")
    if p["cpus"] is not None and p["cpus"] <= 0:
        raise OciError("cpus must be positive")
    spec = dict(
        name=name, image=str(image), command=list(p["command"]), network=p["network"],
        ports=normalize_ports(p["ports"]), volumes=volumes, cpus=p["cpus"], memory=check_memory(p["memory"]),
        cgroups=p["cgroups"], restart=p["restart"], restart_sec=p["restart_sec"], stop_timeout=p["stop_timeout"],
        devices=resolve_devices(p["devices"], p["gpus"], available), env_file=env_path(name, ENV_DIR),
    )
    return spec, env_file_text(p["env"]), normalize_probe(p["probe"]), unit_text(spec, podman_path)


def retire(podman, images, warnings):
    """Remove images; those still in use by a container stay (and stay recorded)."""
    removed, kept = [], []
    for image in images:
        rc, out, err = podman.run(["rmi", image], check=False)
        if rc == 0 or "image not known" in (err or ""):
            removed.append(image)
        else:
            kept.append(image)
            warnings.append("image %s stays: %s" % (image, (err or out).strip()))
    return removed, kept


def started(module, podman, systemd):
    p = module.params
    name = p["name"]
    have_podman = podman.available()
    if not have_podman and not module.check_mode:
        raise OciError(PODMAN_MISSING)
    if not have_podman:
        module.warn("podman is not installed yet")
    podman_path = podman.path if have_podman else "/usr/bin/podman"
    spec, env_text, probe, unit = build_spec(module, podman_path)
    unit_path = os.path.join(UNIT_DIR, unit_name(name))
    path_env, path_record = spec["env_file"], record_path(name, RECORD_DIR)
    # In check mode (the playbooks' check before they pull) a missing image is what the pull will bring.
    if have_podman and not module.check_mode and podman.image(spec["image"]) is None:
        raise OciError("image %s is not on this host: pull it first (gpuaas.apps.oci_image); the unit never "
                       "pulls" % spec["image"])

    old_record = read_json(path_record) or {}
    images, previous, retiring = plan_images(old_record, spec["image"], p["keep_images"])
    record = {"name": name, "unit": unit_name(name), "container": container_name(name), "image": spec["image"],
              "images": images, "previous": previous, "probe": probe}
    old_unit, old_env = read_text(unit_path), read_text(path_env)
    unit_changed, env_changed = unit != old_unit, env_text != old_env
    record_changed = record_text(record) != record_text(old_record) if old_record else True
    running = have_podman and systemd.active(unit_name(name))
    enabled = systemd.enabled(unit_name(name)) if old_unit is not None else False
    restart = unit_changed or env_changed or not running
    warnings = []
    if not spec["cgroups"] and (spec["cpus"] or spec["memory"]):
        warnings.append("cgroups=false: the cpus/memory limits are not applied on this host")

    result = dict(unit=unit_name(name), container=container_name(name), image=spec["image"],
                  devices=spec["devices"], restarted=False, retired_images=[])
    result["diff"] = [
        dict(before_header=unit_path, after_header=unit_path, before=old_unit or "", after=unit),
        dict(before_header=path_env, after_header=path_env, before=hidden_env(old_env), after=hidden_env(env_text)),
        dict(before_header=path_record, after_header=path_record,
             before=record_text(old_record) if old_record else "", after=record_text(record)),
    ]
    changed = unit_changed or env_changed or record_changed or restart or not enabled or bool(retiring)
    if module.check_mode:
        result["retired_images"] = retiring
        result["restarted"] = restart
        for w in warnings:
            module.warn(w)
        module.exit_json(changed=changed, **result)

    # The record first: an image is tracked (and torn down later) even when its start fails.
    if record_changed:
        write_file(path_record, record_text(record), 0o644)
    if env_changed:
        write_file(path_env, env_text, 0o600)
    if unit_changed:
        write_file(unit_path, unit, 0o644)
        systemd.run("daemon-reload")
    if not enabled:
        systemd.run("enable", unit_name(name))
    if restart:
        rc, out, err = systemd.run("restart", unit_name(name), check=False)
        if rc != 0 or not systemd.active(unit_name(name)):
            raise OciError("%s did not start: %s\n%s" % (unit_name(name), (err or out).strip(),
                                                         unit_journal(module, unit_name(name))))
        result["restarted"] = True
    if retiring:
        removed, kept = retire(podman, retiring, warnings)
        result["retired_images"] = removed
        if kept:
            record["images"] = images + kept
            write_file(path_record, record_text(record), 0o644)
    for w in warnings:
        module.warn(w)
    module.exit_json(changed=changed, **result)


def absent(module, podman, systemd):
    name = check_name(module.params["name"])
    unit = unit_name(name)
    unit_path = os.path.join(UNIT_DIR, unit)
    path_env, path_record = env_path(name, ENV_DIR), record_path(name, RECORD_DIR)
    record = read_json(path_record) or {}
    images = list(record.get("images") or [])
    if record.get("image") and record["image"] not in images:
        images.append(record["image"])
    if module.params["image"]:
        images.append(str(parse_reference(module.params["image"])))
    have_podman = podman.available()
    container = podman.container(container_name(name)) if have_podman else None
    present_images = [i for i in images if have_podman and podman.image(i) is not None]
    unit_known = os.path.exists(unit_path) or systemd.active(unit) or systemd.enabled(unit)
    files = [f for f in (unit_path, path_env, path_record) if os.path.lexists(f)]
    removed = ["unit %s" % unit] if unit_known else []
    removed += ["container %s" % container_name(name)] if container else []
    removed += ["image %s" % i for i in present_images] + ["file %s" % f for f in files]
    result = dict(unit=unit, container=container_name(name), restarted=False, removed=removed,
                  retired_images=present_images)
    result["diff"] = dict(before="\n".join(removed) + ("\n" if removed else ""), after="")
    if module.check_mode or not removed:
        module.exit_json(changed=bool(removed), **result)
    if unit_known:
        systemd.run("disable", "--now", unit, check=False)
    if container:
        # Stopping the unit removes it already (ExecStopPost); this catches one started outside the unit.
        podman.run(["rm", "--force", "--ignore", "--time", str(module.params["stop_timeout"]), container_name(name)])
    for f in files:
        remove_file(f)
    if unit_known:
        systemd.run("daemon-reload")
        systemd.run("reset-failed", unit, check=False)
    warnings = []
    gone, kept = retire(podman, present_images, warnings) if present_images else ([], [])
    if kept:
        module.fail_json(msg="could not remove images: %s" % "; ".join(warnings), **result)
    for directory in (ENV_DIR, RECORD_DIR):
        with contextlib.suppress(OSError):
            os.rmdir(directory)  # only when empty: other workloads keep theirs
    module.exit_json(changed=True, **result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", choices=["started", "absent"], default="started"),
            image=dict(type="str"),
            command=dict(type="list", elements="str", default=[]),
            env=dict(type="dict", default={}),
            network=dict(type="str", choices=["bridge", "host"], default="bridge"),
            ports=dict(type="list", elements="dict", default=[], options=dict(
                host_port=dict(type="int"), container_port=dict(type="int"),
                protocol=dict(type="str", default="tcp"), host_ip=dict(type="str"))),
            volumes=dict(type="list", elements="dict", default=[], options=dict(
                source=dict(type="path", required=True), target=dict(type="str", required=True),
                read_only=dict(type="bool", default=False))),
            cpus=dict(type="float"),
            memory=dict(type="str"),
            cgroups=dict(type="bool", default=True),
            restart=dict(type="str", choices=["no", "on-failure", "always"], default="on-failure"),
            restart_sec=dict(type="int", default=5),
            stop_timeout=dict(type="int", default=10),
            gpus=dict(type="str", choices=["auto", "none"], default="auto"),
            devices=dict(type="list", elements="str", default=[]),
            probe=dict(type="dict", default={}),
            keep_images=dict(type="int", default=1),
        ),
        required_if=[("state", "started", ["image"])],
        supports_check_mode=True,
    )
    try:
        podman, systemd = Podman(module), Systemd(module)
        if module.params["state"] == "started":
            started(module, podman, systemd)
        else:
            absent(module, podman, systemd)
    except OciError as error:
        module.fail_json(msg=str(error))


if __name__ == "__main__":
    main()
