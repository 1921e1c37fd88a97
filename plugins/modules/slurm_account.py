#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: slurm_account
short_description: Manage Slurm accounts, users and their associations in slurmdbd
version_added: "0.1.0"
description:
  - Creates, updates and removes a Slurm account and its association (parent, limits, QOS), or, with
    O(user), that user's association with the account, through C(sacctmgr -i). State is read with
    C(sacctmgr -P -n) (parsable output) and only the fields given are managed.
  - sacctmgr silently lowercases account and user names, descriptions and organizations, turns quotes into
    backticks, splits names at commas and cuts them at C(=). Such input is rejected with a message instead
    of being stored as something else.
  - After a change the module reads the association back and fails if a field did not take the value asked
    for, so a second run reports no change.
  - Written for Slurm 22.05 (Debian 12); needs slurmdbd.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  account:
    description:
      - Account name. Lowercase letters, digits, C(_), C(.) and C(-).
    type: str
    required: true
  user:
    description:
      - When given, the module manages this user's association with O(account) (the account must exist)
        instead of the account itself. Same character rules as O(account).
    type: str
  state:
    description:
      - V(present) creates or updates; V(absent) removes the account (all its associations) or, with
        O(user), the user's association with the account.
    type: str
    choices: [present, absent]
    default: present
  parent:
    description:
      - Parent account. A new account without O(parent) is created under C(root); for an existing account
        an omitted O(parent) is left as it is. Not valid with O(user).
    type: str
  description:
    description:
      - Account description (lowercase, see above). Not valid with O(user).
    type: str
  organization:
    description:
      - Account organization (lowercase, see above). Not valid with O(user).
    type: str
  cluster:
    description:
      - Cluster whose associations are managed. Omitted, sacctmgr's own rule applies, that is every
        cluster in slurmdbd; each of them must then match.
    type: str
  default_account:
    description:
      - With O(user), make O(account) the user's default account. V(false) leaves the default as it is
        (sacctmgr gives a new user its first account as default).
    type: bool
    default: false
  qos:
    description:
      - QOS names the association may use (compared as a set). The QOS must exist.
    type: list
    elements: str
  default_qos:
    description:
      - Default QOS of the association; an empty string removes it.
    type: str
  max_jobs:
    description:
      - C(MaxJobs) of the association; V(-1) removes the association's own limit (it then shows its
        parent's, which slurmdbd copies down).
    type: int
  max_submit_jobs:
    description:
      - C(MaxSubmitJobs) of the association; V(-1) as for O(max_jobs).
    type: int
  grp_tres:
    description:
      - C(GrpTRES) of the association, such as C(gres/gpu=4,cpu=64,mem=256G). TRES not listed are removed;
        an empty string removes all. C(gres/gpu) needs C(AccountingStorageTRES=gres/gpu) in slurm.conf.
    type: str
  fairshare:
    description:
      - Fairshare (C(Share)) of the association, a whole number or C(parent).
    type: str
  force:
    description:
      - With O(state=absent) and no O(user), remove the account even when users or sub-accounts still
        hang below it; sacctmgr then removes them with it.
    type: bool
    default: false
  slurm_conf:
    description:
      - Path of the slurm.conf the Slurm commands use (exported as E(SLURM_CONF)). Default is Slurm's own.
    type: path
notes:
  - Supports check mode and diff mode (before/after of the managed fields, per cluster).
  - Max limits given to an account are copied by slurmdbd to the associations below it that have none of
    their own, so a user association may show a limit it inherited. A value that equals what is shown
    counts as in place.
extends_documentation_fragment:
  - gpuaas.apps.attributes.check_and_diff
"""

EXAMPLES = r"""
- name: A tenant account and a project account below it with a GPU limit
  gpuaas.apps.slurm_account:
    account: "{{ item.name }}"
    parent: "{{ item.parent }}"
    description: "{{ item.description }}"
    organization: acme
    grp_tres: "{{ item.grp_tres | default(omit) }}"
  loop:
    - {name: tenant-acme, parent: root, description: acme tenant}
    - {name: proj-1234, parent: tenant-acme, description: project 1234, grp_tres: "gres/gpu=8"}

- name: Let a user run jobs under the project account, by default
  gpuaas.apps.slurm_account:
    account: proj-1234
    user: alice
    default_account: true
    max_jobs: 20

