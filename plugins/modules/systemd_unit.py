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
from ansible_collections.gpuaas.apps.plugins.module_utils.systemd import STATES, UnitError, keep_unit  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            enabled=dict(type="bool"),
            state=dict(type="str", choices=list(STATES)),
            daemon_reload=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    try:
        changed, status, diff = keep_unit(module, module.params["name"], module.params["enabled"],
                                          module.params["state"], module.params["daemon_reload"])
    except UnitError as error:
        module.fail_json(msg=str(error), changed=error.changed, status=error.status)
    module.exit_json(changed=changed, status=status, **(dict(diff=diff) if diff else {}))


if __name__ == "__main__":
    main()
