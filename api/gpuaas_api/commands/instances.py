"""`gpuaas instances`: a tenant's app instances through the public API: list, show, create, update, delete, the
lifecycle operations (deploy, reconfigure, upgrade, rollback, refresh, decommission: each followed to its end),
the inventory, a credential, logins (access, access-map, access-sync, access-drift)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from ..client.cli import (
    command,
    emit,
    operation_options,
    output_option,
    project_option,
    project_ref,
    run_operation,
    structured,
)
from ..client.verbs import Verb, add, arg, instance_id, project, project_id


def pair(value: str) -> tuple[str, str]:
    """argparse type of KEY=VALUE."""
    key, sep, text = value.partition("=")
    if not key or not sep:
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE")
    return key, text


def role_count(value: str) -> dict:
    """argparse type of --role ROLE=COUNT."""
    role, _, count = value.partition("=")
    if not role or not count.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not ROLE=COUNT")
    return {"role": role, "count": int(count)}


def _parameters(client, pairs, args) -> dict | None:
    """--params FILE (YAML or JSON) with each --param KEY=VALUE over it; a VALUE is read as YAML (`3`, `true`,
    `[a, b]`), as `helm --set` reads it, or taken as text when it is not YAML."""
    import yaml

    from ..client.errors import ClientError

    values = {}
    if args.params:
        try:
            values = yaml.safe_load(Path(args.params).read_text() if args.params != "-" else sys.stdin.read()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ClientError(f"cannot read parameters from {args.params}: {exc}") from None
        if not isinstance(values, dict):
            raise ClientError(f"{args.params} holds no mapping of parameters")
    for key, text in pairs or []:
        try:
            values[key] = yaml.safe_load(text)
        except yaml.YAMLError:
            values[key] = text  # not YAML (`{{ x }}`, `a: b: c`): the text itself, as given
    return values or None


PARAMETERS = (arg("--param", dest="parameters", action="append", type=pair, metavar="KEY=VALUE", key="parameters",
                  resolve=_parameters, help="a parameter of the app (repeatable; VALUE read as YAML)"),
              arg("--params", metavar="FILE", to="", help="the parameters as a YAML or JSON mapping (- : stdin)"))


def _allocations(client, refs, args) -> list[str]:
    from ..client import lookup

    project = project_id(client, args.project, args)
    return [lookup.allocation(client, project, ref) for ref in refs]


def _projects(client, refs, args) -> list[str] | None:
    from ..client import lookup

    return None if refs is None else [lookup.project(client, ref)["id"] for ref in refs]


def _labels(client, pairs, args) -> dict | None:
    """--label KEY=VALUE and --remove-label KEY as a JSON merge patch (null removes)."""
    labels = dict(pairs or []) | dict.fromkeys(getattr(args, "remove_label", None) or [])
    return labels or None


INSTANCE = arg("instance", metavar="INSTANCE", to="path", key="instance_id", resolve=instance_id,
               help="the instance's id or name")
IN_PROJECT = arg("--project", metavar="ID|NAME", to="", help="the project to look the name up in")
INSTANCE_COLUMNS = ("name", "status", "app_slug", ("VERSION", "app_version"), ("MEMBERS", lambda i: roles(i)),
                    "project_id", "id")
ATTACHABLE = arg("--attachable-project", dest="attachable_project_ids", action="append", metavar="PROJECT",
                 resolve=_projects, help="a project that may attach to this tenant-shared runtime (repeatable)")
INSTANCE_VERBS = (
    Verb("create", "instances_create", "POST", "/v1/projects/{project_id}/instances",
         "create an instance of an app on a project's allocations (then: gpuaas deploy NAME)",
         (arg("name", metavar="NAME", help="lowercase letters, digits and -"), project(),
          arg("--app", dest="app_slug", required=True, metavar="SLUG", help="the app (gpuaas apps list)"),
          arg("--version", help="the app's version (default: its newest active one)"),
          arg("--allocation", dest="allocation_ids", action="append", required=True, metavar="ID|NAME",
              resolve=_allocations, help="an allocation whose hosts its members use (repeatable)"),
          arg("--role", dest="topology", action="append", type=role_count, metavar="ROLE=COUNT",
              help="how many members of a role (repeatable; default: the app's minimum)"),
          *PARAMETERS,
          arg("--label", dest="labels", action="append", type=pair, metavar="KEY=VALUE", resolve=_labels,
              help="a label (repeatable)"),
          arg("--control-plane-scope", choices=("project", "tenant"),
              help="tenant: a tenant-shared runtime other projects attach to (tenant admins)"),
          arg("--environment", help="a tenant-shared runtime's environment (default: default)"),
          ATTACHABLE,
          arg("--canary", action="store_true", default=None, help="opt in to canary versions")), INSTANCE_COLUMNS),
    Verb("update", "instances_update", "PATCH", "/v1/instances/{instance_id}",
         "change an instance's labels, its canary opt-in, or a shared runtime's attachable projects",
         (INSTANCE, IN_PROJECT,
          arg("--label", dest="labels", action="append", type=pair, metavar="KEY=VALUE", resolve=_labels,
              help="set a label (repeatable)"),
          arg("--remove-label", action="append", metavar="KEY", to="", help="remove a label (repeatable)"),
          arg("--canary", action=argparse.BooleanOptionalAction, default=None,
              help="opt in to (or out of) canary versions"),
          ATTACHABLE), INSTANCE_COLUMNS),
    Verb("delete", "instances_delete", "DELETE", "/v1/instances/{instance_id}",
         "delete an instance that runs nothing (created, or stopped by decommission)", (INSTANCE, IN_PROJECT),
         done="deleted instance {instance}"),
)
# The lifecycle operations: (action, operation id, help); each followed to its end like `gpuaas deploy`.
OPERATIONS = (
    ("deploy", "instances_deploy", "deploy a created (or failed) instance: its secrets, the adapter's deploy run; "
                                   "running once the run proved it works"),
    ("reconfigure", "instances_reconfigure", "apply changed parameters to the running instance (--param, --params: "
                                             "merged over its parameters, kept on success)"),
    ("upgrade", "instances_upgrade", "move to another active version of its app (the current one is kept for "
                                     "rollback)"),
    ("rollback", "instances_rollback", "go back to the version before the last upgrade"),
    ("refresh", "instances_refresh", "read the members' state from the runtime (read-only) and set their statuses "
                                     "to match"),
    ("decommission", "instances_decommission", "tear the runtime down on every host; the instance ends stopped "
                                               "and can then be deleted"),
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("instances", help="app instances: list, show, create, update, delete, deploy, reconfigure, "
                                         "upgrade, rollback, refresh, decommission, inventory, credentials, logins")
    isub = p.add_subparsers(dest="instances_command", metavar="ACTION", required=True)
    for verb in INSTANCE_VERBS:
        add(isub, verb)
    for action, operation, text in OPERATIONS:
        one = isub.add_parser(action, help=text, description=text)
        one.add_argument("instance", metavar="INSTANCE", help="the instance's id or name")
        if action == "reconfigure":
            for a in PARAMETERS:
                one.add_argument(*a.flags, **a.options)
        if action == "upgrade":
            one.add_argument("--version", required=True, help="the version to move to (as gpuaas versions list "
                                                              "shows it), or its id")
        operation_options(one)
        one.set_defaults(func=command(operation)(lifecycle), action=action)
    ls = isub.add_parser("list", help="the instances of a project (default: of every project the token may read)")
    project_option(ls)
    ls.add_argument("--status", help="only instances in this status (created, running, failed, ...)")
    ls.add_argument("--app", metavar="SLUG", help="only instances of this app")
    output_option(ls)
    ls.set_defaults(func=list_instances)
    show = isub.add_parser("show", help="one instance: status, version, members, operations in progress")
    show.add_argument("instance", metavar="ID|NAME")
    project_option(show)
    output_option(show)
    show.set_defaults(func=show_instance)
    cred = isub.add_parser("credential", help="fetch a runtime access credential the instance's app declares (e.g. "
                                              "an admin configuration) into a file only you may read")
    cred.add_argument("instance", metavar="ID|NAME")
    cred.add_argument("credential", metavar="CREDENTIAL", help="its name, as the app's adapter declares it")
    cred.add_argument("-o", "--output-file", dest="file", metavar="FILE",
                      help="the file to create, mode 0600 (default: the file name the app suggests, in the current "
                           "directory); - prints the credential instead")
    cred.add_argument("--force", action="store_true", help="replace FILE when it exists")
    project_option(cred)
    cred.set_defaults(func=fetch_credential)
    inv = isub.add_parser("inventory", help="the instance's Ansible inventory with the variables of its runs, for "
                                            "ansible-playbook -i FILE: YAML in which every value the platform or a "
                                            "tenant set is !unsafe (never templated), the operator's site_vars "
                                            "below the run's own; -o json: the service's answer, for tools")
    inv.add_argument("instance", metavar="ID|NAME")
    inv.add_argument("--action", help="the operation kind whose run to describe (its catalog action_vars)")
    inv.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    project_option(inv)
    inv.set_defaults(func=show_inventory)
    secrets = isub.add_parser("run-secrets", help="the secrets and the access map a run of the instance gets, as an "
                                                  "extra-vars file only you may read, for a run outside the platform "
                                                  "(ansible-playbook -e @FILE; AWX reads them itself); audited")
    secrets.add_argument("instance", metavar="ID|NAME")
    secrets.add_argument("--file", metavar="FILE", help="the file to create, mode 0600, YAML with every value "
                                                        "!unsafe (default: INSTANCE-run-secrets.yml); - prints "
                                                        "them instead")
    secrets.add_argument("--force", action="store_true", help="replace FILE when it exists")
    project_option(secrets)
    secrets.set_defaults(func=fetch_run_secrets)
    access = isub.add_parser("access", help="how you log in to the instance: one `ssh USER@HOST` line per login "
                                            "host (your keys: `gpuaas keys`)")
    access.add_argument("instance", metavar="ID|NAME")
    project_option(access)
    output_option(access)
    access.set_defaults(func=show_access)
    amap = isub.add_parser("access-map", help="the instance's access map as an extra-vars file (YAML, every value "
                                              "!unsafe), for running the app's access playbook by hand (-e @FILE)")
    amap.add_argument("instance", metavar="ID|NAME")
    project_option(amap)
    amap.set_defaults(func=show_access_map)
    sync = isub.add_parser("access-sync", help="apply the instance's access map now (runtime users, accounts, "
                                               "logins, SSH keys) and follow the run to its end")
    sync.add_argument("instance", metavar="ID|NAME")
    operation_options(sync)
    sync.set_defaults(func=sync_access)
    drift = isub.add_parser("access-drift", help="how the runtime's accounts and associations differ from the "
                                                 "platform's (repair: access-sync)")
    drift.add_argument("instance", metavar="ID|NAME")
    project_option(drift)
    output_option(drift)
    drift.set_defaults(func=show_access_drift)


def roles(instance: dict, by_status: bool = False) -> str:
    """Each role's members of its desired count (`worker 2/2`), with `by_status` how many are in each status
    (`worker 2/2 (1 active, 1 failed)`)."""
    def counts(role: dict) -> str:
        found = role.get("members_by_status") or {}
        return f" ({', '.join(f'{n} {status}' for status, n in sorted(found.items()))})" if by_status and found else ""
    return ", ".join(f"{r['name']} {r['member_count']}/{r['desired_count']}{counts(r)}"
                     for r in instance["topology"]["roles"])


def health(instance: dict, indent: str) -> list[str]:
    """The last health check: when it ran and what (module, hosts, members, seconds), then each condition
    with its status, reason, since when, and message."""
    from ..client.render import plural, table, when

    record = instance.get("health") or {}
    if not record.get("checked_at"):
        return ["not checked yet"]
    check = record.get("check") or {}
    ran = (f": {check['module']} on {plural(check.get('hosts'), 'host')}, {plural(check.get('members'), 'member')}"
           f", {check.get('seconds')} s" if check.get("module") else "")
    conditions = table(["CONDITION", "STATUS", "REASON", "SINCE", "MESSAGE"],
                       [[c["type"], c["status"], c["reason"], when(c["last_transition_at"]), c["message"]]
                        for c in record.get("conditions") or []])
    return [f"checked {when(record['checked_at'])}{ran}"] + [indent + line for line in conditions.splitlines()]


@command("instances_list")
def list_instances(args, client) -> int:
    from ..client import lookup
    from ..client.render import table

    projects = lookup.projects(client, project_ref(args))
    found = [(p, i) for p in projects for i in client.pages(f"/v1/projects/{p['id']}/instances",
                                                             status=args.status, app_slug=args.app)]
    if structured(args):
        emit(args, [i for _, i in found])
        return 0
    headers = ["NAME", "STATUS", "APP", "VERSION", "MEMBERS"] + (["PROJECT"] if len(projects) > 1 else []) + ["ID"]
    print(table(headers, [[i["name"], i["status"], i["app_slug"], i["app_version"], roles(i)]
                          + ([p["name"]] if len(projects) > 1 else []) + [i["id"]] for p, i in found]))
    return 0


@command("instances_get")
def show_instance(args, client) -> int:
    from ..client import lookup
    from ..client.render import table, when

    instance = lookup.instance(client, args.instance, project_ref(args))
    members = lookup.members(client, instance["id"])
    open_ops = [op for status in ("running", "queued")
                for op in client.pages(f"/v1/instances/{instance['id']}/operations", status=status)]
    if structured(args):
        emit(args, instance | {"members": members, "operations": open_ops})
        return 0
    fields = [
        ("project", instance["project_id"]),
        ("app", f"{instance['app_slug']} {instance['app_version']}" + (" (canary)" if instance.get("canary") else "")),
        ("artifact", instance["artifact_reference"]),
        ("status", instance["status"] + (f": {instance['status_reason']}" if instance.get("status_reason") else "")),
        ("mode", f"{instance['operating_mode']}, control plane {instance['control_plane_scope']}, "
                 f"backend {instance['runtime_backend']}"),
        ("roles", roles(instance, by_status=True)),
        ("health", "\n".join(health(instance, " " * 12))),
        ("labels", ", ".join(f"{k}={v}" for k, v in sorted(instance["labels"].items())) or "-"),
        ("created", when(instance["created_at"])),
        ("updated", when(instance["updated_at"])),
    ]
    if instance.get("workload_artifact_reference"):
        fields.insert(3, ("workload", instance["workload_artifact_reference"]))
    print(f"{instance['name']}  {instance['id']}")
    for name, value in fields:
        print(f"  {name:<9} {value}")
    print()
    print(table(["ROLE", "NODE", "HOST", "ADDRESS", "STATUS", "REASON", "ID"],
                [[m["role"], m["node_name"], m["host_name"], (m.get("host") or {}).get("address"), m["status"],
                  m["status_reason"], m["id"]] for m in members]))
    if open_ops:
        print()
        print(table(["OPERATION", "KIND", "STATUS", "CREATED"],
                    [[op["id"], op["kind"], op["status"], when(op["created_at"])] for op in open_ops]))
    return 0


@command("credentials_issue")
def fetch_credential(args, client) -> int:
    from ..client import lookup
    from ..client.errors import ClientError

    instance = lookup.instance(client, args.instance, project_ref(args))
    version = client.get(f"/v1/catalog/apps/{instance['app_slug']}/versions/{instance['app_version']}")
    declared = version["adapter"].get("credentials") or {}
    if args.credential not in declared:
        raise ClientError(f"{instance['app_slug']} {instance['app_version']} declares no credential "
                          f"{args.credential} (it declares: {', '.join(sorted(declared)) or 'none'})")
    path = None if args.file == "-" else Path(args.file or declared[args.credential]["filename"])
    # Decided before asking: every issuance is audited, so none is made for a file that would be refused.
    if path is not None and (path.exists() or path.is_symlink()) and not args.force:
        raise ClientError(f"{path} exists; pass --force to replace it")
    issued = client.issue_credential(instance["id"], args.credential)
    if path is None:
        sys.stdout.write(issued["content"])
        return 0
    try:
        write_private(path, issued["content"], replace=args.force)
    except OSError as exc:
        raise ClientError(f"cannot write {path}: {exc.strerror} (the credential was issued; ask again)") from None
    print(f"{path}: {issued['media_type']}, credential {issued['name']} of {instance['name']} from "
          f"{issued['node_name']} (mode 0600)")
    return 0


@command("instances_inventory_get")
def show_inventory(args, client) -> int:
    from ..ansible_data import dump, playbook_inventory
    from ..client import lookup
    from ..client.render import dump as dump_json

    instance = lookup.instance(client, args.instance, project_ref(args))
    served = client.get(f"/v1/instances/{instance['id']}/inventory", **({"action": args.action} if args.action else {}))
    if args.output == "json":
        dump_json(served)
    else:  # tenant parameters live in it: as an inventory file, only !unsafe keeps Ansible from templating them
        sys.stdout.write(dump(playbook_inventory(served)))
    return 0


@command("instances_run_secrets_issue")
def fetch_run_secrets(args, client) -> int:
    from ..ansible_data import unsafe_vars_yaml
    from ..client import lookup
    from ..client.errors import ClientError

    instance = lookup.instance(client, args.instance, project_ref(args))
    path = None if args.file == "-" else Path(args.file or f"{instance['name']}-run-secrets.yml")
    # Decided before asking, as for a credential: every reading is audited.
    if path is not None and (path.exists() or path.is_symlink()) and not args.force:
        raise ClientError(f"{path} exists; pass --force to replace it")
    issued = client.request("POST", f"/v1/instances/{instance['id']}/run-secrets", retry=False)
    # An extra-vars file: the access map holds people's SSH key comments, which Ansible must not template.
    text = unsafe_vars_yaml(issued["variables"])
    if path is None:
        sys.stdout.write(text)
        return 0
    try:
        write_private(path, text, replace=args.force)
    except OSError as exc:
        raise ClientError(f"cannot write {path}: {exc.strerror} (the secrets were read; ask again)") from None
    print(f"{path}: {', '.join(sorted(issued['variables']))} of {instance['name']} (mode 0600; -e @{path})")
    return 0


def ssh_lines(access: dict) -> list[str]:
    """One ssh command per login host (`-p PORT` where the port is not 22)."""
    def port(host: dict) -> str:
        return "" if host.get("port", 22) == 22 else f"-p {host['port']} "
    return [f"ssh {port(h)}{access['username']}@{h['address']}" for h in access["login_hosts"]]


@command("instances_access_get")
def show_access(args, client) -> int:
    from ..client import lookup

    instance = lookup.instance(client, args.instance, project_ref(args))
    access = client.get(f"/v1/instances/{instance['id']}/access")
    if structured(args):
        emit(args, access)
        return 0
    print("\n".join(ssh_lines(access)))
    # Notes on stderr: stdout stays the ssh lines alone, for scripts.
    notes = [f"you are {access['username']} (uid {access['uid']}), charged to account {access['account']}"]
    if not access["login_hosts"]:
        notes.append(f"no login host of {instance['name']} serves now")
    if not access["ssh_keys"]:
        notes.append("you have no SSH key registered: gpuaas keys add NAME FILE")
    if not access["synced"]:
        notes.append(f"an access sync of {instance['name']} is queued or running: your login is there once it ends")
    for note in notes:
        print(f"gpuaas: {note}", file=sys.stderr)
    return 0


@command("instances_access_map_get")
def show_access_map(args, client) -> int:
    from ..ansible_data import unsafe_vars_yaml
    from ..client import lookup

    instance = lookup.instance(client, args.instance, project_ref(args))
    # An extra-vars file (`-e @map.yml` by hand), every value !unsafe: SSH key comments are people's text.
    sys.stdout.write(unsafe_vars_yaml({"gpuaas_access": client.get(f"/v1/instances/{instance['id']}/access-map")}))
    return 0


def lifecycle(args, client) -> int:
    from ..client import lookup

    instance = lookup.instance(client, args.instance, project_ref(args))
    body = None
    if args.action == "reconfigure":
        body = {"parameters": _parameters(client, args.parameters, args) or {}}
    elif args.action == "upgrade":
        version = args.version if lookup.is_uuid(args.version) else \
            client.get(f"/v1/catalog/apps/{instance['app_slug']}/versions/{args.version}")["id"]
        body = {"app_version_id": version}
    return run_operation(args, client, f"/v1/instances/{instance['id']}/{args.action}", body)


@command("instances_access_sync")
def sync_access(args, client) -> int:
    from ..client import lookup

    instance = lookup.instance(client, args.instance, project_ref(args))
    return run_operation(args, client, f"/v1/instances/{instance['id']}/access-sync")


@command("instances_access_drift_get")
def show_access_drift(args, client) -> int:
    from ..client import lookup

    instance = lookup.instance(client, args.instance, project_ref(args))
    drift = client.get(f"/v1/instances/{instance['id']}/access-drift")
    if structured(args):
        emit(args, drift)
        return 0 if drift["in_sync"] else 1
    if drift["in_sync"]:
        print(f"{instance['name']}: the runtime's accounts and associations are the platform's")
        return 0
    for key in ("missing_accounts", "unexpected_accounts", "foreign_accounts"):
        for name in drift[key]:
            print(f"{key.replace('_', ' ')[:-1]}: {name}")
    for key in ("missing_associations", "unexpected_associations"):
        for a in drift[key]:
            print(f"{key.replace('_', ' ')[:-1]}: {a['user']} in {a['account']}")
    print(f"gpuaas: repair with: gpuaas instances access-sync {instance['name']}", file=sys.stderr)
    return 1


def write_private(path: Path, content: str, *, replace: bool) -> None:
    """Creates `path` with `content`, readable and writable by its owner alone (0600 whatever the umask).
    An existing file is refused unless `replace`; then a new file takes its place, so an old file's wider
    mode or other links never see the content."""
    if not replace:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        staged = None
    else:
        fd, staged = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(content)
        if staged is not None:
            os.replace(staged, path)
    except BaseException:
        if staged is not None:
            Path(staged).unlink(missing_ok=True)
        raise
