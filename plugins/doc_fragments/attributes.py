# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # A module that changes state, with full check mode and diff mode:
    # extends_documentation_fragment: [gpuaas.apps.attributes.check_and_diff]
    CHECK_AND_DIFF = r"""
attributes:
  check_mode:
    description: Can run in check mode and report what would change without changing anything.
    support: full
  diff_mode:
    description: Reports what changed (or, in check mode, what would change) when run with --diff.
    support: full
"""

    # A module that only reads (an _info or _facts module):
    # extends_documentation_fragment: [gpuaas.apps.attributes.read_only]
    READ_ONLY = r"""
attributes:
  check_mode:
    description: Reads only, so check mode is a normal run.
    support: full
  diff_mode:
    description: Changes nothing, so there is no diff.
    support: none
"""
