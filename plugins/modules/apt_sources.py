#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: apt_sources
short_description: Keep a site's own apt sources file, read its package lists, and report what is installed
version_added: "0.1.0"
description:
  - Keeps one apt sources file holding exactly O(lines), so that a repository dropped from the list is dropped
    from the host too; with no lines, the file is removed.
  - When there are lines, reads the package lists of these sources only (C(apt-get update) limited to this file),
    so that a version just published there can be installed at once, while the distribution's lists keep their
    own cache time. A cache refresh changes no state, so it does not count as a change.
  - Returns the installed packages (C(dpkg-query)), from which a role decides whether apt has anything to do and
    what a version pin moves. Doing all three in one module run spares each host a module start per run.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  path:
    description: The sources file this module owns.
    type: path
    default: /etc/apt/sources.list.d/gpuaas.list
  lines:
    description:
      - One-line apt sources, for example V(deb [trusted=yes] file:/srv/gpuaas-repo ./).
      - Each must be one non-empty line.
    type: list
    elements: str
    default: []
notes:
  - Supports check mode (the file is not written and no package list is read) and diff mode (the file).
extends_documentation_fragment:
  - gpuaas.apps.attributes.check_and_diff
"""

EXAMPLES = r"""
- name: List the site's repository, read its packages and what is installed
  gpuaas.apps.apt_sources:
    lines: ["deb [trusted=yes] file:/srv/gpuaas-repo ./"]
  register: site_apt

- name: No site repository any more (removes the file)
  gpuaas.apps.apt_sources:
    lines: []
"""

RETURN = r"""
installed:
  description:
    - One line per package dpkg knows, C(<source package> <status><package> <version>), where the status is
      dpkg's abbreviation (C(ii) for installed). The collection's filters C(gpuaas.apps.deb_request) and
      C(gpuaas.apps.deb_unsatisfied) read these lines.
  returned: always
  type: list
  elements: str
  sample: ["munge ii munge 0.5.15-2", "slurm-wlm ii slurmd 22.05.8-4+deb12u3"]
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - Ansible modules import after their documentation
from ansible_collections.gpuaas.apps.plugins.module_utils.dpkg import installed_packages  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.files import read_text, remove_file, write_file  # noqa: E402

HEADER = "# Managed by gpuaas.apps (gpuaas_apt_repositories).\n"


def wanted_text(lines):
    return HEADER + "".join(line + "\n" for line in lines) if lines else None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/apt/sources.list.d/gpuaas.list"),
            lines=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    path, lines = module.params["path"], module.params["lines"]
    for line in lines:
        if not line.strip() or "\n" in line or "\r" in line:
            module.fail_json(msg="each apt source must be one non-empty line; got %r" % line)
    before, after = read_text(path), wanted_text(lines)
    changed = before != after
    if changed and not module.check_mode:
        if after is None:
            remove_file(path)
        else:
            write_file(path, after, 0o644)
    if lines and not module.check_mode:
        rc, out, err = module.run_command(["apt-get", "update", "-o", "Dir::Etc::sourcelist=%s" % path,
                                           "-o", "Dir::Etc::sourceparts=-", "-o", "APT::Get::List-Cleanup=0"])
        if rc != 0:
            module.fail_json(msg="apt-get update of %s failed (rc %d): %s" % (path, rc, (err or out).strip()),
                             changed=changed)
    installed = installed_packages(module, changed)
    diff = dict(before_header=path, after_header=path, before=before or "", after=after or "")
    module.exit_json(changed=changed, installed=installed, diff=diff)


if __name__ == "__main__":
    main()
