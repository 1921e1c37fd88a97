"""unix_identities: input rules, clashes and what must change, against this machine's real users and groups (as
NSS gives them, with the platform's users added beside them), real public keys, and real processes in /proc.
test_unix_identities_live.py runs the module on a test host over SSH."""

import grp
import os
import pwd
import stat
import subprocess

import pytest
from ansible_collections.gpuaas.apps.plugins.modules import unix_identities as ui
from slurm_fixtures import run_module

PREFIX = "gpuaas "


@pytest.fixture(scope="module")
def ssh_keys(tmp_path_factory):
    """Two real public key lines, made by ssh-keygen."""
    keys = []
    for kind in ("ed25519", "rsa"):
        path = tmp_path_factory.mktemp("keys") / kind
        subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", f"someone@{kind}", "-f", str(path)],
                       check=True, timeout=60)
        keys.append(path.with_suffix(".pub").read_text().strip())
    return keys


def system_users():
    return [ui.User(p.pw_name, p.pw_uid, p.pw_gid, p.pw_gecos, p.pw_dir, p.pw_shell) for p in pwd.getpwall()]


def system_groups():
    return {g.gr_name: g.gr_gid for g in grp.getgrall()}


def managed(name, uid, principal="user:1"):
    return ui.User(name, uid, uid, ui.gecos_of(PREFIX, principal), f"/home/{name}", "/bin/bash")


def host(*users, keys=None, groups=None, home_ok=None, keys2=()):
    """This machine's users and groups plus ``users`` (each with its own group unless ``groups`` says)."""
    all_groups = system_groups()
    all_groups.update({u.name: u.gid for u in users})
    all_groups.update(groups or {})
    return ui.Host(system_users() + list(users), all_groups, keys=keys,
                   home_ok=home_ok if home_ok is not None else {u.name: True for u in users}, keys2=keys2)


def ident(name="alice-3f9a", uid=200001, principal="user:1", login=False, ssh_keys=()):
    return {"name": name, "uid": uid, "principal": principal, "login": login, "ssh_keys": list(ssh_keys),
            "account": "research"}


# ---- input rules ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "change, expected",
    [
        ({"name": "Alice"}, "must match ^[a-z][a-z0-9-]{0,31}$"),
        ({"name": "1alice"}, "must match"),
        ({"name": "a" * 33}, "must match"),
        ({"name": "al_ice"}, "must match"),
        ({"uid": 199999}, "uid 199999 is outside 200000-2147483647"),
        ({"uid": 2147483648}, "outside"),
        ({"principal": "user:x,y"}, "the principal must be"),
        ({"principal": "user/x"}, "the principal must be"),
        ({"ssh_keys": ["command=\"rm -rf /\" ssh-ed25519 AAAA"]}, "ssh_keys[0] is not one public key line"),
        ({"ssh_keys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 two\nlines"]}, "ssh_keys[0] is not one public key line"),
        ({"ssh_keys": ["ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIB3n"]}, "ssh_keys[0] has a key whose data is not of its type"),
    ],
)
def test_bad_input_is_named(change, expected):
    problems = ui.check_params([dict(ident(), **change)], PREFIX)
    assert any(expected in p for p in problems), problems


def test_real_keys_pass_and_a_key_is_never_quoted(ssh_keys):
    assert ui.check_params([ident(ssh_keys=ssh_keys)], PREFIX) == []
    broken = ssh_keys[0][:-20] + "!" + ssh_keys[0][-19:]
    problems = ui.check_params([ident(ssh_keys=[ssh_keys[1], broken])], PREFIX)
    assert problems == ["identities[0] (alice-3f9a): ssh_keys[1] is not one public key line ('<type> <base64> "
                        "[comment]', without options)"]
    blob = ssh_keys[0].split()[1]
    assert not any(blob[:20] in p for p in ui.check_params([ident(ssh_keys=[ssh_keys[0] + "\n"])], PREFIX))


def test_duplicates_and_the_prefix_are_checked():
    problems = ui.check_params([ident(), ident(uid=200002), ident(name="bob-1")], "gpuaas:")
    joined = "; ".join(problems)
    assert "the name is given twice (also identities[0])" in joined
    assert "uid 200001 is given twice (also identities[0])" in joined
    assert "gecos_prefix must" in joined


