# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Filters gpuaas.apps.deb_request and gpuaas.apps.deb_unsatisfied: what the roles ask apt for, and whether
the host already has it.

Both read the lines of `dpkg-query --show --showformat='${source:Package} ${db:Status-Abbrev}${Package}
${Version}\\n'` (INSTALLED_FORMAT): "<source> <status> <package> <version>", "ii" for an installed package."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible.errors import AnsibleFilterError


def _installed(lines):
    """{package: (source, version)} of the packages the lines show installed ("ii")."""
    found = {}
    for line in lines or []:
        fields = line.split()
        if len(fields) == 4 and fields[1] == "ii":
            found[fields[2]] = (fields[0], fields[3])
    return found


def deb_request(packages, installed, source, version="", family_match=""):
    """The apt request for `packages`. Without a version, `packages` as they are. With one, every package of
    the family (those of `packages` matching `family_match`, all of them when it is empty, and every package
    built from `source` the host has) pinned to that version, and the others unpinned: packages built from one
    source need each other's exact version, so a pin moves every one the host has, or apt would have to remove
    those left behind."""
    if not isinstance(packages, list):
        raise AnsibleFilterError("deb_request: packages must be a list, got %s" % type(packages).__name__)
    if not version:
        return list(packages)
    family = [p for p in packages if re.match(family_match, p)]
    family += sorted(p for p, (src, _version) in _installed(installed).items() if src == source and p not in family)
    return ["%s=%s" % (p, version) for p in family] + [p for p in packages if p not in family]


def deb_unsatisfied(request, installed):
    """The entries of an apt request ("name" or "name=version") the host does not satisfy yet: not installed,
    or installed at another version than the one pinned. Empty: apt has nothing to do."""
    have = _installed(installed)
    missing = []
    for entry in request:
        name, _sep, version = entry.partition("=")
        if name not in have or (version and have[name][1] != version):
            missing.append(entry)
    return missing


class FilterModule(object):
    def filters(self):
        return {"deb_request": deb_request, "deb_unsatisfied": deb_unsatisfied}