- name: Remove the user's association
  gpuaas.apps.slurm_account:
    account: proj-1234
    user: alice
    state: absent

- name: Remove the project account (fails while users remain, unless force)
  gpuaas.apps.slurm_account:
    account: proj-1234
    state: absent
"""

RETURN = r"""
account:
  description: The account name.
  returned: always
  type: str
  sample: proj-1234
user:
  description: The user name, when O(user) was given.
  returned: when O(user) is given
  type: str
  sample: alice
exists:
  description: Whether the account (or the user's association) exists after the run.
  returned: always
  type: bool
  sample: true
associations:
  description:
    - The managed association(s) after the run, one per cluster, with sacctmgr's values (empty string
      when not set).
  returned: always
  type: list
  elements: dict
  sample:
    - {cluster: gpuaas, account: proj-1234, user: "", parent: tenant-acme, fairshare: "1",
       grp_tres: "gres/gpu=8", max_jobs: "", max_submit_jobs: "", qos: [normal], default_qos: ""}
commands:
  description: The sacctmgr commands run (or, in check mode, that would run).
  returned: always
  type: list
  elements: str
  sample: ["sacctmgr -i add account proj-1234 parent=tenant-acme description=project 1234"]
"""

import re  # noqa: E402 - Ansible modules import after their documentation

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.slurm import SlurmError, SlurmRunner  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.slurm_accounting import (  # noqa: E402
    ACCOUNT_COLUMNS,
    USER_COLUMNS,
    name_problem,
    show,
    show_assocs,
    text_problem,
)

# Association fields: parameter name -> sacctmgr set= keyword.
ASSOC_SET_KEYS = {
    "parent": "parent",
    "fairshare": "fairshare",
    "grp_tres": "grptres",
    "max_jobs": "maxjobs",
    "max_submit_jobs": "maxsubmitjobs",
    "qos": "qos",
    "default_qos": "defaultqos",
}
ACCOUNT_TEXT_FIELDS = ("description", "organization")

_TRES_RE = re.compile(r"^(?P<key>[a-z][a-z0-9_/:.-]*)=(?P<value>-1|\d+[KMGTP]?)$")
_MEM_UNITS = {"K": 1.0 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2, "P": 1024 ** 3}


# ---- input checks ---------------------------------------------------------------------------------
def parse_tres(text):
    """'gres/gpu=4,mem=2G' -> {'gres/gpu': '4', 'mem': '2048'}: values normalised (mem in MiB)."""
    tres = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        match = _TRES_RE.match(item)
        if not match:
            raise ValueError("'%s' is not a TRES limit like gres/gpu=4 or mem=256G" % item)
        key, value = match.group("key"), match.group("value")
        if value != "-1" and value[-1] in _MEM_UNITS:
            if key != "mem":
                raise ValueError("'%s': only mem takes a unit" % item)
            value = str(int(int(value[:-1]) * _MEM_UNITS[value[-1]]))
        tres[key] = value
    return tres


def check_params(params):
    """Every problem with the parameters, as messages (empty when all is well)."""
    problems = []
    for kind in ("account", "user", "parent", "cluster", "default_qos"):
        value = params.get(kind)
        if value is not None and not (kind == "default_qos" and value == ""):
            problems.append(name_problem(kind, value))
    for qos in params.get("qos") or []:
        problems.append(name_problem("qos", qos))
    if params.get("qos") == []:
        problems.append("qos must name at least one QOS")
    for kind in ACCOUNT_TEXT_FIELDS:
        if params.get(kind) is not None:
            problems.append(text_problem(kind, params[kind]))
    if params.get("user") is not None:
        for kind in ("parent",) + ACCOUNT_TEXT_FIELDS:
            if params.get(kind) is not None:
                problems.append("%s applies to the account itself; manage it in a task without user" % kind)
    elif params.get("default_account"):
        problems.append("default_account needs user")
    fairshare = params.get("fairshare")
    if fairshare is not None and fairshare != "parent" and not re.match(r"^\d+$", fairshare):
        problems.append("fairshare must be a whole number >= 0 or 'parent', not '%s'" % fairshare)
    for kind in ("max_jobs", "max_submit_jobs"):
        if params.get(kind) is not None and params[kind] < -1:
            problems.append("%s must be -1 (no own limit) or >= 0" % kind)
    if params.get("grp_tres") is not None:
        try:
            parse_tres(params["grp_tres"])
        except ValueError as error:
            problems.append("grp_tres: %s" % error)
    return [p for p in problems if p]


# ---- reading sacctmgr -----------------------------------------------------------------------------
def account_view(row):
    """An association row as reported (qos as a sorted list)."""
    view = dict(row)
    view["qos"] = sorted(q for q in row["qos"].split(",") if q)
    return view


class Snapshot:
    """What slurmdbd holds for one account (and user), in the clusters in scope."""

    def __init__(self, account, user, account_row, user_row, assocs):
        self.account = account
        self.user = user
        self.account_row = account_row  # {'Account', 'Description', 'Organization'} or None
        self.user_row = user_row  # {'User', 'DefaultAccount'} or None
        self.assocs = assocs  # every association row in scope (all accounts)

    def account_assocs(self, name=None):
        name = name or self.account
        return [r for r in self.assocs if r["account"] == name and not r["user"]]

    def target_assocs(self):
        if self.user:
            return [r for r in self.assocs if r["account"] == self.account and r["user"] == self.user]
        return self.account_assocs()

    def users_below(self):
        return sorted(set(r["user"] for r in self.assocs if r["account"] == self.account and r["user"]))

    def sub_accounts(self):
        return sorted(set(r["account"] for r in self.assocs if r["parent"] == self.account and not r["user"]))

    def inherited(self, row):
        """The association a row inherits limits from (same cluster), or None."""
        parent = row["account"] if row["user"] else row["parent"]
        for candidate in self.assocs:
            if candidate["cluster"] == row["cluster"] and candidate["account"] == parent \
                    and not candidate["user"]:
                return candidate
        return None

    def exists(self):
        if self.user:
            return bool(self.target_assocs())
        return self.account_row is not None


def read_snapshot(runner, account, user, cluster):
    assocs = show_assocs(runner, cluster)
    accounts = show(runner, "account", ["where", "name=%s" % account], ACCOUNT_COLUMNS)
    user_row = None
    if user:
        users = show(runner, "user", ["where", "name=%s" % user], USER_COLUMNS)
        user_row = users[0] if users else None
    return Snapshot(account, user, accounts[0] if accounts else None, user_row, assocs)


# ---- deciding -------------------------------------------------------------------------------------
def desired_assoc(params):
    """The association fields the task manages, normalised for comparison."""
    wanted = {}
    for key in ASSOC_SET_KEYS:
        value = params.get(key)
        if value is None or (key == "parent" and params.get("user")):
            continue
        if key == "qos":
            value = sorted(set(value))
        elif key == "grp_tres":
            value = parse_tres(value)
        elif key in ("max_jobs", "max_submit_jobs"):
            value = str(value)
        wanted[key] = value
    return wanted


def field_matches(key, wanted, current, inherited):
    """Whether an association's current value satisfies the wanted one."""
    if key == "qos":
        return sorted(q for q in current.split(",") if q) == wanted
    if key == "grp_tres":
        return parse_tres(current) == wanted
    if key in ("max_jobs", "max_submit_jobs") and wanted == "-1":
        # No own limit: shows empty, or the parent's limit that slurmdbd copied down.
        return current == "" or (inherited is not None and current == inherited[key])
    return current == wanted