def test_the_principal_is_recorded_without_its_colon():
    assert ui.gecos_of(PREFIX, "user:0a7e-11") == "gpuaas user/0a7e-11"
    assert ui.principal_of(PREFIX, "gpuaas user/0a7e-11") == "user:0a7e-11"


# ---- clashes with what the platform does not manage -----------------------------------------------------
def test_names_uids_and_groups_of_the_system_are_refused():
    root, daemon = pwd.getpwnam("root"), pwd.getpwuid(1)
    clash = ui.Host(system_users() + [ui.User("site-user", 200005, 100, "Site User", "/home/site-user", "/bin/sh")],
                    dict(system_groups(), **{"site-group": 200006, "carol": 4242}))
    the_plan = ui.plan([ident(name="root"), ident(name=daemon.pw_name, uid=200002), ident(name="bob-1", uid=200005),
                        ident(name="dave-1", uid=200006), ident(name="carol", uid=200007)], clash, True, PREFIX)
    refused = the_plan.refused
    assert sorted(refused) == sorted(["root", daemon.pw_name, "bob-1", "dave-1", "carol"])
    assert refused["root"].startswith(
        f"user root exists and the platform does not manage it (its GECOS {root.pw_gecos!r}")
    assert f"user {daemon.pw_name} exists and the platform does not manage it" in refused[daemon.pw_name]
    assert refused["bob-1"] == "uid 200005 of bob-1 is held by user site-user, which the platform does not manage"
    assert refused["dave-1"] == "gid 200006 of dave-1 is held by group site-group"
    assert "group carol exists with gid 4242, not 200007" in refused["carol"]
    # nothing is done for them, and nothing to the users whose names they clash with
    assert the_plan.empty() and the_plan.commands(clash.groups, PREFIX) == []


def test_a_clash_refuses_that_identity_alone_and_revocations_happen(ssh_keys):
    """An LDAP user holding a uid the list gives: the others are still added, changed and removed, and a refused
    managed user that lost its login loses its keys."""
    keys = {"carol-1": ui.keys_text(ssh_keys), "dave-1": ui.keys_text(ssh_keys)}
    ldap = ui.User("ldap-user", 200005, 200005, "LDAP User", "/home/ldap-user", "/bin/bash")
    before = host(managed("gone-1", 200009), managed("carol-1", 200003), managed("dave-1", 200004),
                  managed("erin-1", 200006, principal="user:old"), keys=keys)
    before.users["ldap-user"] = ldap
    identities = [ident(name="bob-1", uid=200005),  # new, clashes
                  ident(name="carol-1", uid=200005, login=False),  # moves onto the LDAP uid: refused, keys go
                  ident(name="dave-1", uid=200005, login=True, ssh_keys=ssh_keys[:1]),  # refused: keys stay
                  ident(name="erin-1", uid=200006), ident(name="fred-1", uid=200007)]
    the_plan = ui.plan(identities, before, True, PREFIX)
    assert sorted(the_plan.refused) == ["bob-1", "carol-1", "dave-1"]
    assert the_plan.refused["carol-1"] == ("uid 200005 of carol-1 is held by user ldap-user, which the platform "
                                           "does not manage")
    assert [u.name for u in the_plan.remove] == ["gone-1"]
    assert [i["name"] for i in the_plan.add] == ["fred-1"]
    assert list(the_plan.modify) == ["erin-1"]
    assert the_plan.keys == {"carol-1": None} and the_plan.end_sessions == ["carol-1"]
    commands = [c[0] + " " + c[-1] for c in the_plan.commands(before.groups, PREFIX)]
    assert commands == ["userdel gone-1", "groupadd fred-1", "useradd fred-1", "usermod erin-1"]
    after = ui.diff_after(identities, before, the_plan, PREFIX)["users"]
    assert "bob-1" not in after and after["carol-1"]["uid"] == 200003 and after["carol-1"]["login"] is False
    assert after["dave-1"]["keys"] == 2  # as it is


