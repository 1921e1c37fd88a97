"""file_set's `service` against the real systemd of a test host (the live_slurm fixture's host), over SSH as
Ansible runs it: the daemon that reads the files is kept in the same module run, started when it is stopped,
restarted only when it was running and one of its tagged paths changed (or a restart is asked for), with the
drop-in among the files reloaded first; check mode and diff cover it."""

import time
import uuid

import pytest

UNIT = "gpuaas-test-reader"
UNIT_FILE = f"/usr/lib/systemd/system/{UNIT}.service"
DROP_IN_DIR = f"/etc/systemd/system/{UNIT}.service.d"
CONFIG = "/etc/default/gpuaas-test-reader"
# The daemon prints its configuration as it starts, so the test can tell which one it read.
UNIT_TEXT = (f"[Unit]\nDescription=reader\n[Service]\nEnvironmentFile=-{CONFIG}\n"
             "ExecStart=/bin/sh -c 'echo \"read $GREETING\"; exec sleep infinity'\n"
             # Says, as it stops, whether its configuration is still there.
             f"ExecStop=/bin/sh -c 'test -e {CONFIG} && echo stopped-with-config || echo stopped-without-config'\n"
             "[Install]\nWantedBy=multi-user.target\n")


def main_pid(host):
    return host.run("systemctl", "show", UNIT, "--property=MainPID").stdout.strip().split("=")[1]


def state(host):
    enabled = host.run("systemctl", "is-enabled", UNIT, check=False).stdout.strip()
    active = host.run("systemctl", "is-active", UNIT, check=False).stdout.strip()
    return enabled, active


def logged(host, text, unit=UNIT, timeout=10):
    """Whether the daemon's journal shows `text` (journald may take a moment to have it)."""
    deadline = time.monotonic() + timeout
    while text not in host.run("journalctl", "-u", unit, "--no-pager", "-o", "cat").stdout:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def args(greeting, **service):
    return dict(
        directories=[dict(path=DROP_IN_DIR, mode="0755")],
        files=[dict(path=CONFIG, content=f"GREETING={greeting}\n", mode="0644", tag="config"),
               dict(path=f"{DROP_IN_DIR}/description.conf", content="[Unit]\nDescription=reader, kept\n",
                    mode="0644", tag="unit")],
        service={"name": UNIT, "restart_on": ["config", "unit"], **service},
    )


def install_unit(host, path, text):
    host.run("bash", "-c", f"printf %s \"$0\" > {path}", text)
    host.run("systemctl", "daemon-reload")


def remove_unit(host, unit, *paths):
    host.run("systemctl", "disable", "--now", unit, check=False)
    host.run("rm", "-rf", *paths)
    host.run("systemctl", "daemon-reload")


@pytest.fixture
def host(live_slurm):
    """The test's own unit on the live host, disabled and stopped, with none of its files; gone after the test."""
    install_unit(live_slurm, UNIT_FILE, UNIT_TEXT)
    yield live_slurm
    remove_unit(live_slurm, UNIT, UNIT_FILE, DROP_IN_DIR, CONFIG)


def test_first_run_writes_the_files_then_starts_the_daemon_once(host):
    # Each test's own greeting: the journal keeps what earlier tests' daemons printed.
    greeting = f"hello-{uuid.uuid4().hex[:8]}"
    result = host.module("file_set", args(greeting))
    assert not result.get("failed") and result["changed"], result
    assert result["service_status"]["ActiveState"] == "inactive"
    assert state(host) == ("enabled", "active")
    # It read the file written in the same run, and the drop-in is in force without a manual daemon-reload.
    shown = host.run("systemctl", "show", UNIT, "--property=Description,NeedDaemonReload").stdout.split("\n")
    assert "Description=reader, kept" in shown and "NeedDaemonReload=no" in shown
    assert logged(host, f"read {greeting}")
    again = host.module("file_set", args(greeting))
    assert not again.get("failed") and not again["changed"], again
    assert again["service_status"]["ActiveState"] == "active"


def test_a_changed_tagged_file_restarts_a_running_daemon_and_an_untagged_one_does_not(host):
    host.module("file_set", args("hello"))
    pid = main_pid(host)
    untagged = args("hello", restart_on=["unit"])
    untagged["files"][0]["content"] = "GREETING=hello\n# a comment the daemon ignores\n"
    result = host.module("file_set", untagged)
    assert result["changed"] and result["changed_paths"] == [CONFIG] and main_pid(host) == pid, result
    greeting = f"again-{uuid.uuid4().hex[:8]}"
    result = host.module("file_set", args(greeting))
    assert result["changed"] and main_pid(host) != pid, result
    assert logged(host, f"read {greeting}")


def test_restart_restarts_a_running_daemon_with_no_file_changed(host):
    """What a role passes after a package upgrade."""
    host.module("file_set", args("hello"))
    pid = main_pid(host)
    result = host.module("file_set", args("hello", restart=True))
    assert result["changed"] and result["changed_paths"] == [] and main_pid(host) != pid, result


def test_check_mode_plans_the_files_and_the_start_and_changes_nothing(host):
    result = host.module("file_set", args("hello"), check=True, diff=True)
    assert not result.get("failed") and result["changed"], result
    unit_diff = result["diff"][-1]
    assert unit_diff["before_header"] == UNIT and unit_diff["after"] == "enabled: yes\nactive: yes\n", result["diff"]
    assert state(host) == ("disabled", "inactive")
    assert host.run("test", "-e", CONFIG, check=False).returncode != 0


