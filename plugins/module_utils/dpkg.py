# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What dpkg says is installed, in the one line format the collection's deb filters read."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# <source package> <status abbreviation><package> <version>, for example "munge ii munge 0.5.15-2".
DPKG_FORMAT = "${source:Package} ${db:Status-Abbrev}${Package} ${Version}\\n"


def installed_packages(module, changed=False):
    """One line per package dpkg knows (gpuaas.apps.deb_request and deb_unsatisfied read them); fails the module
    when dpkg-query cannot answer, saying whether the module had changed something before."""
    rc, out, err = module.run_command(["dpkg-query", "--show", "--showformat=" + DPKG_FORMAT],
                                      environ_update=dict(LC_ALL="C"))
    if rc not in (0, 1):  # 1: no package to show (an empty dpkg database)
        module.fail_json(msg="dpkg-query failed (rc %d): %s" % (rc, err.strip()), changed=changed)
    return out.splitlines()