def test_a_uid_held_by_a_managed_user_that_stays_is_refused_and_one_that_goes_is_freed():
    stays = ui.plan([ident(name="bob-1", uid=200002), ident(name="carol-1", uid=200003)],
                    host(managed("carol-1", 200002)), False, PREFIX)
    assert stays.refused == {"bob-1": "uid 200002 of bob-1 is held by managed user carol-1, which the list "
                                      "gives another uid; gid 200002 of bob-1 is held by group carol-1"}
    assert stays.add == [] and stays.modify == {"carol-1": [["groupmod", "-g", "200003", "carol-1"],
                                                            ["usermod", "-u", "200003", "-g", "200003", "carol-1"]]}
    the_plan = ui.plan([ident(name="bob-1", uid=200002)], host(managed("carol-1", 200002)), False, PREFIX)
    assert [u.name for u in the_plan.remove] == ["carol-1"] and [i["name"] for i in the_plan.add] == ["bob-1"]
    assert the_plan.commands(system_groups(), PREFIX)[:2] == [["userdel", "-r", "carol-1"],
                                                              ["groupadd", "-g", "200002", "bob-1"]]


# ---- what changes ---------------------------------------------------------------------------------------
def test_new_users_get_a_group_a_home_and_keys_only_on_a_login_host(ssh_keys):
    identities = [ident(login=True, ssh_keys=ssh_keys), ident(name="bob-1", uid=200002)]
    login = ui.plan(identities, host(), True, PREFIX)
    assert [i["name"] for i in login.add] == ["alice-3f9a", "bob-1"]
    assert login.keys == {"alice-3f9a": (ssh_keys[0] + "\n" + ssh_keys[1] + "\n").encode()}
    assert login.end_sessions == [] and login.changed_users() == []
    assert login.commands(system_groups(), PREFIX)[:2] == [
        ["groupadd", "-g", "200001", "alice-3f9a"],
        ["useradd", "-u", "200001", "-g", "200001", "-d", "/home/alice-3f9a", "-m", "-K", "HOME_MODE=0700",
         "-s", "/bin/bash", "-l", "-c", "gpuaas user/1", "alice-3f9a"],
    ]
    worker = ui.plan(identities, host(), False, PREFIX)
    assert worker.keys == {} and len(worker.add) == 2


def test_a_group_left_from_an_earlier_try_is_used():
    the_plan = ui.plan([ident()], ui.Host(system_users(), dict(system_groups(), **{"alice-3f9a": 200001})),
                       False, PREFIX)
    assert the_plan.commands(dict(system_groups(), **{"alice-3f9a": 200001}), PREFIX)[0][0] == "useradd"


def test_equal_users_need_nothing(ssh_keys):
    keys = {"alice-3f9a": ui.keys_text(ssh_keys), "bob-1": None}
    the_plan = ui.plan([ident(login=True, ssh_keys=ssh_keys), ident(name="bob-1", uid=200002)],
                       host(managed("alice-3f9a", 200001), managed("bob-1", 200002), keys=keys), True, PREFIX)
    assert the_plan.empty()
    # the same users on a worker: no keys anywhere is what it wants
    worker = ui.plan([ident(login=True, ssh_keys=ssh_keys)], host(managed("alice-3f9a", 200001)), False, PREFIX)
    assert worker.empty()


def test_removed_users_go_and_unmanaged_ones_stay():
    the_plan = ui.plan([ident()], host(managed("alice-3f9a", 200001), managed("gone-1", 200009)), False, PREFIX)
    assert [u.name for u in the_plan.remove] == ["gone-1"]
    assert the_plan.commands(system_groups(), PREFIX) == [["userdel", "-r", "gone-1"]]
    # an empty list removes every managed user, and only those
    assert [u.name for u in ui.plan([], host(managed("gone-1", 200009)), False, PREFIX).remove] == ["gone-1"]


