"""unix_identities on a real Debian test host (the live_slurm fixture's, see conftest.py), run over SSH as Ansible
runs it: real useradd/userdel, real SSH logins with the keys it writes, real sessions and Slurm jobs."""

import re
import subprocess
import time

import pytest

ALICE, BOB = "live-alice", "live-bob"


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """Two real key pairs: {name: (private key path, public key line)}."""
    made = {}
    for name in ("one", "two"):
        path = tmp_path_factory.mktemp("keys") / name
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@live", "-f", str(path)],
                       check=True, timeout=60)
        made[name] = (path, path.with_suffix(".pub").read_text().strip())
    return made


@pytest.fixture
def host(live_slurm):
    """The test host; every platform user a test made is removed afterwards, and users the test made by hand."""
    made_by_hand = []
    live_slurm.made_by_hand = made_by_hand
    yield live_slurm
    result = identities(live_slurm, [])
    assert not result.get("failed"), result
    for name in made_by_hand:
        live_slurm.run("userdel", "-r", name, check=False)


def identities(live, items, manage_keys=True, check=False, diff=False):
    return live.module("unix_identities", dict(identities=items, manage_keys=manage_keys), check=check, diff=diff)


def ident(name, uid, login=False, ssh_keys=()):
    return dict(name=name, uid=uid, principal=f"user:{name}-id", login=login, ssh_keys=list(ssh_keys),
                account="research")


def address(live):
    return re.search(r"ansible_host=(\S+)", live.inventory.read_text()).group(1)


def ssh_command(live, user, key, command):
    return ["ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o",
            "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR",
            f"{user}@{address(live)}", command]


def ssh(live, user, key, command="id -un"):
    return subprocess.run(ssh_command(live, user, key, command), capture_output=True, text=True, timeout=60,
                          check=False)


def pids_of(live, user):
    out = live.run("ps", "-o", "pid=,args=", "-u", user, check=False).stdout
    return {int(line.split()[0]): line.split(None, 1)[1] for line in out.splitlines() if line.strip()}