def assoc_changes(wanted, rows, snapshot):
    """{field: wanted} for every field some row in ``rows`` does not satisfy."""
    changes = {}
    for row in rows:
        inherited = snapshot.inherited(row)
        for key, value in wanted.items():
            if not field_matches(key, value, row[key], inherited):
                changes[key] = value
    return changes


def set_args(changes, rows):
    """sacctmgr key=value words for ``changes``; TRES present on a row but not wanted are set to -1."""
    words = []
    for key in sorted(changes):
        value = changes[key]
        if key == "qos":
            value = ",".join(value)
        elif key == "grp_tres":
            current = set()
            for row in rows:
                current.update(parse_tres(row["grp_tres"]))
            merged = dict((k, "-1") for k in current if k not in value)
            merged.update(value)
            if not merged:
                continue
            value = ",".join("%s=%s" % (k, merged[k]) for k in sorted(merged))
        elif key == "default_qos" and value == "":
            value = "-1"
        words.append("%s=%s" % (ASSOC_SET_KEYS[key], value))
    return words


def add_args(wanted):
    """key=value words to create an association with ``wanted`` already in place."""
    words = []
    for key in sorted(wanted):
        value = wanted[key]
        if key == "qos":
            value = ",".join(value)
        elif key == "grp_tres":
            value = ",".join("%s=%s" % (k, v) for k, v in sorted(value.items()) if v != "-1")
        elif key in ("max_jobs", "max_submit_jobs", "default_qos") and value in ("-1", ""):
            continue
        if value != "":
            words.append("%s=%s" % (ASSOC_SET_KEYS[key], value))
    return words


