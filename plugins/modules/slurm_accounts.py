#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: slurm_accounts
short_description: Keep the platform's Slurm accounts and user associations equal to a list, in one run
version_added: "0.1.0"
description:
  - Makes the accounts the platform created in slurmdbd, and their users' associations, equal to O(accounts)
    and O(users), in one module run (an access map's accounts and identities). An account is the platform's
    when its description starts with O(description_prefix); other accounts are left alone.
  - Every account of O(accounts) exists under O(parent) with the description O(description_prefix) followed by
    its project id. Every user of O(users) is associated with exactly its accounts (associations with any other
    account are removed), and the first of them is its default.
  - Users associated with a platform account that O(users) does not name (or names without that account) lose
    that association, and platform accounts that O(accounts) does not name are removed, their users'
    associations first. slurmdbd refuses to remove an association while jobs of it are queued or running, so those
    jobs are cancelled first (C(scancel)) and the removal is retried until slurmdbd has recorded their end.
    A user left without associations is removed from slurmdbd by Slurm itself.
  - So a run repairs what was changed by hand with sacctmgr - an association of O(users) removed is added again,
    one added is removed, and a platform account removed is created again, with its users' associations.
  - An account of O(accounts) that exists without the platform's description is refused, as is a platform
    account that has sub-accounts of someone else (removing it would remove them).
  - sacctmgr silently lowercases names and descriptions, so names and project ids it would store as something
    else are refused (see M(gpuaas.apps.slurm_account)).
  - After a change the module reads slurmdbd again and fails if it still differs.
  - Written for Slurm 22.05 (Debian 12); needs slurmdbd.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  accounts:
    description: Every account the platform keeps. The items of an access map's C(accounts) can be given as they are.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Account name. Lowercase letters, digits, C(_), C(.) and C(-).
        type: str
        required: true
      project_id:
        description: The project the account is for, recorded in its description (lowercase).
        type: str
        required: true
  users:
    description:
      - Every user the platform associates, mapped to its accounts (each one of O(accounts)) - a list of account
        names, the first being the user's default account, or one account name (the same as a list of one), such
        as C({{ gpuaas_access.identities | items2dict(key_name='name', value_name='accounts') }}).
    type: dict
    default: {}
  description_prefix:
    description: The start of the description that marks an account as the platform's.
    type: str
    default: "gpuaas project "
  parent:
    description: The parent of the platform's accounts.
    type: str
    default: root
  cluster:
    description:
      - Cluster whose associations are managed. Omitted, sacctmgr's own rule applies, that is every cluster in
        slurmdbd.
    type: str
  cancel_timeout:
    description: Seconds to wait, after cancelling an association's jobs, for slurmdbd to allow its removal.
    type: int
    default: 60
  slurm_conf:
    description:
      - Path of the slurm.conf the Slurm commands use (exported as E(SLURM_CONF)). Default is Slurm's own.
    type: path
notes:
  - Supports check mode and diff mode. The diff shows the platform's accounts with their project ids and the
    users associated with them, each with its accounts and default account.
  - In check mode the jobs that would be cancelled are read from C(squeue) and reported, and nothing is cancelled.
  - slurmctld looks up an association's user (its uid, and so its default account) when it learns of the
    association. Create the Unix users on the controller first (M(gpuaas.apps.unix_identities)); a user
    unknown then cannot submit without naming its account until slurmctld restarts.
extends_documentation_fragment:
  - gpuaas.apps.attributes.check_and_diff
"""

EXAMPLES = r"""
- name: Keep the Slurm accounts and associations equal to the access map
  gpuaas.apps.slurm_accounts:
    accounts: "{{ gpuaas_access.accounts }}"
    users: "{{ gpuaas_access.identities | items2dict(key_name='name', value_name='accounts') }}"

- name: Written out
  gpuaas.apps.slurm_accounts:
    accounts:
      - {name: research, project_id: 6c1f0e52-3b8e-4e0a-9a9e-7d5c1b2a4f10}
      - {name: vision, project_id: 0b7d4e11-2c4f-4a7e-8d1b-5e9f3a6c2d81}
    users:
      alice-3f9a: research            # one account, her default
      bob-77c2: [vision, research]    # two; vision is his default
"""

RETURN = r"""
accounts_added:
  description: Accounts created.
  returned: always
  type: list
  elements: str
  sample: [research]
accounts_removed:
  description: Platform accounts removed (with their users' associations).
  returned: always
  type: list
  elements: str
  sample: [old-project]
users_changed:
  description: Users of O(users) whose associations (one added or removed) or default account changed.
  returned: always
  type: list
  elements: str
  sample: [alice-3f9a]
users_removed:
  description: Users not in O(users) that lost their associations with the platform's accounts.
  returned: always
  type: list
  elements: str
  sample: [bob-77c2]
cancelled_jobs:
  description: Ids of the jobs cancelled (in check mode, that would be) because their association goes.
  returned: always
  type: list
  elements: str
  sample: ["4711"]
commands:
  description:
    - The sacctmgr and scancel commands run, a removal retried while slurmdbd still saw active jobs once per
      try (in check mode, the commands that would run).
  returned: always
  type: list
  elements: str
  sample: ["sacctmgr -i add account research parent=root description=gpuaas project 6c1f"]
"""

import time  # noqa: E402 - Ansible modules import after their documentation

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.slurm import (  # noqa: E402
    SlurmError,
    SlurmRunner,
    parse_parsable,
)
from ansible_collections.gpuaas.apps.plugins.module_utils.slurm_accounting import (  # noqa: E402
    ACCOUNT_COLUMNS,
    USER_COLUMNS,
    name_problem,
    show,
    show_assocs,
    text_problem,
)

JOB_COLUMNS = ("JobId", "User", "Account")
# What sacctmgr 22.05 answers a removal while jobs of the association are queued or running.
JOBS_ACTIVE = "Job(s) active"


class Refused(Exception):
    pass


def check_params(params):
    """Every problem with the parameters, as messages."""
    problems = [text_problem("description_prefix", params["description_prefix"].rstrip() or "-"),
                name_problem("parent", params["parent"])]
    if params.get("cluster") is not None:
        problems.append(name_problem("cluster", params["cluster"]))
    names = set()
    for index, account in enumerate(params["accounts"]):
        problems.append(name_problem("accounts[%d].name" % index, account["name"]))
        problems.append(text_problem("accounts[%d].project_id" % index, account["project_id"]))
        if not account["project_id"]:
            problems.append("accounts[%d].project_id must not be empty" % index)
        if account["name"] in names:
            problems.append("account %s is given twice" % account["name"])
        if account["name"] == "root":
            problems.append("accounts must not name root")
        names.add(account["name"])
    for user, value in sorted((params["users"] or {}).items()):
        problems.append(name_problem("user", user))
        listed = user_accounts(value)
        if listed is None:
            problems.append("users.%s must be an account name or a non-empty list of account names, not %r"
                            % (user, value))
            continue
        if len(set(listed)) != len(listed):
            problems.append("users.%s names an account twice: %s" % (user, ", ".join(listed)))
        for account in listed:
            if account not in names:
                problems.append("user %s: its account %s is not one of accounts" % (user, account))
    return [p for p in problems if p]


def user_accounts(value):
    """A user's accounts, its default first, from O(users)'s value (one name, or a list of names); None when it is
    neither."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(a, str) for a in value):
        return list(value)
    return None


def wanted_users(params):
    """O(users) as user -> its accounts, its default first (check_params() has refused any other value)."""
    return dict((user, user_accounts(value)) for user, value in (params["users"] or {}).items())


class Snapshot:
    """What slurmdbd (and slurmctld's queue, when read) holds."""

    def __init__(self, accounts, users, assocs, jobs=None):
        self.descriptions = dict((a["Account"], a["Description"]) for a in accounts)
        self.defaults = dict((u["User"], u["DefaultAccount"]) for u in users)
        self.assocs = assocs
        self.jobs = jobs  # [{'JobId', 'User', 'Account'}], or None when not read

    def account_rows(self, name):
        return [r for r in self.assocs if r["account"] == name and not r["user"]]

    def accounts_of(self, user):
        return sorted(set(r["account"] for r in self.assocs if r["user"] == user))

    def users_of(self, account):
        return sorted(set(r["user"] for r in self.assocs if r["account"] == account and r["user"]))

    def sub_accounts(self, account):
        return sorted(set(r["account"] for r in self.assocs if r["parent"] == account and not r["user"]))

    def platform_accounts(self, prefix):
        """The platform's accounts that have associations in scope."""
        return sorted(set(r["account"] for r in self.assocs if not r["user"] and r["account"] != "root"
                          and self.descriptions.get(r["account"], "").startswith(prefix)))

    def jobs_of(self, account, user=None):
        return [j["JobId"] for j in self.jobs or [] if j["Account"] == account and (user is None or j["User"] == user)]


def read_snapshot(runner, cluster):
    return Snapshot(show(runner, "account", [], ACCOUNT_COLUMNS), show(runner, "user", [], USER_COLUMNS),
                    show_assocs(runner, cluster))


def read_jobs(runner):
    """Every job slurmctld holds, its id, user and account (-a: hidden partitions too)."""
    if runner.reads_json():
        jobs = runner.read_json("squeue", ["--json", "-a"]).get("jobs", [])
        return [{"JobId": str(j["job_id"]), "User": j.get("user_name", ""), "Account": j.get("account", "")}
                for j in jobs]
    out = runner.run("squeue", ["-h", "-a", "-o", "%i|%u|%a"])[1]
    return parse_parsable(out, JOB_COLUMNS)


class Plan:
    def __init__(self):
        self.changes = []  # sacctmgr argument lists that add or modify, in order
        self.removals = []  # (account, user or None): associations to remove, user ones first
        self.accounts_added = []
        self.users_changed = []
        self.users_removed = []

    def empty(self):
        return not (self.changes or self.removals)


def plan(params, snapshot):
    """What makes slurmdbd equal to the parameters; raises Refused."""
    prefix, parent = params["description_prefix"], params["parent"]
    cluster = params.get("cluster")
    in_cluster = ["cluster=%s" % cluster] if cluster else []
    wanted = dict((a["name"], prefix + a["project_id"]) for a in params["accounts"])
    users = wanted_users(params)
    platform = snapshot.platform_accounts(prefix)
    result = Plan()

    problems = []
    for name in sorted(wanted):
        current = snapshot.descriptions.get(name)
        if current is not None and not current.startswith(prefix):
            problems.append("account %s exists and the platform did not create it (its description '%s' does not "
                            "start with '%s')" % (name, current, prefix))
    stale = [a for a in platform if a not in wanted]
    for account in stale:
        foreign = [s for s in snapshot.sub_accounts(account) if s not in stale]
        if foreign:
            problems.append("account %s, which the list no longer names, has sub-accounts %s; removing it would "
                            "remove them" % (account, ", ".join(foreign)))
    if problems:
        raise Refused("; ".join(problems))

    for name, description in sorted(wanted.items()):
        rows = snapshot.account_rows(name)
        if not rows:
            result.accounts_added.append(name)
            result.changes.append(["-i", "add", "account", name] + in_cluster
                                  + ["parent=%s" % parent, "description=%s" % description])
            if name in snapshot.descriptions and snapshot.descriptions[name] != description:
                # The account existed (on another cluster): sacctmgr add does not touch its description.
                result.changes.append(["-i", "modify", "account", "where", "name=%s" % name,
                                       "set", "description=%s" % description])
            continue
        if snapshot.descriptions.get(name) != description:
            result.changes.append(["-i", "modify", "account", "where", "name=%s" % name,
                                   "set", "description=%s" % description])
        if any(r["parent"] != parent for r in rows):
            result.changes.append(["-i", "modify", "account", "where", "name=%s" % name] + in_cluster
                                  + ["set", "parent=%s" % parent])

    for user, listed in sorted(users.items()):
        has = snapshot.accounts_of(user)
        default = listed[0]
        missing = [a for a in listed if a not in has]
        new_user = user not in snapshot.defaults
        if missing:
            # one command for all of them; a user new to slurmdbd gets its default with its first association
            result.changes.append(["-i", "add", "user", user, "account=%s" % ",".join(missing)] + in_cluster
                                  + (["defaultaccount=%s" % default] if new_user else []))
        if not new_user and snapshot.defaults[user] != default:
            # before any removal: the old default may be one of the associations that go
            result.changes.append(["-i", "modify", "user", "where", "name=%s" % user] + in_cluster
                                  + ["set", "defaultaccount=%s" % default])
        extra = [a for a in has if a not in listed]
        result.removals.extend((other, user) for other in extra)
        if missing or extra or snapshot.defaults.get(user) != default:
            result.users_changed.append(user)

    # Users' associations one by one, a stale account's too, before the account: removing an account leaves its
    # users in slurmdbd without associations, removing a user's last association removes the user.
    for account in platform:
        for user in snapshot.users_of(account):
            if user not in users:
                result.removals.append((account, user))
        if account in stale:
            result.removals.append((account, None))
    result.users_removed = sorted(set(u for a, u in result.removals if u and u not in users))
    return result


def removal_args(account, user, cluster):
    in_cluster = ["cluster=%s" % cluster] if cluster else []
    if user:
        return ["-i", "remove", "user", "where", "name=%s" % user, "account=%s" % account] + in_cluster
    return ["-i", "remove", "account", "where", "name=%s" % account] + in_cluster


def cancel_args(account, user):
    return ["--account=%s" % account] + (["--user=%s" % user] if user else [])


def jobs_to_cancel(snapshot, account, user):
    """The jobs cancelled before a removal: a user's in the account. An account's users go before it, their jobs
    with them; one submitted meanwhile is cancelled when slurmdbd names it (remove())."""
    return snapshot.jobs_of(account, user) if user else []


def planned_commands(the_plan, snapshot, cluster):
    """Every command, as text, in the order run: changes, then per removal its scancel (when it has jobs)."""
    lines = ["sacctmgr " + " ".join(args) for args in the_plan.changes]
    for account, user in the_plan.removals:
        if jobs_to_cancel(snapshot, account, user):
            lines.append("scancel " + " ".join(cancel_args(account, user)))
        lines.append("sacctmgr " + " ".join(removal_args(account, user, cluster)))
    return lines


class Recorder:
    """Runs commands through a SlurmRunner and keeps them, as text, for RV(commands)."""

    def __init__(self, runner):
        self.runner = runner
        self.done = []

    def run(self, tool, args, check=True):
        self.done.append(" ".join([tool] + list(args)))
        return self.runner.run(tool, args, check=check)


def remove(recorder, account, user, cluster, cancelled, timeout, sleep=time.sleep, clock=time.time):
    """Runs the removal. While slurmdbd answers that jobs of the association are active, cancels them (unless
    ``cancelled``: done already) and tries again, up to ``timeout`` seconds."""
    deadline = clock() + timeout
    args = removal_args(account, user, cluster)
    while True:
        rc, out, err = recorder.run("sacctmgr", args, check=False)
        if rc == 0:
            return
        if JOBS_ACTIVE not in out + err or clock() > deadline:
            raise SlurmError(["sacctmgr"] + args, rc, out, err)
        if not cancelled:  # a job submitted after squeue was read
            recorder.run("scancel", cancel_args(account, user))
            cancelled = True
        sleep(0.5)


def view(snapshot, params):
    """The platform's accounts (project ids) and the users of them or of O(users), for --diff."""
    prefix = params["description_prefix"]
    accounts = dict((a, snapshot.descriptions[a][len(prefix):]) for a in snapshot.platform_accounts(prefix))
    names = set(wanted_users(params))
    for account in accounts:
        names.update(snapshot.users_of(account))
    users = {}
    for user in sorted(names):
        has = snapshot.accounts_of(user)
        if has:
            users[user] = {"accounts": has, "default": snapshot.defaults.get(user, "")}
    return {"accounts": accounts, "users": users}


def predicted_view(params):
    accounts = dict((a["name"], a["project_id"]) for a in params["accounts"])
    users = dict((u, {"accounts": sorted(listed), "default": listed[0]})
                 for u, listed in sorted(wanted_users(params).items()))
    return {"accounts": accounts, "users": users}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            accounts=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True),
                project_id=dict(type="str", required=True),
            )),
            users=dict(type="dict", default={}),
            description_prefix=dict(type="str", default="gpuaas project "),
            parent=dict(type="str", default="root"),
            cluster=dict(type="str"),
            cancel_timeout=dict(type="int", default=60),
            slurm_conf=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    problems = check_params(params)
    if problems:
        module.fail_json(msg="; ".join(problems))
    runner = SlurmRunner(module, params["slurm_conf"])
    cluster = params["cluster"]
    try:
        before = read_snapshot(runner, cluster)
        try:
            the_plan = plan(params, before)
        except Refused as refused:
            module.fail_json(msg=str(refused))
        if the_plan.removals:
            before.jobs = read_jobs(runner)
        cancelled = sorted(set(j for a, u in the_plan.removals for j in jobs_to_cancel(before, a, u)), key=job_order)
        result = dict(
            changed=not the_plan.empty(),
            accounts_added=the_plan.accounts_added,
            accounts_removed=[a for a, u in the_plan.removals if u is None],
            users_changed=the_plan.users_changed,
            users_removed=the_plan.users_removed,
            cancelled_jobs=cancelled,
            commands=planned_commands(the_plan, before, cluster),
            diff=dict(before=view(before, params), after=predicted_view(params)),
        )
        if module.check_mode or the_plan.empty():
            module.exit_json(**result)

        recorder = Recorder(runner)
        try:
            for args in the_plan.changes:
                recorder.run("sacctmgr", args)
            for account, user in the_plan.removals:
                jobs = jobs_to_cancel(before, account, user)
                if jobs:
                    recorder.run("scancel", cancel_args(account, user))
                remove(recorder, account, user, cluster, bool(jobs), params["cancel_timeout"])
        except SlurmError as error:
            module.fail_json(msg=str(error), rc=error.rc, stdout=error.stdout, stderr=error.stderr,
                             commands=recorder.done)
        result["commands"] = recorder.done
        after = read_snapshot(runner, cluster)
        leftover = plan(params, after)
        if not leftover.empty():
            module.fail_json(msg="sacctmgr accepted the changes but slurmdbd still differs; it would still need: %s"
                                 % "; ".join(planned_commands(leftover, after, cluster)),
                             commands=recorder.done)
        result["diff"]["after"] = view(after, params)
        module.exit_json(**result)
    except SlurmError as error:
        module.fail_json(msg=str(error), rc=error.rc, stdout=error.stdout, stderr=error.stderr)
    except Refused as refused:
        module.fail_json(msg=str(refused))


def job_order(job_id):
    head = job_id.split("_")[0]
    return (int(head) if head.isdigit() else 0, job_id)


if __name__ == "__main__":
    main()