def wait_for(predicate, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_users_homes_and_keys_and_a_second_run_without_changes(host, keys):
    wanted = [ident(ALICE, 200101, login=True, ssh_keys=[keys["one"][1], keys["two"][1]]), ident(BOB, 200102)]
    result = identities(host, wanted)
    assert not result.get("failed"), result
    assert result["changed"] is True and result["added"] == [ALICE, BOB]

    assert host.run("getent", "passwd", ALICE).stdout.strip() == \
        f"{ALICE}:x:200101:200101:gpuaas user/{ALICE}-id:/home/{ALICE}:/bin/bash"
    assert host.run("getent", "group", BOB).stdout.strip() == f"{BOB}:x:200102:"
    listing = host.run("stat", "-c", "%a %U %G %n", f"/home/{ALICE}", f"/home/{ALICE}/.ssh",
                       f"/home/{ALICE}/.ssh/authorized_keys").stdout.split("\n")
    assert listing[:3] == [f"700 {ALICE} {ALICE} /home/{ALICE}", f"700 {ALICE} {ALICE} /home/{ALICE}/.ssh",
                           f"600 {ALICE} {ALICE} /home/{ALICE}/.ssh/authorized_keys"]
    written = host.run("cat", f"/home/{ALICE}/.ssh/authorized_keys").stdout
    assert written == keys["one"][1] + "\n" + keys["two"][1] + "\n"
    assert host.run("test", "-e", f"/home/{BOB}/.ssh/authorized_keys", check=False).returncode == 1
    assert host.run("test", "-f", f"/home/{BOB}/.bashrc").returncode == 0  # made from /etc/skel

    assert ssh(host, ALICE, keys["two"][0]).stdout.strip() == ALICE
    assert ssh(host, BOB, keys["one"][0]).returncode == 255  # no login: no keys

    again = identities(host, wanted, diff=True)
    assert again["changed"] is False and again["commands"] == [] and again["added"] == []

    # one key less: the file holds exactly the other one, and that key no longer logs in
    fewer = identities(host, [ident(ALICE, 200101, login=True, ssh_keys=[keys["one"][1]]), ident(BOB, 200102)],
                       diff=True)
    assert fewer["changed"] is True and fewer["changed_users"] == [ALICE] and fewer["sessions_ended"] == []
    assert fewer["diff"]["before"]["users"][ALICE]["keys"] == 2 and fewer["diff"]["after"]["users"][ALICE]["keys"] == 1
    assert keys["one"][1].split()[1] not in str(fewer["diff"])  # counts and a digest, no keys
    assert ssh(host, ALICE, keys["two"][0]).returncode == 255
    assert ssh(host, ALICE, keys["one"][0]).returncode == 0


def test_a_worker_keeps_no_keys(host, keys):
    wanted = [ident(ALICE, 200101, login=True, ssh_keys=[keys["one"][1]])]
    assert identities(host, wanted)["changed"] is True
    worker = identities(host, wanted, manage_keys=False)
    assert worker["changed"] is True and worker["changed_users"] == [ALICE]
    assert host.run("test", "-e", f"/home/{ALICE}/.ssh/authorized_keys", check=False).returncode == 1
    assert identities(host, wanted, manage_keys=False)["changed"] is False


def test_lost_login_ends_sessions_but_not_jobs(host, keys, live_slurm):
    wanted = [ident(ALICE, 200101, login=True, ssh_keys=[keys["one"][1]])]
    assert identities(host, wanted)["changed"] is True
    account = "live-access"
    host.run("sacctmgr", "-i", "add", "account", account)
    host.run("sacctmgr", "-i", "add", "user", ALICE, f"account={account}")
    try:
        session = subprocess.Popen(ssh_command(host, ALICE, keys["one"][0], "exec sleep 300"),  # noqa: S603
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        job = host.run("runuser", "-u", ALICE, "--", "sbatch", "--parsable", "-A", account, "-o", "/dev/null",
                       "--chdir", "/tmp", "--wrap", "sleep 301").stdout.strip()
        wait_for(lambda: host.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING", "the job")
        wait_for(lambda: any("sleep 300" in a for a in pids_of(host, ALICE).values()), "the SSH session")
        wait_for(lambda: any("sleep 301" in a for a in pids_of(host, ALICE).values()), "the job's process")
        # a process of the user's own named slurmstepd spares nothing
        host.run("cp", "/bin/sleep", "/tmp/slurmstepd")
        host.run("runuser", "-u", ALICE, "--", "sh", "-c", "setsid /tmp/slurmstepd 303 >/dev/null 2>&1 &")
        wait_for(lambda: any("slurmstepd 303" in a for a in pids_of(host, ALICE).values()), "the fake slurmstepd")

        lost = identities(host, [ident(ALICE, 200101, login=False, ssh_keys=[keys["one"][1]])], diff=True)
        assert lost["changed"] is True and lost["sessions_ended"] == [ALICE], lost
        assert lost["diff"]["after"]["users"][ALICE]["login"] is False
        assert session.wait(timeout=30) == 255  # the connection ended
        left = pids_of(host, ALICE).values()
        assert not any("sleep 300" in a or "sshd" in a or "slurmstepd 303" in a for a in left), left
        assert any("sleep 301" in a for a in left), left  # the job runs on
        assert host.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING"
        assert ssh(host, ALICE, keys["one"][0]).returncode == 255
    finally:
        host.run("scancel", "--full", "-u", ALICE, check=False)
        wait_for(lambda: not host.run("squeue", "-h", "-u", ALICE).stdout.strip(), "the job to end")
        host.run("sacctmgr", "-i", "remove", "account", "where", f"name={account}", check=False)


def test_removed_users_lose_their_processes_and_home(host):
    assert identities(host, [ident(ALICE, 200101), ident(BOB, 200102)], manage_keys=False)["changed"] is True
    host.run("runuser", "-u", BOB, "--", "sh", "-c", "setsid sleep 302 >/dev/null 2>&1 &")
    wait_for(lambda: pids_of(host, BOB), "bob's process")

    result = identities(host, [ident(ALICE, 200101)], manage_keys=False, diff=True)
    assert result["changed"] is True and result["removed"] == [BOB] and result["commands"] == [f"userdel -r {BOB}"]
    assert BOB in result["diff"]["before"]["users"] and BOB not in result["diff"]["after"]["users"]
    assert host.run("getent", "passwd", BOB, check=False).returncode == 2
    assert host.run("getent", "group", BOB, check=False).returncode == 2
    assert host.run("test", "-e", f"/home/{BOB}", check=False).returncode == 1
    assert not host.run("sh", "-c", "ps -eo uid= | grep -x ' *200102' || true").stdout.strip()
    # the uid is free again for someone else
    assert identities(host, [ident(ALICE, 200101), ident("live-carol", 200102)], manage_keys=False)["changed"]


def test_users_and_groups_of_someone_else_refuse_those_identities_alone(host, keys):
    """A clash (an LDAP user's uid, say) refuses that identity; everyone else's changes, removals and lost
    logins included, are made, and then the task fails naming the refused ones."""
    assert identities(host, [ident(BOB, 200102), ident("live-dave", 200103, login=True, ssh_keys=[keys["one"][1]])]
                      )["added"] == [BOB, "live-dave"]
    host.run("useradd", "-u", "200150", "-c", "A site user", "-m", "site-user")
    host.made_by_hand.append("site-user")
    host.run("groupadd", "-g", "200151", "site-group")
    try:
        refused = identities(host, [ident(ALICE, 200101), ident("site-user", 200160), ident("live-erin", 200150),
                                    ident("live-dave", 200151)])
        assert refused.get("failed")
        for expected in ("site-user is refused and left as it is: user site-user exists and the platform does "
                         "not manage it (its GECOS 'A site user'",
                         "live-erin is refused and left as it is: uid 200150 of live-erin is held by user "
                         "site-user, which the platform does not manage",
                         "live-dave is refused and left as it is: gid 200151 of live-dave is held by group "
                         "site-group"):
            assert expected in refused["msg"], refused["msg"]
        assert refused["refused"] == ["live-dave", "live-erin", "site-user"]
        assert refused["added"] == [ALICE] and refused["removed"] == [BOB]
        assert host.run("getent", "passwd", ALICE).returncode == 0
        assert host.run("getent", "passwd", BOB, check=False).returncode == 2  # removed all the same
        assert host.run("getent", "passwd", "live-erin", check=False).returncode == 2
        # live-dave keeps its uid but, without login, no longer its keys
        assert host.run("id", "-u", "live-dave").stdout.strip() == "200103"
        assert host.run("test", "-e", "/home/live-dave/.ssh/authorized_keys", check=False).returncode == 1
        assert refused["sessions_ended"] == [] and refused["changed"] is True
        # a GECOS that is not the platform's: an empty list leaves site-user alone
        assert identities(host, [])["removed"] == [ALICE, "live-dave"]
        assert host.run("getent", "passwd", "site-user").returncode == 0
    finally:
        host.run("groupdel", "site-group", check=False)


def test_check_mode_changes_nothing(host, keys):
    checked = identities(host, [ident(ALICE, 200101, login=True, ssh_keys=[keys["one"][1]])], check=True, diff=True)
    assert checked["changed"] is True and checked["added"] == [ALICE]
    assert checked["diff"]["after"]["users"][ALICE] == {
        "uid": 200101, "principal": f"user:{ALICE}-id", "login": True, "keys": 1,
        "keys_sha256": checked["diff"]["after"]["users"][ALICE]["keys_sha256"]}
    assert host.run("getent", "passwd", ALICE, check=False).returncode == 2


def test_links_a_user_plants_are_not_followed(host, keys):
    wanted = [ident(ALICE, 200101, login=True, ssh_keys=[keys["one"][1]])]
    assert identities(host, wanted)["changed"] is True
    shadow = host.run("sha256sum", "/etc/shadow").stdout
    root_keys = host.run("sha256sum", "/root/.ssh/authorized_keys").stdout

    # authorized_keys made a link to /etc/shadow: replaced by the keys, /etc/shadow untouched
    host.run("runuser", "-u", ALICE, "--", "ln", "-sfn", "/etc/shadow", f"/home/{ALICE}/.ssh/authorized_keys")
    replaced = identities(host, wanted)
    assert replaced["changed"] is True and replaced["changed_users"] == [ALICE]
    assert host.run("stat", "-c", "%F", f"/home/{ALICE}/.ssh/authorized_keys").stdout.strip() == "regular file"
    assert host.run("sha256sum", "/etc/shadow").stdout == shadow

    # ~/.ssh made a link to /root/.ssh (readable only by root, but the module runs as root)
    host.run("runuser", "-u", ALICE, "--", "sh", "-c",
             f"rm -r /home/{ALICE}/.ssh && ln -s /root/.ssh /home/{ALICE}/.ssh")
    fixed = identities(host, wanted)
    assert fixed["changed"] is True
    assert host.run("stat", "-c", "%F %U", f"/home/{ALICE}/.ssh").stdout.strip() == f"directory {ALICE}"
    assert host.run("sha256sum", "/root/.ssh/authorized_keys").stdout == root_keys
    assert ssh(host, ALICE, keys["one"][0]).returncode == 0

    # a link where the keys go on a host that keeps none: the link goes, not what it points to
    host.run("runuser", "-u", ALICE, "--", "ln", "-sfn", "/etc/shadow", f"/home/{ALICE}/.ssh/authorized_keys")
    assert identities(host, wanted, manage_keys=False)["changed"] is True
    assert host.run("test", "-L", f"/home/{ALICE}/.ssh/authorized_keys", check=False).returncode == 1
    assert host.run("sha256sum", "/etc/shadow").stdout == shadow


def test_what_a_user_leaves_in_ssh_does_not_stop_the_sync(host, keys):
    wanted = [ident(ALICE, 200101, login=True, ssh_keys=[keys["one"][1]])]
    assert identities(host, wanted)["changed"] is True
    shadow = host.run("sha256sum", "/etc/shadow").stdout
    # a directory tree at authorized_keys (a link to /etc inside), and keys of the user's own in authorized_keys2
    host.run("runuser", "-u", ALICE, "--", "sh", "-c",
             f"cd /home/{ALICE}/.ssh && rm authorized_keys && mkdir -p authorized_keys/sub && "
             f"ln -s /etc authorized_keys/sub/etc && ln -s /etc/shadow authorized_keys/shadow && "
             f"mkfifo authorized_keys/fifo && echo '{keys['two'][1]}' > authorized_keys2")
    assert ssh(host, ALICE, keys["two"][0]).returncode == 0  # sshd reads authorized_keys2
    fixed = identities(host, wanted, diff=True)
    assert not fixed.get("failed") and fixed["changed_users"] == [ALICE], fixed
    assert fixed["diff"]["before"]["users"][ALICE]["authorized_keys2"] is True
    assert host.run("stat", "-c", "%F", f"/home/{ALICE}/.ssh/authorized_keys").stdout.strip() == "regular file"
    assert host.run("test", "-e", f"/home/{ALICE}/.ssh/authorized_keys2", check=False).returncode == 1
    assert host.run("sha256sum", "/etc/shadow").stdout == shadow
    assert ssh(host, ALICE, keys["one"][0]).returncode == 0
    assert ssh(host, ALICE, keys["two"][0]).returncode == 255
    assert identities(host, wanted)["changed"] is False


def test_drift_and_a_home_left_behind_are_set_back(host):
    wanted = [ident(ALICE, 200101), ident(BOB, 200102)]
    host.run("mkdir", "-m", "0755", f"/home/{BOB}")  # an earlier user's home, root's now
    assert identities(host, wanted, manage_keys=False)["added"] == [ALICE, BOB]
    assert host.run("stat", "-c", "%U %G", f"/home/{BOB}").stdout.strip() == f"{BOB} {BOB}"

    host.run("usermod", "-s", "/bin/sh", "-c", "gpuaas user/someone-else", ALICE)
    host.run("groupmod", "-g", "200190", ALICE)  # moves the user's primary group with it
    host.run("chown", "root:root", f"/home/{ALICE}")
    result = identities(host, wanted, manage_keys=False)
    assert result["changed"] is True and result["changed_users"] == [ALICE], result
    assert result["commands"] == [f"groupmod -g 200101 {ALICE}",
                                  f"usermod -g 200101 -c gpuaas user/{ALICE}-id -s /bin/bash {ALICE}"]
    assert host.run("getent", "passwd", ALICE).stdout.strip() == \
        f"{ALICE}:x:200101:200101:gpuaas user/{ALICE}-id:/home/{ALICE}:/bin/bash"
    assert host.run("stat", "-c", "%U %G", f"/home/{ALICE}").stdout.strip() == f"{ALICE} {ALICE}"
    assert identities(host, wanted, manage_keys=False)["changed"] is False