class Refused(Exception):
    pass


def plan(params, snapshot):
    """The sacctmgr argument lists that bring slurmdbd to what ``params`` ask; raises Refused."""
    account, user, cluster = params["account"], params.get("user"), params.get("cluster")
    in_cluster = ["cluster=%s" % cluster] if cluster else []
    rows = snapshot.target_assocs()
    commands = []

    if params["state"] == "absent":
        if user:
            if rows:
                commands.append(["-i", "remove", "user", "where", "name=%s" % user, "account=%s" % account]
                                + in_cluster)
            return commands
        if not rows and (cluster or snapshot.account_row is None):
            return commands
        users, subs = snapshot.users_below(), snapshot.sub_accounts()
        if (users or subs) and not params.get("force"):
            held = []
            if users:
                held.append("users %s" % ", ".join(users))
            if subs:
                held.append("sub-accounts %s" % ", ".join(subs))
            raise Refused("account %s still has %s; sacctmgr would remove them with it. Remove them first or "
                          "use force=true" % (account, " and ".join(held)))
        return [["-i", "remove", "account", "where", "name=%s" % account] + in_cluster]

    wanted = desired_assoc(params)
    if user:
        if not snapshot.account_assocs():
            raise Refused("account %s does not exist%s; create it (a task without user) before adding users"
                          % (account, " on cluster %s" % cluster if cluster else ""))
        if not rows:
            extra = ["defaultaccount=%s" % account] if params.get("default_account") else []
            commands.append(["-i", "add", "user", user, "account=%s" % account] + in_cluster + extra
                            + add_args(wanted))
        else:
            changes = assoc_changes(wanted, rows, snapshot)
            words = set_args(changes, rows)
            if words:
                commands.append(["-i", "modify", "user", "where", "name=%s" % user, "account=%s" % account]
                                + in_cluster + ["set"] + words)
            current_default = (snapshot.user_row or {}).get("DefaultAccount")
            if params.get("default_account") and current_default != account:
                commands.append(["-i", "modify", "user", "where", "name=%s" % user] + in_cluster
                                + ["set", "defaultaccount=%s" % account])
        return commands

    parent = params.get("parent")
    if parent and parent != "root" and not snapshot.account_assocs(parent):
        raise Refused("parent account %s does not exist%s"
                      % (parent, " on cluster %s" % cluster if cluster else ""))
    text = dict((k, params[k]) for k in ACCOUNT_TEXT_FIELDS if params.get(k) is not None)
    if not rows:
        create = dict(wanted)
        create.setdefault("parent", "root")
        if snapshot.account_row is None:
            commands.append(["-i", "add", "account", account] + in_cluster + add_args(create)
                            + ["%s=%s" % (k, v) for k, v in sorted(text.items())])
        else:
            commands.append(["-i", "add", "account", account] + in_cluster + add_args(create))
            # The account existed (on another cluster): sacctmgr add does not touch its text fields.
            text_changes = dict((k, v) for k, v in text.items() if snapshot.account_row[k.capitalize()] != v)
            if text_changes:
                commands.append(["-i", "modify", "account", "where", "name=%s" % account, "set"]
                                + ["%s=%s" % (k, v) for k, v in sorted(text_changes.items())])
        return commands
    words = set_args(assoc_changes(wanted, rows, snapshot), rows)
    if words:
        commands.append(["-i", "modify", "account", "where", "name=%s" % account] + in_cluster
                        + ["set"] + words)
    text_changes = dict((k, v) for k, v in text.items() if snapshot.account_row[k.capitalize()] != v)
    if text_changes:
        commands.append(["-i", "modify", "account", "where", "name=%s" % account, "set"]
                        + ["%s=%s" % (k, v) for k, v in sorted(text_changes.items())])
    return commands


