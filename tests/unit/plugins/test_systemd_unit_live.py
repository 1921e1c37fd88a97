"""systemd_unit against the real systemd of a test host (the live_slurm fixture's host), run over SSH as Ansible
runs it: enable and start, stop and disable, only what differs, check mode and diff, a reload only when the unit's
files changed on disk, and clear refusals for a unit systemd does not know and a masked one."""

import pytest

UNIT = "gpuaas-test-sleeper"
UNIT_FILE = f"/usr/lib/systemd/system/{UNIT}.service"  # not /etc: systemctl mask puts its link there
UNIT_TEXT = "[Unit]\nDescription={}\n[Service]\nExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n"


def write_unit(host, description):
    host.run("bash", "-c", f"printf %s '{UNIT_TEXT.format(description)}' > {UNIT_FILE}")


def unit_state(host):
    enabled = host.run("systemctl", "is-enabled", UNIT, check=False).stdout.strip()
    active = host.run("systemctl", "is-active", UNIT, check=False).stdout.strip()
    return enabled, active


@pytest.fixture
def host(live_slurm):
    """A disabled, stopped unit of the test's own on the live host, gone after the test."""
    write_unit(live_slurm, "first")
    live_slurm.run("systemctl", "daemon-reload")
    yield live_slurm
    live_slurm.run("systemctl", "unmask", UNIT, check=False)
    live_slurm.run("systemctl", "disable", "--now", UNIT, check=False)
    live_slurm.run("rm", "-f", UNIT_FILE)
    live_slurm.run("systemctl", "daemon-reload")


def test_enable_and_start_in_check_mode_show_the_change_and_change_nothing(host):
    result = host.module("systemd_unit", dict(name=UNIT, enabled=True, state="started"), check=True, diff=True)
    assert not result.get("failed") and result["changed"], result
    assert result["diff"]["before"] == "enabled: no\nactive: no\n"
    assert result["diff"]["after"] == "enabled: yes\nactive: yes\n"
    assert unit_state(host) == ("disabled", "inactive")


def test_enable_and_start_then_a_second_run_changes_nothing(host):
    result = host.module("systemd_unit", dict(name=UNIT, enabled=True, state="started"))
    assert not result.get("failed") and result["changed"], result
    # The state before the change, which the roles' restart handlers read.
    assert result["status"]["ActiveState"] == "inactive" and result["status"]["UnitFileState"] == "disabled"
    assert unit_state(host) == ("enabled", "active")
    again = host.module("systemd_unit", dict(name=UNIT, enabled=True, state="started"))
    assert not again.get("failed") and not again["changed"], again
    assert again["status"]["ActiveState"] == "active"


def test_stop_and_disable_touch_only_what_differs(host):
    host.run("systemctl", "enable", "--now", UNIT)
    result = host.module("systemd_unit", dict(name=UNIT, state="stopped"))
    assert result["changed"] and unit_state(host) == ("enabled", "inactive"), result
    result = host.module("systemd_unit", dict(name=UNIT, enabled=False, state="stopped"))
    assert result["changed"] and unit_state(host) == ("disabled", "inactive"), result
    assert not host.module("systemd_unit", dict(name=UNIT, enabled=False, state="stopped"))["changed"]


def test_daemon_reload_runs_when_the_unit_changed_on_disk_and_is_no_change(host):
    # Running, so systemd keeps the unit loaded (it loads an unused one afresh from disk anyway).
    host.run("systemctl", "enable", "--now", UNIT)
    write_unit(host, "second")
    need = host.run("systemctl", "show", UNIT, "--property=NeedDaemonReload").stdout.strip()
    assert need == "NeedDaemonReload=yes"
    without = host.module("systemd_unit", dict(name=UNIT, enabled=True, state="started"))
    assert not without["changed"] and without["status"]["NeedDaemonReload"] == "yes", without
    with_reload = host.module("systemd_unit", dict(name=UNIT, enabled=True, state="started", daemon_reload=True))
    assert not with_reload.get("failed") and not with_reload["changed"], with_reload
    after = host.run("systemctl", "show", UNIT, "--property=NeedDaemonReload,Description").stdout.split()
    assert sorted(after) == ["Description=second", "NeedDaemonReload=no"]


