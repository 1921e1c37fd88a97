#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: file_set
short_description: Keep a role's directories and files in place, all in one module run
version_added: "0.1.0"
description:
  - Creates the given O(directories) and writes the given O(files) (content rendered by the caller, for example
    with P(ansible.builtin.template#lookup)), and sets their owner, group and mode, on the target in one module
    run. Each C(ansible.builtin.file), C(copy) or C(template) task costs one or two module runs per path; a role
    that keeps many paths spends most of its time starting them.
  - A file is rewritten only when its content differs. It is written to a temporary file in the same directory
    with its final owner, group and mode, then renamed over the old one, so no reader sees a partial file and a
    secret is never readable by others, not even for a moment.
  - Each path may carry a O(files[].tag); RV(changed_tags) lists the tags of the paths that changed, so that one
    task can notify several handlers and each handler can tell whether its own files changed.
  - Directories are handled first, in the order given (missing parents are created, owned by root, mode 0755),
    then files. A file's parent directory must exist or be among O(directories).
  - Paths must not be symbolic links; the module refuses one instead of writing through it.
  - O(absent) removes paths (a teardown's), in the same module run, before anything else.
  - O(service) keeps the daemon that reads the files, in the same module run, after everything else; O(services)
    keeps several, in order (the daemon another needs first, such as munged before slurmd).
author:
  - gpuaas.apps developers (@gpuaas)
options:
  directories:
    description: Directories to keep.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path of the directory.
        type: path
        required: true
      owner:
        description: Owner (name or uid).
        type: str
        default: root
      group:
        description: Group (name or gid).
        type: str
        default: root
      mode:
        description: Mode, as an octal string such as V("0755").
        type: str
        required: true
      tag:
        description: Reported in RV(changed_tags) when this directory is created or its attributes change.
        type: str
  files:
    description: Files to keep, with their whole content.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path of the file.
        type: path
        required: true
      content:
        description:
          - The file's content. Shown in diff mode.
          - Exactly one of O(files[].content) and O(files[].secret_content) is required.
        type: str
      secret_content:
        description:
          - The file's content, for a secret such as a key. Masked in the module's output, never shown in diff
            mode, and written only to a file that never had wider permissions than O(files[].mode).
        type: str
      owner:
        description: Owner (name or uid).
        type: str
        default: root
      group:
        description: Group (name or gid).
        type: str
        default: root
      mode:
        description: Mode, as an octal string such as V("0644").
        type: str
        required: true
      tag:
        description: Reported in RV(changed_tags) when this file's content or attributes change.
        type: str
  absent:
    description:
      - Absolute paths to remove. A file or symbolic link is removed (not what it points to); a directory with
        everything in it. A path that does not exist is left as it is.
    type: list
    elements: path
    default: []
  service:
    description:
      - A systemd unit that reads these files, kept in the same module run once the paths are in place (one
        module start on each host instead of two).
      - It is enabled and started (or disabled and stopped) only where its state differs, the way
        M(gpuaas.apps.systemd_unit) does it. Systemd's configuration is reloaded first when systemd reports that
        the unit's own files changed on disk (a drop-in among O(files), say).
      - A running unit is restarted when a path whose tag is in O(service.restart_on) changed, or when
        O(service.restart) is true; a stopped one is started, and reads its files as it starts.
      - With O(service.state=stopped) the unit is stopped (and disabled) first, before any path is removed or
        written, and systemd is reloaded afterwards when it reports that a removed drop-in of the unit changed it
        (a teardown in one module run).
    type: dict
    suboptions: &unit_suboptions
      name:
        description: The unit, for example V(munge) (a name with no type is a service).
        type: str
        required: true
      enabled:
        description: Whether the unit starts at boot.
        type: bool
        default: true
      state:
        description: Whether the unit runs.
        type: str
        choices: [started, stopped]
        default: started
      restart_on:
        description: Tags (O(files[].tag), O(directories[].tag)) whose change restarts a running unit.
        type: list
        elements: str
        default: []
      restart:
        description: Restart the unit even when none of its paths changed, for example after a package upgrade.
        type: bool
        default: false
  services:
    description:
      - Several units, each as in O(service), kept in the order given in the same module run. Those to run are
        started or restarted in that order, once every path is in place, each after the one before it has
        started, so a daemon goes after the one it needs. Those to stop are stopped in the reverse order, before any
        path is removed or written.
      - Each unit restarts only for its own O(services[].restart_on) tags or O(services[].restart).
    type: list
    elements: dict
    default: []
    suboptions: *unit_suboptions
notes:
  - Supports check mode and diff mode. The diff shows each changed file's content (except secret content),
    each changed owner, group or mode, and each removed path.
extends_documentation_fragment:
  - gpuaas.apps.attributes.check_and_diff
"""

EXAMPLES = r"""
- name: Keep slurmd's directories and files, and slurmd, restarted when they changed while it ran
  gpuaas.apps.file_set:
    directories:
      - {path: /var/lib/slurm/slurmd, owner: slurm, group: slurm, mode: "0755"}
      - {path: /etc/systemd/system/slurmd.service.d, mode: "0755"}
    files:
      - path: /etc/default/slurmd
        content: "{{ lookup('ansible.builtin.template', 'slurmd.default.j2') }}"
        mode: "0644"
        tag: slurmd
    service:
      name: slurmd
      restart_on: [slurmd]
  register: slurmd_files

- name: Keep MUNGE's key (kept out of the output) and munged, restarting a running munged when the key changed
  gpuaas.apps.file_set:
    files:
      - path: /etc/munge/munge.key
        secret_content: "{{ munge_key }}"
        owner: munge
        group: munge
        mode: "0400"
        tag: key
    service:
      name: munge
      restart_on: [key]

- name: Keep MUNGE's key and slurmd's defaults, then munged and slurmd in that order, in one module run
  gpuaas.apps.file_set:
    files:
      - {path: /etc/munge/munge.key, secret_content: "{{ key }}", owner: munge, group: munge, mode: "0400", tag: key}
      - {path: /etc/default/slurmd, content: "SLURMD_OPTIONS=--conf-server ctl:6817\n", mode: "0644", tag: slurmd}
    services:
      - {name: munge, restart_on: [key]}
      - {name: slurmd, restart_on: [slurmd]}

- name: Stop and disable slurmd, then remove its configuration, spool and logs
  gpuaas.apps.file_set:
    absent: [/etc/default/slurmd, /var/lib/slurm/slurmd, /var/log/slurm/slurmd.log]
    service:
      name: slurmd
      state: stopped
      enabled: false
"""

RETURN = r"""
changed_paths:
  description: The paths that were (in check mode, would be) removed, created or changed, in the order given.
  returned: always
  type: list
  elements: str
  sample: [/etc/default/slurmd]
changed_tags:
  description: The tags of the changed paths, each once, sorted.
  returned: always
  type: list
  elements: str
  sample: [slurmd]
service_status:
  description: The properties of the unit in O(service) before the module changed it.
  returned: when O(service) is given
  type: dict
  sample:
    ActiveState: active
    SubState: running
    UnitFileState: enabled
services_status:
  description: The properties of each unit in O(services) before the module changed it, by unit name.
  returned: when O(services) is given
  type: dict
  sample:
    munge: {ActiveState: active, SubState: running, UnitFileState: enabled}
    slurmd: {ActiveState: inactive, SubState: dead, UnitFileState: enabled}
    LoadState: loaded
    NeedDaemonReload: "no"
"""

import grp  # noqa: E402 - Ansible modules import after their documentation
import os  # noqa: E402
import pwd  # noqa: E402
import shutil  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.files import write_file  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.systemd import UnitError, keep_unit  # noqa: E402

ATTRIBUTES = ("owner", "group", "mode")


class FileSetError(Exception):
    pass


def file_args(module, path, entry):
    """What AnsibleModule.set_fs_attributes_if_different takes, for the entry's owner, group and mode at path."""
    return module.load_file_common_arguments(dict((name, entry[name]) for name in ATTRIBUTES), path=path)


def refuse_link(path):
    if os.path.islink(path):
        raise FileSetError("%s is a symbolic link; file_set writes only real files and directories" % path)


def check_octal_mode(entry):
    mode = entry["mode"]
    try:
        if int(mode, 8) > 0o7777:
            raise ValueError(mode)
    except ValueError:
        raise FileSetError("%s: mode %r is not an octal mode such as \"0644\"" % (entry["path"], mode)) from None


def attribute_diff(module, path, entry):
    """(changed, diff): whether the path's owner, group or mode differ from the entry's, and how."""
    diff = dict(before={}, after={})
    changed = module.set_fs_attributes_if_different(file_args(module, path, entry), False, diff=diff, expand=False)
    return changed, dict(before_header=path, after_header=path, before=diff["before"], after=diff["after"])


def keep_directory(module, entry, planned_dirs):
    path = entry["path"]
    refuse_link(path)
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise FileSetError("%s exists and is not a directory" % path)
        return attribute_diff(module, path, entry)
    planned_dirs.add(path)
    after = dict(((name, entry[name]) for name in ATTRIBUTES), state="directory")
    diff = dict(before_header=path, after_header=path, before=dict(state="absent"), after=after)
    if not module.check_mode:
        os.makedirs(path)
        module.set_fs_attributes_if_different(file_args(module, path, entry), True, expand=False)
    return True, diff


def remove_path(module, path):
    """(changed, diff) for removing ``path``: a file or link itself, a directory with its content."""
    if os.path.islink(path) or os.path.isfile(path):
        kind = "link" if os.path.islink(path) else "file"
    elif os.path.isdir(path):
        kind = "directory"
    elif os.path.lexists(path):
        raise FileSetError("%s is neither a file, a link nor a directory; file_set does not remove it" % path)
    else:
        return False, None
    if not module.check_mode:
        if kind == "directory":
            shutil.rmtree(path)
        else:
            os.unlink(path)
    return True, dict(before_header=path, after_header=path, before=dict(state=kind), after=dict(state="absent"))


def read_bytes(path):
    if not os.path.exists(path):
        return None
    if not os.path.isfile(path):
        raise FileSetError("%s exists and is not a regular file" % path)
    with open(path, "rb") as handle:
        return handle.read()


def owner_ids(entry):
    """(uid, gid) of the entry's owner and group, given by name or number."""
    try:
        uid = int(entry["owner"]) if entry["owner"].isdigit() else pwd.getpwnam(entry["owner"]).pw_uid
    except KeyError:
        raise FileSetError("%s: there is no user %s" % (entry["path"], entry["owner"])) from None
    try:
        gid = int(entry["group"]) if entry["group"].isdigit() else grp.getgrnam(entry["group"]).gr_gid
    except KeyError:
        raise FileSetError("%s: there is no group %s" % (entry["path"], entry["group"])) from None
    return uid, gid


def keep_file(module, entry, planned_dirs):
    path = entry["path"]
    refuse_link(path)
    parent = os.path.dirname(path)
    if not os.path.isdir(parent) and parent not in planned_dirs:
        raise FileSetError("%s: its directory %s does not exist; list it in directories" % (path, parent))
    secret = entry["secret_content"] is not None
    text = entry["secret_content"] if secret else entry["content"]
    data = text.encode("utf-8")
    old = read_bytes(path) if os.path.isdir(parent) else None
    diffs = []
    content_changed = old != data
    if content_changed:
        if secret:
            before, after = ("(secret, not shown)\n" if old is not None else ""), "(secret, changed, not shown)\n"
        else:
            before, after = (old.decode("utf-8", "replace") if old is not None else ""), text
        diffs.append(dict(before_header=path, after_header=path, before=before, after=after))
        if not module.check_mode:
            write_file(path, data, int(entry["mode"], 8), *owner_ids(entry))
    attributes_changed = False
    if old is not None and not content_changed:
        attributes_changed, diff = attribute_diff(module, path, entry)
        if attributes_changed:
            diffs.append(diff)
    return content_changed or attributes_changed, diffs


def keep_service(module, service, state, result, diffs, statuses, daemon_reload=True):
    """Keeps the unit in ``service`` (see keep_unit) and adds what changed to ``result`` and ``diffs``, and its
    status before any change to ``statuses``; fails the module with what was done so far when systemd refuses."""
    try:
        unit_changed, status, unit_diff = keep_unit(module, service["name"], service["enabled"] if state else None,
                                                    state, daemon_reload=daemon_reload)
    except UnitError as error:
        result["changed"] = result["changed"] or error.changed
        module.fail_json(msg=str(error), service_status=error.status, **result)
    statuses.setdefault(service["name"], status)
    if unit_changed:
        result["changed"] = True
        diffs.append(unit_diff)


def main():
    path_options = dict(path=dict(type="path", required=True), owner=dict(type="str", default="root"),
                        group=dict(type="str", default="root"), mode=dict(type="str", required=True),
                        tag=dict(type="str"))
    unit_options = dict(
        name=dict(type="str", required=True),
        enabled=dict(type="bool", default=True),
        state=dict(type="str", choices=["started", "stopped"], default="started"),
        restart_on=dict(type="list", elements="str", default=[]),
        restart=dict(type="bool", default=False),
    )
    module = AnsibleModule(
        argument_spec=dict(
            absent=dict(type="list", elements="path", default=[]),
            directories=dict(type="list", elements="dict", default=[], options=path_options),
            files=dict(type="list", elements="dict", default=[],
                       options=dict(path_options, content=dict(type="str"),
                                    secret_content=dict(type="str", no_log=True)),
                       mutually_exclusive=[("content", "secret_content")],
                       required_one_of=[("content", "secret_content")]),
            service=dict(type="dict", options=unit_options),
            services=dict(type="list", elements="dict", default=[], options=unit_options),
        ),
        mutually_exclusive=[("service", "services")],
        supports_check_mode=True,
    )
    entries = [("directory", e) for e in module.params["directories"]] + [("file", e) for e in module.params["files"]]
    changed_paths, changed_tags, diffs = [], set(), []
    planned_dirs = set()
    service = module.params["service"]
    units = [service] if service else module.params["services"]
    stopping = [unit for unit in units if unit["state"] == "stopped"]
    running = [unit for unit in units if unit["state"] == "started"]
    result, statuses = dict(changed=False), {}
    # A daemon stops before its files go, and before the daemons it needs (listed before it).
    for unit in reversed(stopping):
        keep_service(module, unit, "stopped", result, diffs, statuses, daemon_reload=False)
    try:
        relative = [path for path in module.params["absent"] if not os.path.isabs(path)]
        if relative:
            raise FileSetError("%s is not an absolute path" % relative[0])
        for path in module.params["absent"]:
            removed, diff = remove_path(module, path)
            if removed:
                changed_paths.append(path)
                diffs.append(diff)
        for kind, entry in entries:
            if not os.path.isabs(entry["path"]):
                raise FileSetError("%s is not an absolute path" % entry["path"])
            check_octal_mode(entry)
            if kind == "directory":
                changed, diff = keep_directory(module, entry, planned_dirs)
                entry_diffs = [diff] if changed else []
            else:
                changed, entry_diffs = keep_file(module, entry, planned_dirs)
            if changed:
                changed_paths.append(entry["path"])
                if entry["tag"]:
                    changed_tags.add(entry["tag"])
                diffs.extend(entry_diffs)
    except (FileSetError, OSError) as error:
        module.fail_json(msg=str(error), changed=result["changed"] or bool(changed_paths),
                         changed_paths=changed_paths, changed_tags=sorted(changed_tags))
    result.update(changed=result["changed"] or bool(changed_paths), changed_paths=changed_paths,
                  changed_tags=sorted(changed_tags))
    if stopping and changed_paths and not module.check_mode:
        # systemd forgets a removed drop-in of a unit only when it reloads.
        for unit in stopping:
            keep_service(module, unit, None, result, diffs, statuses)
    # A daemon starts, or restarts, once its files are in place and the daemons listed before it run.
    for unit in running:
        restart = unit["restart"] or changed_tags & set(unit["restart_on"])
        keep_service(module, unit, "restarted" if restart else "started", result, diffs, statuses)
    if service:
        result["service_status"] = statuses[service["name"]]
    elif units:
        result["services_status"] = statuses
    module.exit_json(diff=diffs, **result)


if __name__ == "__main__":
    main()