def test_drift_is_set_back():
    # as `groupmod -g 200011 alice-3f9a; usermod -c ... -d /srv/alice -s /bin/sh alice-3f9a` leave it
    drifted = ui.User("alice-3f9a", 200001, 200011, "gpuaas user/old", "/srv/alice", "/bin/sh")
    the_plan = ui.plan([ident()], host(drifted), False, PREFIX)
    assert the_plan.modify == {"alice-3f9a": [
        ["groupmod", "-g", "200001", "alice-3f9a"],
        ["usermod", "-g", "200001", "-c", "gpuaas user/1", "-d", "/home/alice-3f9a", "-m", "-s", "/bin/bash",
         "alice-3f9a"],
    ]}
    # a missing home (or one another user owns) is made again
    again = ui.plan([ident()], host(managed("alice-3f9a", 200001), home_ok={"alice-3f9a": False}), False, PREFIX)
    assert again.homes == ["alice-3f9a"] and again.changed_users() == ["alice-3f9a"]


def test_lost_login_removes_the_keys_and_ends_sessions(ssh_keys):
    keys = {"alice-3f9a": ui.keys_text(ssh_keys)}
    users = (managed("alice-3f9a", 200001),)
    lost = ui.plan([ident(login=False, ssh_keys=ssh_keys)], host(*users, keys=keys), True, PREFIX)
    assert lost.keys == {"alice-3f9a": None} and lost.end_sessions == ["alice-3f9a"]
    # keys left on a host that is not a login host go the same way
    worker = ui.plan([ident(login=True, ssh_keys=ssh_keys)], host(*users, keys=keys), False, PREFIX)
    assert worker.keys == {"alice-3f9a": None} and worker.end_sessions == ["alice-3f9a"]
    changed = ui.plan([ident(login=True, ssh_keys=ssh_keys[:1])], host(*users, keys=keys), True, PREFIX)
    assert changed.keys == {"alice-3f9a": ui.keys_text(ssh_keys[:1])} and changed.end_sessions == []
    # a link planted where authorized_keys belongs is replaced, and so is a file too large to read
    for odd in (ui.NOT_A_FILE, ui.TOO_LARGE):
        planted = ui.plan([ident(login=True, ssh_keys=ssh_keys)], host(*users, keys={"alice-3f9a": odd}),
                          True, PREFIX)
        assert planted.keys == {"alice-3f9a": ui.keys_text(ssh_keys)}


def test_authorized_keys2_goes(ssh_keys):
    users = (managed("alice-3f9a", 200001), managed("bob-1", 200002))
    before = host(*users, keys={"alice-3f9a": ui.keys_text(ssh_keys)}, keys2={"alice-3f9a", "bob-1"})
    the_plan = ui.plan([ident(login=True, ssh_keys=ssh_keys), ident(name="bob-1", uid=200002)], before, True,
                       PREFIX)
    assert the_plan.keys == {} and sorted(the_plan.keys2) == ["alice-3f9a", "bob-1"]
    # bob may not log in: the keys he had there were a way in
    assert the_plan.end_sessions == ["bob-1"] and the_plan.changed_users() == ["alice-3f9a", "bob-1"]
    assert ui.diff_before(before, PREFIX)["users"]["bob-1"]["authorized_keys2"] is True
    assert "authorized_keys2" not in ui.diff_after([ident(name="bob-1", uid=200002)], before, the_plan,
                                                   PREFIX)["users"]["bob-1"]


def test_diff_shows_counts_and_a_digest_never_keys(ssh_keys):
    keys = {"alice-3f9a": ui.keys_text(ssh_keys)}
    before_host = host(managed("alice-3f9a", 200001, "user:1"), managed("gone-1", 200009), keys=keys)
    identities = [ident(login=True, ssh_keys=ssh_keys[:1])]
    the_plan = ui.plan(identities, before_host, True, PREFIX)
    before = ui.diff_before(before_host, PREFIX)
    after = ui.diff_after(identities, before_host, the_plan, PREFIX)
    assert before["users"]["alice-3f9a"]["keys"] == 2 and after["users"]["alice-3f9a"]["keys"] == 1
    assert before["users"]["alice-3f9a"]["keys_sha256"] != after["users"]["alice-3f9a"]["keys_sha256"]
    assert before["users"]["gone-1"] == {"uid": 200009, "principal": "user:1", "login": False, "keys": 0}
    assert "gone-1" not in after["users"]
    assert after["users"]["alice-3f9a"]["principal"] == "user:1"
    assert not any(k.split()[1][:16] in repr((before, after)) for k in ssh_keys)