def test_a_unit_systemd_does_not_know_is_refused_by_name_when_asked_to_run(host):
    result = host.module("systemd_unit", dict(name="gpuaas-no-such-unit", state="started"))
    assert result.get("failed") and result["msg"] == "systemd knows no unit gpuaas-no-such-unit", result


def test_a_unit_systemd_does_not_know_is_already_stopped_and_disabled(host):
    """A teardown on a host that never had the package changes nothing and needs no check first."""
    result = host.module("systemd_unit", dict(name="gpuaas-no-such-unit", state="stopped", enabled=False))
    assert not result.get("failed") and result["changed"] is False, result
    assert result["status"]["LoadState"] == "not-found"


def test_a_masked_unit_is_not_started_and_the_message_says_how_to_unmask_it(host):
    host.run("systemctl", "mask", UNIT)
    result = host.module("systemd_unit", dict(name=UNIT, enabled=True, state="started"))
    assert result.get("failed") and f"systemctl unmask {UNIT}" in result["msg"], result
    assert host.run("systemctl", "is-active", UNIT, check=False).stdout.strip() == "inactive"


def test_restarted_always_restarts_and_check_mode_only_says_so(host):
    host.run("systemctl", "start", UNIT)
    pid = host.run("systemctl", "show", UNIT, "--property=MainPID").stdout.strip()
    checked = host.module("systemd_unit", dict(name=UNIT, state="restarted"), check=True)
    assert checked["changed"] and host.run("systemctl", "show", UNIT, "--property=MainPID").stdout.strip() == pid
    result = host.module("systemd_unit", dict(name=UNIT, state="restarted"))
    assert not result.get("failed") and result["changed"] and result["status"]["ActiveState"] == "active", result
    new_pid = host.run("systemctl", "show", UNIT, "--property=MainPID").stdout.strip()
    assert new_pid != pid and new_pid != "MainPID=0" and unit_state(host)[1] == "active"


SYSV_SCRIPT = f"/etc/init.d/{UNIT}"
SYSV_TEXT = f"""#!/bin/sh
### BEGIN INIT INFO
# Provides:          {UNIT}
# Required-Start:    $remote_fs
# Required-Stop:     $remote_fs
# Default-Start:     2 3 4 5
# Default-Stop:      0 1 6
# Short-Description: the test's own SysV script beside its native unit
### END INIT INFO
exit 0
"""


def test_enable_leaves_the_sysv_links_of_a_native_unit_alone(host):
    """A native unit with a SysV script beside it (as munge and slurmd have on Debian) is enabled through systemd
    alone: update-rc.d would cost each enable about 0.25 s and its /etc/rc?.d links mean nothing under systemd."""
    host.run("bash", "-c", f"printf %s '{SYSV_TEXT}' > {SYSV_SCRIPT} && chmod 755 {SYSV_SCRIPT}")
    try:
        host.run("systemctl", "daemon-reload")
        result = host.module("systemd_unit", dict(name=UNIT, enabled=True, state="started"))
        assert not result.get("failed") and result["changed"], result
        assert unit_state(host) == ("enabled", "active")
        links = host.run("bash", "-c", f"ls /etc/rc?.d | grep -c {UNIT} || true").stdout.strip()
        assert links == "0", "update-rc.d ran: the SysV script got /etc/rc?.d links"
        disabled = host.module("systemd_unit", dict(name=UNIT, enabled=False, state="stopped"))
        assert disabled["changed"] and unit_state(host) == ("disabled", "inactive"), disabled
    finally:
        host.run("rm", "-f", SYSV_SCRIPT)
