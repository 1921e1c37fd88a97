# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Filter gpuaas.apps.oci_request_problems: the problems of an OCI workload's request that show without its host,
found on the control node by the same code the modules run on the host (module_utils.oci_steps)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuaas.apps.plugins.module_utils.oci_steps import workload_problems


def oci_request_problems(options):
    if not isinstance(options, dict):
        raise AnsibleFilterError("oci_request_problems expects the options of gpuaas.apps.oci_workload as a dict")
    return workload_problems(dict(options))


class FilterModule(object):
    def filters(self):
        return {"oci_request_problems": oci_request_problems}
