#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: systemd_unit
short_description: Keep one systemd unit enabled or disabled, running or stopped, or restart it
version_added: "0.1.0"
description:
  - Reads the unit's state with one C(systemctl show), then enables or disables it and starts or stops it only
    where that state differs from the one asked for. V(restarted) always restarts it.
  - With O(daemon_reload), reloads systemd's configuration first, but only when systemd reports that the
    unit's files changed on disk since it loaded them (C(NeedDaemonReload)).
  - Returns RV(status), the unit's state as it was before the module changed anything, so a handler can tell a
    daemon this run started (it read its new configuration as it started) from one that was running before.
  - Why not C(ansible.builtin.systemd_service), which does the same for one unit? Each of its runs imports the
    whole facts library (to detect a chroot) and asks C(systemctl) more than once, which costs a role's
    play a large share of its time on each host. The collection's roles keep, restart and stop their daemons
    with this module.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  name:
    description: The unit, for example V(slurmd) or V(slurmd.service) (a name with no type is a service).
    type: str
    required: true
  enabled:
    description: Whether the unit starts at boot. Left as it is when not given.
    type: bool
  state:
    description:
      - V(started) starts the unit unless it is active, activating or reloading; V(stopped) stops it unless it
        is inactive or failed; V(restarted) restarts it (starts it when it is not running), which is always a
        change. Left as it is when not given.
    type: str
    choices: [started, stopped, restarted]
  daemon_reload:
    description: Reload systemd's configuration first when the unit's files changed on disk.
    type: bool
    default: false
extends_documentation_fragment:
  - gpuaas.apps.attributes.check_and_diff
notes:
  - Requires systemd (C(systemctl)). A unit systemd does not know is already stopped and disabled (a teardown
    of a host that never had the package changes nothing); asked to be enabled or started, it fails the module
    with the unit's name, as does a masked unit.
"""

EXAMPLES = r"""
- name: Keep slurmd enabled and running (its drop-in may have just changed)
  gpuaas.apps.systemd_unit:
    name: slurmd
    enabled: true
    state: started
    daemon_reload: true
  register: slurmd_unit

- name: Restart slurmd for a new configuration, unless this run started it
  gpuaas.apps.systemd_unit:
    name: slurmd
    state: restarted
  when: slurmd_unit.status.ActiveState in ['active', 'activating']
"""

RETURN = r"""
status:
  description: The unit's properties before the module changed anything.
  returned: success
  type: dict
  sample:
    ActiveState: active
    SubState: running
    UnitFileState: enabled
    LoadState: loaded
    NeedDaemonReload: "no"
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - Ansible modules import after their documentation

PROPERTIES = ("LoadState", "ActiveState", "SubState", "UnitFileState", "NeedDaemonReload")
RUNNING = ("active", "activating", "reloading")
STOPPED = ("inactive", "failed")


def show(module, systemctl, name):
    rc, out, err = module.run_command([systemctl, "show", name, "--property=" + ",".join(PROPERTIES)])
    if rc != 0:
        module.fail_json(msg="systemctl show %s failed (rc %d): %s" % (name, rc, (err or out).strip()))
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def summary(enabled, active):
    return "enabled: %s\nactive: %s\n" % ("yes" if enabled else "no", "yes" if active else "no")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            enabled=dict(type="bool"),
            state=dict(type="str", choices=["started", "stopped", "restarted"]),
            daemon_reload=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    name, enabled, state = module.params["name"], module.params["enabled"], module.params["state"]
    systemctl = module.get_bin_path("systemctl", required=True)

    status = show(module, systemctl, name)
    if status.get("LoadState") == "not-found":
        if enabled or state in ("started", "restarted"):
            module.fail_json(msg="systemd knows no unit %s" % name, status=status)
        module.exit_json(changed=False, status=status)
    if module.params["daemon_reload"] and status.get("NeedDaemonReload") == "yes" and not module.check_mode:
        rc, out, err = module.run_command([systemctl, "daemon-reload"])
        if rc != 0:
            module.fail_json(msg="systemctl daemon-reload failed (rc %d): %s" % (rc, (err or out).strip()))
    masked = status.get("UnitFileState", "").startswith("masked")
    if masked and (enabled or state in ("started", "restarted")):
        module.fail_json(msg="unit %s is masked: unmask it (systemctl unmask %s) to enable or start it" % (name, name),
                         status=status)

    was_enabled = status.get("UnitFileState") in ("enabled", "enabled-runtime")
    was_active = status.get("ActiveState") in RUNNING
    commands = []
    # Units that are static, generated or indirect have no enablement of their own to change.
    can_enable = status.get("UnitFileState") in ("enabled", "enabled-runtime", "disabled")
    if enabled is not None and enabled != was_enabled and can_enable:
        commands.append("enable" if enabled else "disable")
    if state == "restarted":
        commands.append("restart")
    elif state == "started" and not was_active:
        commands.append("start")
    elif state == "stopped" and status.get("ActiveState") not in STOPPED:
        commands.append("stop")

    now_enabled = ("enable" in commands) or (was_enabled and "disable" not in commands)
    now_active = ("start" in commands) or ("restart" in commands) or (was_active and "stop" not in commands)
    diff = dict(before_header=name, after_header=name, before=summary(was_enabled, was_active),
                after=summary(now_enabled, now_active))
    if not module.check_mode:
        for command in commands:
            rc, out, err = module.run_command([systemctl, command, name])
            if rc != 0:
                module.fail_json(msg="systemctl %s %s failed (rc %d): %s" % (command, name, rc, (err or out).strip()),
                                 changed=command != commands[0], status=status)
    module.exit_json(changed=bool(commands), status=status, diff=diff)


if __name__ == "__main__":
    main()