def command_lines(commands):
    return ["sacctmgr " + " ".join(args) for args in commands]


# ---- reporting ------------------------------------------------------------------------------------
def diff_view(params, snapshot):
    """The managed fields as they are, per cluster (for --diff)."""
    view = {"exists": snapshot.exists()}
    if not params.get("user") and snapshot.account_row:
        for key in ACCOUNT_TEXT_FIELDS:
            if params.get(key) is not None:
                view[key] = snapshot.account_row[key.capitalize()]
    if params.get("user") and params.get("default_account"):
        view["default_account"] = (snapshot.user_row or {}).get("DefaultAccount", "")
    managed = [k for k in ASSOC_SET_KEYS if k in desired_assoc(params)]
    view["associations"] = dict((row["cluster"], dict((k, account_view(row)[k]) for k in managed))
                                for row in snapshot.target_assocs())
    return view


def predicted_view(params, before):
    """``before`` with the task's wishes applied (check mode diff)."""
    if params["state"] == "absent":
        return {"exists": False}
    after = dict(before, exists=True)
    for key in ACCOUNT_TEXT_FIELDS:
        if params.get(key) is not None and not params.get("user"):
            after[key] = params[key]
    if params.get("user") and params.get("default_account"):
        after["default_account"] = params["account"]
    wanted = desired_assoc(params)
    shown = dict((k, ",".join("%s=%s" % kv for kv in sorted(v.items())) if k == "grp_tres" else v)
                 for k, v in wanted.items())
    clusters = list(before["associations"]) or [params.get("cluster") or "(all)"]
    after["associations"] = dict((c, dict(before["associations"].get(c, {}), **shown)) for c in clusters)
    return after


def main():
    module = AnsibleModule(
        argument_spec=dict(
            account=dict(type="str", required=True),
            user=dict(type="str"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            parent=dict(type="str"),
            description=dict(type="str"),
            organization=dict(type="str"),
            cluster=dict(type="str"),
            default_account=dict(type="bool", default=False),
            qos=dict(type="list", elements="str"),
            default_qos=dict(type="str"),
            max_jobs=dict(type="int"),
            max_submit_jobs=dict(type="int"),
            grp_tres=dict(type="str"),
            fairshare=dict(type="str"),
            force=dict(type="bool", default=False),
            slurm_conf=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    problems = check_params(params)
    if problems:
        module.fail_json(msg="; ".join(problems))
    runner = SlurmRunner(module, params["slurm_conf"])
    account, user, cluster = params["account"], params["user"], params["cluster"]
    try:
        before = read_snapshot(runner, account, user, cluster)
        try:
            commands = plan(params, before)
        except Refused as refused:
            module.fail_json(msg=str(refused))
        warn_default_account_removal(module, params, before)

        after = before
        if commands and not module.check_mode:
            for args in commands:
                runner.run("sacctmgr", args)
            after = read_snapshot(runner, account, user, cluster)
            leftover = plan(params, after)
            if leftover:
                module.fail_json(msg="sacctmgr accepted the changes but slurmdbd still differs; it would "
                                     "still need: %s" % "; ".join(command_lines(leftover)),
                                 commands=command_lines(commands))
        before_view = diff_view(params, before)
        after_view = predicted_view(params, before_view) if module.check_mode and commands \
            else diff_view(params, after)
        result = dict(
            changed=bool(commands),
            account=account,
            exists=after_view["exists"],
            associations=[account_view(r) for r in after.target_assocs()] if not module.check_mode
            else [account_view(r) for r in before.target_assocs()],
            commands=command_lines(commands),
            diff=dict(before=before_view, after=after_view),
        )
        if user:
            result["user"] = user
        module.exit_json(**result)
    except SlurmError as error:
        module.fail_json(msg=str(error), rc=error.rc, stdout=error.stdout, stderr=error.stderr)
    except Refused as refused:
        module.fail_json(msg=str(refused))


def warn_default_account_removal(module, params, snapshot):
    user_row = snapshot.user_row or {}
    removing = params["state"] == "absent" and params["user"] and snapshot.target_assocs()
    if removing and user_row.get("DefaultAccount") == params["account"]:
        module.warn("%s is the default account of user %s; after removing the association the user has no "
                    "default account and jobs submitted without --account are rejected"
                    % (params["account"], params["user"]))


if __name__ == "__main__":
    main()
