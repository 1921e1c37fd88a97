# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Keeping one systemd unit, the way every gpuaas.apps module that keeps a daemon does it: one `systemctl show`,
then only the commands whose state differs."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

PROPERTIES = ("LoadState", "ActiveState", "SubState", "UnitFileState", "NeedDaemonReload")
RUNNING = ("active", "activating", "reloading")
STOPPED = ("inactive", "failed")
STATES = ("started", "stopped", "restarted")
# Only native units are ever enabled or disabled here (one generated from a SysV script has no enablement of its
# own), and systemd ignores the /etc/rc?.d links of a script that has a native unit. Keeping those links in step
# runs update-rc.d, which costs an enable about 0.25 s on a test host, so systemctl is told to skip it.
SKIP_SYSV = {"SYSTEMCTL_SKIP_SYSV": "1"}


class UnitError(Exception):
    def __init__(self, msg, status, changed=False):
        super(UnitError, self).__init__(msg)
        self.status = status
        self.changed = changed


def show(module, systemctl, name):
    rc, out, err = module.run_command([systemctl, "show", name, "--property=" + ",".join(PROPERTIES)])
    if rc != 0:
        raise UnitError("systemctl show %s failed (rc %d): %s" % (name, rc, (err or out).strip()), {})
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def summary(enabled, active):
    return "enabled: %s\nactive: %s\n" % ("yes" if enabled else "no", "yes" if active else "no")


def keep_unit(module, name, enabled=None, state=None, daemon_reload=False):
    """Brings unit ``name`` to ``enabled`` (None: as it is) and ``state`` (one of STATES, or None: as it is).

    Returns (changed, status, diff): status is the unit's properties before any change. In check mode it only
    plans. A unit systemd does not know is stopped and disabled; asked to enable or start one, or a masked one,
    it raises UnitError, as it does for a failing systemctl.
    """
    systemctl = module.get_bin_path("systemctl", required=True)
    status = show(module, systemctl, name)
    if status.get("LoadState") == "not-found":
        if enabled or state in ("started", "restarted"):
            raise UnitError("systemd knows no unit %s" % name, status)
        return False, status, None
    if daemon_reload and status.get("NeedDaemonReload") == "yes" and not module.check_mode:
        rc, out, err = module.run_command([systemctl, "daemon-reload"])
        if rc != 0:
            raise UnitError("systemctl daemon-reload failed (rc %d): %s" % (rc, (err or out).strip()), status)
    if status.get("UnitFileState", "").startswith("masked") and (enabled or state in ("started", "restarted")):
        raise UnitError("unit %s is masked: unmask it (systemctl unmask %s) to enable or start it" % (name, name),
                        status)

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
            rc, out, err = module.run_command([systemctl, command, name], environ_update=SKIP_SYSV)
            if rc != 0:
                raise UnitError("systemctl %s %s failed (rc %d): %s" % (command, name, rc, (err or out).strip()),
                                status, changed=command != commands[0])
    return bool(commands), status, diff