# ---- ~/.ssh, which the user owns: real files in a home under tmp_path (as root, as the module runs) ----------------
@pytest.fixture
def home(tmp_path, monkeypatch):
    """/home/alice-3f9a/.ssh under tmp_path, owned by uid 200001 as useradd leaves it, and a file outside it that
    links the user plants point at."""
    if os.geteuid() != 0:
        pytest.skip("writing another user's files needs root")
    monkeypatch.setattr(ui, "HOME_ROOT", str(tmp_path / "home"))
    ssh = tmp_path / "home" / "alice-3f9a" / ".ssh"
    ssh.mkdir(parents=True)
    for path in (ssh.parent, ssh):
        os.chown(path, 200001, 200001)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("root's\n")
    return ssh, outside


def plant_tree(ssh, outside):
    """A directory at authorized_keys with files, a fifo, links out and a subdirectory."""
    tree = ssh / "authorized_keys"
    (tree / "sub" / "deeper").mkdir(parents=True)
    (tree / "sub" / "deeper" / "file").write_text("x")
    os.mkfifo(tree / "fifo")
    (tree / "to-outside").symlink_to(outside)
    (tree / "sub" / "to-secret").symlink_to(outside / "secret")


def test_whatever_the_user_puts_at_authorized_keys_is_replaced_never_followed(home, ssh_keys):
    ssh, outside = home
    data = ui.keys_text(ssh_keys)
    # what a user can leave there: a directory tree (with links out of it), a fifo, a link out
    for plant in (lambda: plant_tree(ssh, outside), lambda: os.mkfifo(ssh / "authorized_keys"),
                  lambda: (ssh / "authorized_keys").symlink_to(outside / "secret")):
        plant()
        assert ui.read_keys("alice-3f9a") == ui.NOT_A_FILE
        ui.write_keys("alice-3f9a", 200001, 200001, data)
        written = os.lstat(ssh / "authorized_keys")
        assert stat.S_ISREG(written.st_mode) and (written.st_uid, stat.S_IMODE(written.st_mode)) == (200001, 0o600)
        assert ui.read_keys("alice-3f9a") == data
        assert sorted(os.listdir(ssh)) == ["authorized_keys"]  # no temp file left
        (ssh / "authorized_keys").unlink()
    # and removed the same way when the user may not log in
    plant_tree(ssh, outside)
    ui.write_keys("alice-3f9a", 200001, 200001, None)
    assert os.listdir(ssh) == []
    assert sorted(os.listdir(outside)) == ["secret"] and (outside / "secret").read_text() == "root's\n"


def test_temp_files_the_user_made_first_do_not_stop_the_write(home, ssh_keys, monkeypatch):
    ssh, _outside = home
    # the name the module used to write (its pid), as a file and as a directory, and the name it draws first
    mine = [f".authorized_keys.gpuaas-{os.getpid()}", ".authorized_keys.gpuaas-1",
            ".authorized_keys.gpuaas-" + "00" * 16]
    (ssh / mine[0]).write_text("mine")
    (ssh / mine[1]).mkdir()
    (ssh / mine[2]).symlink_to("/etc/passwd")
    draws = []
    real_urandom = os.urandom
    monkeypatch.setattr(os, "urandom", lambda n: draws.append(n) or (b"\0" * n if len(draws) == 1 else real_urandom(n)))
    ui.write_keys("alice-3f9a", 200001, 200001, ui.keys_text(ssh_keys))
    assert len(draws) == 2  # the taken name was passed over
    assert ui.read_keys("alice-3f9a") == ui.keys_text(ssh_keys)
    assert sorted(os.listdir(ssh)) == sorted(mine + ["authorized_keys"])


def test_a_huge_authorized_keys_is_not_read_whole(home, ssh_keys):
    ssh, _outside = home
    (ssh / "authorized_keys").write_bytes(b"#" * ui.KEYS_READ_MAX)
    assert ui.read_keys("alice-3f9a") == b"#" * ui.KEYS_READ_MAX
    with open(ssh / "authorized_keys", "ab") as grown:
        grown.truncate(8 * 1024 ** 3)  # 8 GiB, sparse
    assert ui.read_keys("alice-3f9a") == ui.TOO_LARGE
    ui.write_keys("alice-3f9a", 200001, 200001, ui.keys_text(ssh_keys))
    assert ui.read_keys("alice-3f9a") == ui.keys_text(ssh_keys)