def test_stopped_stops_and_disables_the_daemon_after_the_files(host):
    host.module("file_set", args("hello"))
    result = host.module("file_set", args("hello", state="stopped", enabled=False))
    assert result["changed"] and state(host) == ("disabled", "inactive"), result


def test_an_unknown_unit_fails_after_the_files_and_says_so(host):
    bad = args("hello")
    bad["service"]["name"] = "gpuaas-no-such-unit"
    result = host.module("file_set", bad)
    assert result.get("failed") and result["msg"] == "systemd knows no unit gpuaas-no-such-unit", result
    # The files were written before: the result says so.
    assert result["changed"] and CONFIG in result["changed_paths"], result


def test_a_teardown_stops_the_daemon_before_its_files_go_and_reloads_for_its_removed_drop_in(host):
    host.module("file_set", args("hello"))
    drop_in = f"{DROP_IN_DIR}/description.conf"
    teardown = dict(absent=[CONFIG, DROP_IN_DIR], service=dict(name=UNIT, state="stopped", enabled=False))
    checked = host.module("file_set", teardown, check=True, diff=True)
    assert checked["changed"] and checked["changed_paths"] == [CONFIG, DROP_IN_DIR], checked
    assert state(host) == ("enabled", "active") and host.run("test", "-e", drop_in, check=False).returncode == 0
    result = host.module("file_set", teardown)
    assert not result.get("failed") and result["changed"], result
    assert result["service_status"]["ActiveState"] == "active", "the state before the teardown"
    assert state(host) == ("disabled", "inactive")
    assert logged(host, "stopped-with-config")
    log = host.run("journalctl", "-u", UNIT, "--no-pager", "-o", "cat").stdout
    assert "stopped-without-config" not in log, "stopped before the paths went"
    # And systemd no longer holds the removed drop-in.
    shown = host.run("systemctl", "show", UNIT, "--property=Description,NeedDaemonReload").stdout.split("\n")
    assert "Description=reader" in shown and "NeedDaemonReload=no" in shown, shown
    again = host.module("file_set", teardown)
    assert not again.get("failed") and not again["changed"], again


NEEDER = "gpuaas-test-needer"
NEEDER_FILE = f"/usr/lib/systemd/system/{NEEDER}.service"
NEEDER_CONFIG = "/etc/default/gpuaas-test-needer"
# A daemon that needs the reader: it says, as it starts and as it stops, whether the reader runs.
NEEDER_TEXT = (f"[Unit]\nDescription=needer\n[Service]\nEnvironmentFile=-{NEEDER_CONFIG}\n"
               f"ExecStart=/bin/sh -c 'echo \"started, reader $(systemctl is-active {UNIT})\"; exec sleep infinity'\n"
               f"ExecStop=/bin/sh -c 'echo \"stopping, reader $(systemctl is-active {UNIT})\"'\n"
               "[Install]\nWantedBy=multi-user.target\n")


@pytest.fixture
def two_units(host):
    install_unit(host, NEEDER_FILE, NEEDER_TEXT)
    yield host
    remove_unit(host, NEEDER, NEEDER_FILE, NEEDER_CONFIG)


def test_services_start_in_order_and_each_restarts_for_its_own_tags_only(two_units):
    """What the Slurm workers do: munged, then slurmd, in slurmd's run."""
    host, run = two_units, uuid.uuid4().hex[:8]

    def both(greeting, needer_greeting, **reader):
        request = args(greeting)
        request["files"].append(dict(path=NEEDER_CONFIG, content=f"N={needer_greeting}\n", mode="0644", tag="needer"))
        request["services"] = [request.pop("service") | reader, dict(name=NEEDER, restart_on=["needer"])]
        return request

    result = host.module("file_set", both(f"r-{run}", "one"))
    assert not result.get("failed") and result["changed"], result
    assert set(result["services_status"]) == {UNIT, NEEDER} and "service_status" not in result, result
    assert state(host) == ("enabled", "active")
    assert logged(host, unit=NEEDER, text="started, reader active"), "the needer started before the reader ran"
    assert not logged(host, unit=NEEDER, text="started, reader inactive", timeout=0)
    reader_pid = main_pid(host)
    needer_pid = host.run("systemctl", "show", NEEDER, "--property=MainPID").stdout.strip()

    # The needer's own file restarts the needer alone; the reader's restarts the reader alone.
    result = host.module("file_set", both(f"r-{run}", "two"))
    assert result["changed_tags"] == ["needer"] and main_pid(host) == reader_pid, result
    assert host.run("systemctl", "show", NEEDER, "--property=MainPID").stdout.strip() != needer_pid
    needer_pid = host.run("systemctl", "show", NEEDER, "--property=MainPID").stdout.strip()
    result = host.module("file_set", both(f"again-{run}", "two"))
    assert main_pid(host) != reader_pid and logged(host, f"read again-{run}"), result
    assert host.run("systemctl", "show", NEEDER, "--property=MainPID").stdout.strip() == needer_pid
    assert not host.module("file_set", both(f"again-{run}", "two"))["changed"]

    # A teardown stops them in the reverse order: the needer while the reader still runs.
    stop = dict(name=UNIT, state="stopped", enabled=False)
    result = host.module("file_set", dict(absent=[CONFIG, NEEDER_CONFIG],
                                          services=[stop, dict(stop, name=NEEDER)]))
    assert not result.get("failed") and result["changed"], result
    assert logged(host, unit=NEEDER, text="stopping, reader active"), "the reader stopped before the needer"
