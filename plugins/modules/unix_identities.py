#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: unix_identities
short_description: Keep a host's platform-managed Unix users (and their SSH keys) equal to a list, in one run
version_added: "0.1.0"
description:
  - Makes the Unix users the platform manages on a host equal to O(identities), in one module run. A user is
    managed when its GECOS starts with O(gecos_prefix); every other user is left alone.
  - Each identity gets a group of its own with gid equal to its uid, a user with that uid and group, the home
    directory C(/home/<name>) (created mode 0700 from C(/etc/skel)), the shell C(/bin/bash) and the GECOS
    O(gecos_prefix) followed by its principal, where C(:) is written C(/) (C(useradd) refuses C(:) in a GECOS,
    the field separator of C(/etc/passwd)). A managed user whose uid, group, home, shell or GECOS drifted is
    set back.
  - A managed user the list no longer names is removed with C(userdel -r) (its home goes too), after every
    process it runs on the host, Slurm job steps included, has been killed.
  - With O(manage_keys=true) (a login host) C(~/.ssh/authorized_keys) (directory 0700, file 0600, both owned by
    the user) holds exactly the identity's O(identities[].ssh_keys) when O(identities[].login) is true, and
    does not exist otherwise. With O(manage_keys=false) no C(authorized_keys) is written, and one left there
    is removed. A managed user's C(~/.ssh/authorized_keys2) (which Debian's sshd reads too) is removed on every
    host, as the platform never writes one.
  - Removing a user's C(authorized_keys) (or, for a user without login, its C(authorized_keys2)) ends that
    user's sessions on the host. Its processes are killed, except those below a C(slurmstepd) that root runs
    (its Slurm jobs, which losing the login does not end).
  - The user owns C(~/.ssh), and nothing they leave there stops a run or is followed. C(~/.ssh) and
    C(authorized_keys) are opened without following links; a C(~/.ssh) that is not a directory is replaced by
    one; whatever stands at C(authorized_keys) that is not a regular file (a directory tree, a fifo, a link) is
    removed without following links; the new file is written under a random name and renamed into place; an
    C(authorized_keys) over 1 MiB is not read, only rewritten.
  - An identity whose name or uid (or the group of that name or gid) is held by a user or group the platform
    does not manage, or whose uid is held by another managed user that stays, is refused. It is left as it is
    (but a managed user of that name that lost its login still loses its C(authorized_keys)), everything else
    is done, removals included, and then the module fails naming every refused identity.
  - Refused before anything changes are names not matching C(^[a-z][a-z0-9-]{0,31}$), uids outside
    200000-2147483647, duplicate names or uids, and SSH keys that are not a single public key line.
  - Uses C(groupadd), C(groupmod), C(groupdel), C(useradd), C(usermod) and C(userdel) (shadow's tools, as on
    Debian), run with argument lists, never through a shell.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  identities:
    description:
      - Every user the platform manages on this host. The items of an access map's C(identities) can be
        given as they are.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Unix user (and group) name, C(^[a-z][a-z0-9-]{0,31}$).
        type: str
        required: true
      uid:
        description: The user's uid and its group's gid, 200000 to 2147483647.
        type: int
        required: true
      principal:
        description:
          - Who the user stands for, such as C(user:0a7e...), recorded in the GECOS after O(gecos_prefix).
            Letters, digits and C(_.@:-).
        type: str
        required: true
      login:
        description: Whether the user may log in on the login hosts (O(manage_keys=true)) with O(identities[].ssh_keys).
        type: bool
        default: false
      ssh_keys:
        description:
          - Public keys, one line each (C(<type> <base64> [comment]), no options), written to
            C(authorized_keys) in this order when O(identities[].login) is true.
        type: list
        elements: str
        default: []
      account:
        description: Not used here (the scheduler's association, see M(gpuaas.apps.slurm_accounts)); accepted
          so that the items of an access map's C(identities) can be given as they are.
        type: str
  manage_keys:
    description:
      - V(true) on a login host, where C(authorized_keys) holds the keys of the identities that may log in.
        V(false) elsewhere, where no C(authorized_keys) is written and managed users' existing ones are removed.
    type: bool
    default: false
  gecos_prefix:
    description: The start of the GECOS that marks a user as managed by the platform.
    type: str
    default: "gpuaas "
notes:
  - Supports check mode and diff mode. The diff shows every managed user with its uid, principal, whether
    it holds an C(authorized_keys) (C(login)), how many keys that holds and a short digest of it, and
    C(authorized_keys2) when it has one; never the keys themselves.
  - Killing a removed user's processes ends its Slurm job steps on this host; the scheduler side
    (M(gpuaas.apps.slurm_accounts)) cancels the jobs themselves.
extends_documentation_fragment:
  - gpuaas.apps.attributes.check_and_diff
"""

EXAMPLES = r"""
- name: Keep the platform's users equal to the access map (a login host)
  gpuaas.apps.unix_identities:
    identities: "{{ gpuaas_access.identities }}"
    manage_keys: true

- name: A worker host, with one user written out
  gpuaas.apps.unix_identities:
    identities:
      - name: alice-3f9a
        uid: 200001
        principal: "user:0a7e5c1e-8d7f-4f65-9c55-3b1d0f0f4b11"
        login: true
        ssh_keys: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB3n4rY0q8n9Yq1m0m9Z0h2lqGZq1Xq8h3VbW1dI5h0x alice@laptop"]
"""

RETURN = r"""
added:
  description: Users created.
  returned: always
  type: list
  elements: str
  sample: [alice-3f9a]
removed:
  description: Managed users removed (with their homes), because the list no longer names them.
  returned: always
  type: list
  elements: str
  sample: [bob-77c2]
changed_users:
  description: Users that stayed and changed (uid, group, home, shell, GECOS, C(authorized_keys) or
    C(authorized_keys2)).
  returned: always
  type: list
  elements: str
  sample: [carol-0b1d]
sessions_ended:
  description:
    - Users whose processes were killed because their C(authorized_keys) went (not those removed). In check
      mode, the users whose C(authorized_keys) would go.
  returned: always
  type: list
  elements: str
  sample: [carol-0b1d]
refused:
  description:
    - Identities left as they are because their name, uid or gid is held by someone else (the module fails
      naming each, after doing everything else).
  returned: always
  type: list
  elements: str
  sample: [dave-91e0]
commands:
  description: The shadow tools' commands run (in check mode, those that would run).
  returned: always
  type: list
  elements: str
  sample: ["groupadd -g 200001 alice-3f9a", "useradd -u 200001 -g 200001 ... alice-3f9a"]
"""

import base64  # noqa: E402 - Ansible modules import after their documentation
import binascii  # noqa: E402
import contextlib  # noqa: E402
import errno  # noqa: E402
import grp  # noqa: E402
import hashlib  # noqa: E402
import os  # noqa: E402
import pwd  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import stat  # noqa: E402
import struct  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
PRINCIPAL_RE = re.compile(r"^[A-Za-z0-9_.@:-]{1,200}$")
# "<type> <base64 blob> [comment]": a plain public key line, without authorized_keys options.
KEY_RE = re.compile(r"^(?P<type>[a-z][a-z0-9@.-]*) (?P<blob>[A-Za-z0-9+/]+={0,3})(?: [^\x00-\x1f\x7f]*)?$")
UID_MIN = 200000
UID_MAX = 2147483647
HOME_ROOT = "/home"
SHELL = "/bin/bash"
HOME_MODE = 0o700
# Processes below this one, when root runs it, are a Slurm job's: losing the login does not end them. (Anyone can
# name a process slurmstepd; only Slurm starts it as root.)
JOB_ANCESTOR = "slurmstepd"
KILL_TIMEOUT = 10.0
# What read_keys() gives for an authorized_keys that is a link or not a regular file: never equal to the bytes
# the plan wants, so it is replaced (or removed).
NOT_A_FILE = "(not a regular file)"
# authorized_keys is read up to this size; a larger one is rewritten (the user owns ~/.ssh and can make it any size).
KEYS_READ_MAX = 1024 * 1024
TOO_LARGE = "(larger than 1 MiB)"
# Debian's sshd also reads this one (AuthorizedKeysFile); the platform never writes it, so a managed user's goes.
KEYS2 = "authorized_keys2"


class User:
    """A passwd entry."""

    def __init__(self, name, uid, gid, gecos, home, shell):
        self.name, self.uid, self.gid, self.gecos, self.home, self.shell = name, uid, gid, gecos, home, shell


class Host:
    """The users, groups and authorized_keys the plan starts from.

    ``keys`` maps a user name to the bytes of its authorized_keys, or None when there is none; ``home_ok`` maps
    it to whether /home/<name> is a directory the user owns; ``keys2`` holds the names that have an
    authorized_keys2. All are read for the users that matter only.
    """

    def __init__(self, users, groups, keys=None, home_ok=None, keys2=()):
        self.users = dict((u.name, u) for u in users)
        self.groups = dict(groups)  # name -> gid
        self.keys = keys or {}
        self.home_ok = home_ok or {}
        self.keys2 = set(keys2)

    def user_with_uid(self, uid, other_than):
        return next((u for u in self.users.values() if u.uid == uid and u.name != other_than), None)

    def group_with_gid(self, gid, other_than):
        return next((n for n, g in self.groups.items() if g == gid and n != other_than), None)


def home_of(name):
    return os.path.join(HOME_ROOT, name)


def gecos_of(prefix, principal):
    return prefix + principal.replace(":", "/")


def principal_of(prefix, gecos):
    """The principal a managed user's GECOS records (gecos_of() undone: principals hold no '/')."""
    return gecos[len(prefix):].replace("/", ":")


def keys_text(keys):
    """The authorized_keys content for ``keys``: one per line, duplicates dropped, in order."""
    seen = []
    for key in keys:
        if key.strip() not in seen:
            seen.append(key.strip())
    return "".join(k + "\n" for k in seen).encode("utf-8")


# ---- input checks ---------------------------------------------------------------------------------
def key_problem(key):
    """Why ``key`` is not one public key line (None when it is). Never quotes the key."""
    match = KEY_RE.match(key.strip())
    if not match:
        return "is not one public key line ('<type> <base64> [comment]', without options)"
    try:
        blob = base64.b64decode(match.group("blob"), validate=True)
    except (binascii.Error, ValueError):
        return "has a key that is not valid base64"
    # The blob starts with its own type as an SSH string: a 4-byte length, then the name.
    if len(blob) < 4:
        return "has a key too short to be one"
    (length,) = struct.unpack(">I", blob[:4])
    if blob[4:4 + length] != match.group("type").encode("ascii"):
        return "has a key whose data is not of its type %s" % match.group("type")
    return None


def check_params(identities, prefix):
    """Every problem with the parameters themselves, as messages."""
    problems = []
    if not prefix.strip() or any(c in prefix for c in ":,\n"):
        problems.append("gecos_prefix must hold a non-blank marker without ':', ',' or newlines")
    seen_names, seen_uids = {}, {}
    for index, ident in enumerate(identities):
        name, uid = ident["name"], ident["uid"]
        label = "identities[%d] (%s)" % (index, name)
        if not NAME_RE.match(name):
            problems.append("%s: the name must match ^[a-z][a-z0-9-]{0,31}$" % label)
        if not UID_MIN <= uid <= UID_MAX:
            problems.append("%s: uid %d is outside %d-%d" % (label, uid, UID_MIN, UID_MAX))
        if not PRINCIPAL_RE.match(ident["principal"]):
            problems.append("%s: the principal must be letters, digits and '_.@:-' (at most 200)" % label)
        if name in seen_names:
            problems.append("%s: the name is given twice (also identities[%d])" % (label, seen_names[name]))
        if uid in seen_uids:
            problems.append("%s: uid %d is given twice (also identities[%d])" % (label, uid, seen_uids[uid]))
        seen_names.setdefault(name, index)
        seen_uids.setdefault(uid, index)
        for key_index, key in enumerate(ident.get("ssh_keys") or []):
            problem = key_problem(key)
            if problem:
                problems.append("%s: ssh_keys[%d] %s" % (label, key_index, problem))
    return problems


# ---- deciding -------------------------------------------------------------------------------------
class Plan:
    """What a run does, in the order it does it: removals, then each identity's changes."""

    def __init__(self):
        self.remove = []  # [User]
        self.add = []  # [identity]
        self.modify = {}  # name -> [usermod/groupmod steps]
        self.homes = []  # names whose /home/<name> must be made (or given back to the user)
        self.keys = {}  # name -> bytes to write, or None to remove
        self.keys2 = []  # names whose authorized_keys2 goes
        self.end_sessions = []  # names whose processes end because their authorized_keys goes
        self.refused = {}  # name -> why the identity is left as it is (a clash with what the platform does not own)

    def empty(self):
        """Whether nothing is to change (refused identities change nothing)."""
        return not (self.remove or self.add or self.modify or self.homes or self.keys or self.keys2)

    def changed_users(self):
        added = set(i["name"] for i in self.add)
        return sorted((set(self.modify) | set(self.homes) | set(self.keys) | set(self.keys2)) - added)

    def commands(self, host_groups, prefix):
        """The shadow tools' argument lists, in order (userdel after the user's processes are killed)."""
        commands = [["userdel", "-r", u.name] for u in self.remove]
        for ident in self.add:
            commands += add_steps(ident, host_groups, prefix)
        for name in sorted(self.modify):
            commands += self.modify[name]
        return commands


def plan(identities, host, manage_keys, prefix):
    """The Plan that makes ``host`` equal to ``identities``. An identity that clashes with a user or group the
    platform does not manage (or with a managed user that stays) is refused, named in ``refused``, and left as
    it is, but for its logins being revoked; every other change is planned, removals first."""
    managed = dict((n, u) for n, u in host.users.items() if u.gecos.startswith(prefix))
    wanted = dict((i["name"], i) for i in identities)
    result = Plan()
    result.remove = [managed[n] for n in sorted(managed) if n not in wanted]
    leaving = set(u.name for u in result.remove)
    # userdel removes the group of the user's name with its primary gid; another one stays.
    leaving_groups = set(u.name for u in result.remove if host.groups.get(u.name) == u.gid)

    for ident in identities:
        problems = clashes(ident, host, managed, leaving, leaving_groups, prefix)
        if problems:
            result.refused[ident["name"]] = "; ".join(problems)

    for ident in identities:
        name = ident["name"]
        user = host.users.get(name)
        desired = keys_text(ident.get("ssh_keys") or []) if manage_keys and ident.get("login") else None
        if name in result.refused:
            # Left as it is, but a managed user that lost its login loses it here too: a revocation never waits.
            if name in managed:
                plan_keys(result, name, host, None if desired is None else host.keys.get(name))
            continue
        if user is None:
            result.add.append(ident)
        else:
            steps = modify_steps(ident, user, host.groups.get(name), prefix)
            if steps:
                result.modify[name] = steps
            if not host.home_ok.get(name, False):
                result.homes.append(name)
        plan_keys(result, name, host, desired)
    return result


def plan_keys(result, name, host, desired):
    """Plans authorized_keys to hold ``desired`` (None: to be absent, ending sessions) and authorized_keys2 to go."""
    current = host.keys.get(name)
    if current != desired:
        result.keys[name] = desired
        if desired is None:
            result.end_sessions.append(name)
    if name in host.keys2:
        result.keys2.append(name)
        if desired is None and name not in result.end_sessions:
            result.end_sessions.append(name)


def clashes(ident, host, managed, leaving, leaving_groups, prefix):
    """Why ``ident`` cannot be made on ``host`` (its name, uid or gid held by someone else), as messages."""
    name, uid = ident["name"], ident["uid"]
    user = host.users.get(name)
    problems = []
    if user is not None and name not in managed:
        return ["user %s exists and the platform does not manage it (its GECOS %r does not start with %r)"
                % (name, user.gecos, prefix)]
    holder = host.user_with_uid(uid, other_than=name)
    if holder is not None and holder.name not in leaving:
        whose = "managed user %s, which the list gives another uid" % holder.name if holder.name in managed \
            else "user %s, which the platform does not manage" % holder.name
        problems.append("uid %d of %s is held by %s" % (uid, name, whose))
    gid = host.groups.get(name)
    own_group = user is not None and gid == user.gid
    if gid is not None and gid != uid and not own_group:
        problems.append("group %s exists with gid %d, not %d, and is not the primary group of a managed user "
                        "of that name" % (name, gid, uid))
    group_holder = host.group_with_gid(uid, other_than=name)
    if group_holder is not None and group_holder not in leaving_groups:
        problems.append("gid %d of %s is held by group %s" % (uid, name, group_holder))
    return problems


def modify_steps(ident, user, group_gid, prefix):
    """The groupmod/usermod argument lists that set an existing managed user back to ``ident``."""
    name, uid = ident["name"], ident["uid"]
    steps = []
    if group_gid is None:
        steps.append(["groupadd", "-g", str(uid), name])
    elif group_gid != uid:
        steps.append(["groupmod", "-g", str(uid), name])
    args = []
    if user.uid != uid:
        args += ["-u", str(uid)]
    if user.gid != uid:
        args += ["-g", str(uid)]
    if user.gecos != gecos_of(prefix, ident["principal"]):
        args += ["-c", gecos_of(prefix, ident["principal"])]
    if user.home != home_of(name):
        args += ["-d", home_of(name), "-m"]
    if user.shell != SHELL:
        args += ["-s", SHELL]
    if args:
        steps.append(["usermod"] + args + [name])
    return steps


def add_steps(ident, host_groups, prefix):
    name, uid = ident["name"], ident["uid"]
    steps = []
    if host_groups.get(name) != uid:
        steps.append(["groupadd", "-g", str(uid), name])
    # -l: no lastlog/faillog entry (a sparse file as large as the uid); the home's mode is the module's, not
    # login.defs'.
    steps.append(["useradd", "-u", str(uid), "-g", str(uid), "-d", home_of(name), "-m", "-K",
                  "HOME_MODE=%04o" % HOME_MODE, "-s", SHELL, "-l", "-c", gecos_of(prefix, ident["principal"]),
                  name])
    return steps


# ---- reporting ------------------------------------------------------------------------------------
def key_summary(data):
    if data is None:
        return {"login": False, "keys": 0}
    if data in (NOT_A_FILE, TOO_LARGE):
        return {"login": True, "keys": data}
    count = len([line for line in data.decode("utf-8", "replace").splitlines() if line.strip()])
    return {"login": True, "keys": count, "keys_sha256": hashlib.sha256(data).hexdigest()[:12]}


def diff_before(host, prefix):
    users = {}
    for name, user in sorted(host.users.items()):
        if user.gecos.startswith(prefix):
            users[name] = user_view(user.uid, principal_of(prefix, user.gecos), host.keys.get(name),
                                    name in host.keys2)
    return {"users": users}


def diff_after(identities, host, the_plan, prefix):
    """What the plan leaves: every identity, its keys as the plan writes them or as they are; a refused one as
    it is (if the platform manages a user of its name)."""
    users = {}
    for ident in identities:
        name = ident["name"]
        data = the_plan.keys[name] if name in the_plan.keys else host.keys.get(name)
        keys2 = name in host.keys2 and name not in the_plan.keys2
        if name not in the_plan.refused:
            users[name] = user_view(ident["uid"], ident["principal"], data, keys2)
            continue
        user = host.users.get(name)
        if user is not None and user.gecos.startswith(prefix):
            users[name] = user_view(user.uid, principal_of(prefix, user.gecos), data, keys2)
    return {"users": dict(sorted(users.items()))}


def user_view(uid, principal, keys, keys2):
    view = {"uid": uid, "principal": principal}
    view.update(key_summary(keys))
    if keys2:
        view[KEYS2] = True
    return view


# ---- this host ------------------------------------------------------------------------------------
def read_host(identities, prefix):
    """Users and groups as NSS gives them; the homes of the identities that exist, and the authorized_keys of
    those and of the other managed users (for the diff)."""
    users = [User(p.pw_name, p.pw_uid, p.pw_gid, p.pw_gecos, p.pw_dir, p.pw_shell) for p in pwd.getpwall()]
    groups = dict((g.gr_name, g.gr_gid) for g in grp.getgrall())
    host = Host(users, groups)
    for ident in identities:
        user = host.users.get(ident["name"])
        if user is not None:
            host.home_ok[user.name] = home_ok(user.name, user.uid, user.gid)
    for user in host.users.values():
        if user.name in host.home_ok or user.gecos.startswith(prefix):
            host.keys[user.name] = read_keys(user.name)
            if has_keys2(user.name):
                host.keys2.add(user.name)
    return host


def open_dir(path, dir_fd=None):
    """An fd of the directory ``path`` (relative to ``dir_fd``), never through a symbolic link; None when there
    is no directory there."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return None
        raise


def home_ok(name, uid, gid):
    fd = open_dir(home_of(name))
    if fd is None:
        return False
    try:
        st = os.fstat(fd)
        return st.st_uid == uid and st.st_gid == gid
    finally:
        os.close(fd)


def open_ssh(name):
    """(fd of /home/<name>, fd of its .ssh), either None when missing, never through a link; close_fds() them."""
    home = open_dir(home_of(name))
    if home is None:
        return None, None
    try:
        return home, open_dir(".ssh", dir_fd=home)
    except Exception:
        os.close(home)
        raise


def close_fds(*fds):
    for fd in fds:
        if fd is not None:
            os.close(fd)


def read_keys(name):
    """The bytes of /home/<name>/.ssh/authorized_keys; None when there is none, NOT_A_FILE for a link or anything
    else that is not a regular file, TOO_LARGE for one over KEYS_READ_MAX (never read whole)."""
    home, ssh = open_ssh(name)
    try:
        if ssh is None:
            return None
        try:
            fd = os.open("authorized_keys", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=ssh)
        except OSError as error:
            if error.errno == errno.ENOENT:
                return None
            if error.errno == errno.ELOOP:
                return NOT_A_FILE
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return NOT_A_FILE
            chunks, size = [], 0
            while size <= KEYS_READ_MAX:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
                size += len(chunk)
            return TOO_LARGE
        finally:
            os.close(fd)
    finally:
        close_fds(ssh, home)


def has_keys2(name):
    """Whether anything (a file, a link, ...) is at /home/<name>/.ssh/authorized_keys2."""
    home, ssh = open_ssh(name)
    try:
        if ssh is None:
            return False
        os.stat(KEYS2, dir_fd=ssh, follow_symlinks=False)
        return True
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ENOTDIR):
            return False
        raise
    finally:
        close_fds(ssh, home)


def remove_entry(name, dir_fd):
    """Removes ``name`` in the directory ``dir_fd`` whatever it is (a directory with everything in it), never
    following a link: every step is relative to a directory opened with O_NOFOLLOW. Iterative, holding one fd
    per level of the directory being removed."""
    # [(parent fd, name, fd of the entry once opened as a directory)]
    todo = [(dir_fd, name, None)]
    retries = 100  # an entry that changed meanwhile is looked at again, not forever (the user can race us)
    try:
        while todo:
            parent, entry, fd = todo[-1]
            try:
                if fd is None:
                    os.unlink(entry, dir_fd=parent)
                else:
                    os.rmdir(entry, dir_fd=parent)
            except OSError as error:
                if error.errno == errno.ENOENT:
                    pass
                elif fd is None and error.errno in (errno.EISDIR, errno.EPERM):
                    opened = open_dir(entry, dir_fd=parent)
                    if opened is None:  # not a directory (any more): unlink again
                        retries -= 1
                        if retries < 0:
                            raise
                        continue
                    todo[-1] = (parent, entry, opened)
                    todo.extend((opened, child.name, None) for child in os.scandir(opened))
                    continue
                elif fd is not None and error.errno in (errno.ENOTEMPTY, errno.EEXIST) and retries > 0:
                    retries -= 1
                    todo.extend((fd, child.name, None) for child in os.scandir(fd))  # filled meanwhile
                    continue
                else:
                    raise
            todo.pop()
            close_fds(fd)
    finally:
        close_fds(*[fd for _parent, _entry, fd in todo])


def make_home(name, uid, gid):
    """/home/<name> as a directory owned by the user; a missing one is made mode 0700."""
    path = home_of(name)
    fd = open_dir(path)
    if fd is None:
        if os.path.lexists(path):
            raise OSError(errno.EEXIST, "%s exists and is not a directory" % path)
        os.mkdir(path, HOME_MODE)
        fd = open_dir(path)
    try:
        os.fchown(fd, uid, gid)
    finally:
        os.close(fd)


def write_keys(name, uid, gid, data):
    """Writes (``data`` bytes) or removes (None) /home/<name>/.ssh/authorized_keys without following links;
    whatever the user put there instead (a directory, a fifo, a link) goes."""
    home, ssh = open_ssh(name)
    try:
        if home is None:
            if data is None:
                return
            raise OSError(errno.ENOENT, "the home directory %s is missing" % home_of(name))
        if ssh is None:
            if data is None:
                return
            remove_entry(".ssh", home)  # a link or a file where the directory belongs
            os.mkdir(".ssh", 0o700, dir_fd=home)
            ssh = open_dir(".ssh", dir_fd=home)
            if ssh is None:
                raise OSError(errno.ENOTDIR, "%s/.ssh changed while it was made" % home_of(name))
        if data is None:
            remove_entry("authorized_keys", ssh)
            return
        os.fchown(ssh, uid, gid)
        os.fchmod(ssh, 0o700)
        # The user owns the directory: a name they cannot guess, so that no file of theirs stops the write.
        while True:
            tmp = ".authorized_keys.gpuaas-%s" % binascii.hexlify(os.urandom(16)).decode("ascii")
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=ssh)
                break
            except OSError as error:
                if error.errno != errno.EEXIST:
                    raise
        try:
            try:
                os.fchown(fd, uid, gid)
                os.fchmod(fd, 0o600)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            for _attempt in range(3):
                try:
                    os.rename(tmp, "authorized_keys", src_dir_fd=ssh, dst_dir_fd=ssh)
                    break
                except OSError as error:
                    # a directory there (rename replaces anything else)
                    if error.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST) or _attempt == 2:
                        raise
                    remove_entry("authorized_keys", ssh)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=ssh)
            raise
    finally:
        close_fds(ssh, home)


def remove_keys2(name):
    """Removes /home/<name>/.ssh/authorized_keys2, whatever it is, without following links."""
    home, ssh = open_ssh(name)
    try:
        if ssh is not None:
            remove_entry(KEYS2, ssh)
    finally:
        close_fds(ssh, home)


def read_processes(proc_root="/proc"):
    """{pid: (ppid, name, real uid, effective uid)} of the living (not zombie) processes."""
    processes = {}
    for entry in os.listdir(proc_root):
        if not entry.isdigit():
            continue
        fields = {}
        try:
            with open(os.path.join(proc_root, entry, "status")) as status:
                for line in status:
                    key, _sep, value = line.partition(":")
                    fields[key] = value.strip()
        except (IOError, OSError):
            continue  # ended meanwhile
        if fields.get("State", "").startswith("Z") or "Uid" not in fields:
            continue
        uids = fields["Uid"].split()
        processes[int(entry)] = (int(fields.get("PPid", "0")), fields.get("Name", ""), int(uids[0]), int(uids[1]))
    return processes


def user_pids(processes, uid, spare_jobs):
    """Pids running as ``uid``; with ``spare_jobs`` not those below a slurmstepd that root runs."""
    def in_job(pid):
        seen = set()
        while pid in processes and pid not in seen:
            seen.add(pid)
            ppid, name, ruid, euid = processes[pid]
            if name == JOB_ANCESTOR and ruid == 0 and euid == 0:
                return True
            pid = ppid
        return False

    return sorted(pid for pid, (_ppid, _name, ruid, euid) in processes.items()
                  if uid in (ruid, euid) and not (spare_jobs and in_job(pid)))


def end_processes(uid, spare_jobs, proc_root="/proc", timeout=KILL_TIMEOUT):
    """Kills (SIGKILL) the processes of ``uid`` until none is left (a dying shell may still fork); returns
    whether there were any. Raises RuntimeError naming those that outlive ``timeout``."""
    deadline = time.time() + timeout
    found = False
    while True:
        pids = user_pids(read_processes(proc_root), uid, spare_jobs)
        if not pids:
            return found
        found = True
        if time.time() > deadline:
            raise RuntimeError("processes of uid %d outlived SIGKILL for %ss: %s"
                               % (uid, timeout, ", ".join(str(p) for p in pids)))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError as error:
                if error.errno != errno.ESRCH:
                    raise
        time.sleep(0.05)


class Tools:
    """shadow's tools through run_command, argument lists only; a failure ends the module."""

    def __init__(self, module):
        self.module = module
        self.done = []

    def run(self, args):
        path = self.module.get_bin_path(args[0], required=True)
        rc, out, err = self.module.run_command([path] + args[1:], environ_update={"LC_ALL": "C"})
        if rc != 0:
            self.module.fail_json(msg="'%s' failed (rc=%d): %s" % (" ".join(args), rc, (err or out).strip()),
                                  commands=self.done)
        self.done.append(" ".join(args))


def apply(tools, the_plan, identities, host, prefix):
    """Carries out ``the_plan``; returns the users whose sessions ended, and {name: why} for the users whose
    authorized_keys could not be set (the others' are set all the same)."""
    ended, failed = [], {}
    for args in the_plan.commands(host.groups, prefix):
        if args[0] == "userdel":
            user = host.users[args[-1]]
            end_processes(user.uid, spare_jobs=False)
            tools.run(args)
            # userdel keeps the user's group where login.defs says USERGROUPS_ENAB no; it would block a new
            # identity of that name.
            left = [g for g in grp.getgrall() if g.gr_name == user.name and g.gr_gid == user.gid]
            if left and not any(p.pw_gid == user.gid for p in pwd.getpwall()):
                tools.run(["groupdel", user.name])
        else:
            tools.run(args)
    wanted = dict((i["name"], i) for i in identities)
    # useradd -m leaves a home that was there (from an earlier user of that name) to its old owner.
    for name in the_plan.homes + [i["name"] for i in the_plan.add]:
        make_home(name, wanted[name]["uid"], wanted[name]["uid"])
    for name in sorted(set(the_plan.keys) | set(the_plan.keys2)):
        # A refused identity keeps the uid it has.
        uid = host.users[name].uid if name in the_plan.refused else wanted[name]["uid"]
        try:
            if name in the_plan.keys2:
                remove_keys2(name)
            if name in the_plan.keys:
                write_keys(name, uid, uid, the_plan.keys[name])
        except OSError as error:
            failed[name] = "its authorized_keys could not be set: %s" % error
        # After the file went: a session cannot start again meanwhile.
        if name in the_plan.end_sessions and end_processes(uid, spare_jobs=True):
            ended.append(name)
    return ended, failed


def main():
    module = AnsibleModule(
        argument_spec=dict(
            identities=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True),
                uid=dict(type="int", required=True),
                principal=dict(type="str", required=True),
                login=dict(type="bool", default=False),
                ssh_keys=dict(type="list", elements="str", default=[], no_log=False),
                account=dict(type="str"),
            )),
            manage_keys=dict(type="bool", default=False),
            gecos_prefix=dict(type="str", default="gpuaas "),
        ),
        supports_check_mode=True,
    )
    identities = module.params["identities"]
    prefix = module.params["gecos_prefix"]
    manage_keys = module.params["manage_keys"]
    problems = check_params(identities, prefix)
    if problems:
        module.fail_json(msg="; ".join(problems))
    host = read_host(identities, prefix)
    the_plan = plan(identities, host, manage_keys, prefix)
    refused = ["%s is refused and left as it is: %s" % (name, why) for name, why in sorted(the_plan.refused.items())]
    result = dict(
        changed=not the_plan.empty(),
        commands=[" ".join(args) for args in the_plan.commands(host.groups, prefix)],
        added=[i["name"] for i in the_plan.add],
        removed=[u.name for u in the_plan.remove],
        changed_users=the_plan.changed_users(),
        sessions_ended=list(the_plan.end_sessions) if module.check_mode else [],
        refused=sorted(the_plan.refused),
        diff=dict(before=diff_before(host, prefix), after=diff_after(identities, host, the_plan, prefix)),
    )
    if the_plan.empty() or module.check_mode:
        if refused:
            module.fail_json(msg="; ".join(refused), **result)
        module.exit_json(**result)

    tools = Tools(module)
    try:
        result["sessions_ended"], failed = apply(tools, the_plan, identities, host, prefix)
        after = read_host(identities, prefix)
        leftover = plan(identities, after, manage_keys, prefix)
    except (OSError, RuntimeError) as error:
        module.fail_json(msg="changing the users failed: %s" % error, commands=tools.done)
    result["diff"]["after"] = diff_after(identities, after, leftover, prefix)
    result["commands"] = tools.done
    # Refused and failed identities are named already; anything else the host still differs in is a fault.
    known = set(the_plan.refused) | set(failed)
    differs = (set(leftover.changed_users()) | set(i["name"] for i in leftover.add)
               | set(u.name for u in leftover.remove)) - known
    problems = refused + ["%s: %s" % (name, why) for name, why in sorted(failed.items())]
    if differs:
        problems.append("the changes were made but the host still differs for: %s" % ", ".join(sorted(differs)))
    if problems:
        module.fail_json(msg="; ".join(problems), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