def test_authorized_keys2_is_found_and_removed_whatever_it_is(home):
    ssh, outside = home
    assert ui.has_keys2("alice-3f9a") is False
    (ssh / "authorized_keys2").symlink_to(outside)
    assert ui.has_keys2("alice-3f9a") is True
    ui.remove_keys2("alice-3f9a")
    (ssh / "authorized_keys2").mkdir()
    (ssh / "authorized_keys2" / "key").write_text("ssh-ed25519 AAAA")
    ui.remove_keys2("alice-3f9a")
    assert os.listdir(ssh) == [] and os.listdir(outside) == ["secret"]
    ui.remove_keys2("alice-3f9a")  # nothing there: nothing to do


def test_a_deep_tree_is_removed_without_recursion(home):
    ssh, _outside = home
    fd = os.open(ssh, os.O_RDONLY)
    for _level in range(3000):  # deeper than Python's recursion limit and PATH_MAX
        os.mkdir("d", dir_fd=fd)
        deeper = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = deeper
    os.close(fd)
    os.rename(ssh / "d", ssh / "authorized_keys")
    ui.write_keys("alice-3f9a", 200001, 200001, None)
    assert os.listdir(ssh) == []


# ---- processes ------------------------------------------------------------------------------------------
def test_processes_below_slurmstepd_are_spared(tmp_path):
    """A process tree written as /proc files: sshd (root) -> bash (uid 200001) -> sleep; slurmstepd (root) ->
    the job's sleep (uid 200001); the user's own process named slurmstepd -> sleep (spares nothing)."""
    tree = {10: (1, "sshd", 0), 11: (10, "bash", 200001), 12: (11, "sleep", 200001), 20: (1, "slurmstepd", 0),
            21: (20, "sleep", 200001), 30: (1, "zombie", 200001), 40: (11, "slurmstepd", 200001),
            41: (40, "sleep", 200001)}
    for pid, (ppid, name, uid) in tree.items():
        (tmp_path / str(pid)).mkdir()
        state = "Z (zombie)" if name == "zombie" else "S (sleeping)"
        (tmp_path / str(pid) / "status").write_text(
            f"Name:\t{name}\nState:\t{state}\nPPid:\t{ppid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    processes = ui.read_processes(str(tmp_path))
    assert 30 not in processes
    assert ui.user_pids(processes, 200001, spare_jobs=True) == [11, 12, 40, 41]
    assert ui.user_pids(processes, 200001, spare_jobs=False) == [11, 12, 21, 40, 41]


def test_this_machines_proc_is_read():
    processes = ui.read_processes()
    assert processes[os.getpid()][0] == os.getppid()
    assert processes[os.getpid()][2:] == (os.getuid(), os.geteuid())
    assert os.getpid() in ui.user_pids(processes, os.getuid(), spare_jobs=False)


# ---- the module's flow, in check mode (it changes nothing; test_unix_identities_live.py runs it for real) ----
def test_check_mode_reports_and_runs_nothing(ssh_keys):
    tools = []

    def no_command(argv, **kw):
        tools.append(argv)
        raise AssertionError(f"check mode ran {argv}")

    ended = run_module(ui.main, {"identities": [ident(login=True, ssh_keys=ssh_keys)], "manage_keys": True},
                       no_command, check_mode=True)
    assert not ended.failed, ended.result
    result = ended.result
    assert result["changed"] is True and result["added"] == ["alice-3f9a"] and tools == []
    assert result["commands"][0] == "groupadd -g 200001 alice-3f9a"
    assert result["diff"]["after"]["users"]["alice-3f9a"]["keys"] == 2


def test_refusals_end_the_module_before_any_command():
    ended = run_module(ui.main, {"identities": [ident(name="root")]}, lambda argv, **kw: pytest.fail(str(argv)))
    assert ended.failed and "user root exists and the platform does not manage it" in ended.result["msg"]
    ended = run_module(ui.main, {"identities": [ident(uid=5)]}, lambda argv, **kw: pytest.fail(str(argv)))
    assert ended.failed and "uid 5 is outside" in ended.result["msg"]
