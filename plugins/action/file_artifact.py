# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Action plugin of gpuaas.apps.file_artifact: a file whose bytes are on the controller (files[].src there) is
transferred to the host only when the host lacks it at its digest's path, one `test -e` round trip without Python
for all of them; the module then verifies and places every file in one module run. The host hashes what it got:
nothing the controller sends is trusted unverified."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.six.moves import shlex_quote
from ansible.plugins.action import ActionBase
from ansible_collections.gpuaas.apps.plugins.module_utils.file_artifacts import (
    ROOT,
    FileArtifactError,
    file_path,
)

MODULE = "gpuaas.apps.file_artifact"


class ActionModule(ActionBase):
    _supports_check_mode = True
    TRANSFERS_FILES = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        files = [dict(f) for f in args.get("files") or []]
        root = args.get("root") or ROOT
        try:
            local = [f for f in files if f.get("src")]
            paths = [file_path(f.get("digest"), root) for f in local]
        except FileArtifactError as error:
            raise AnsibleActionFail(str(error)) from None
        missing = self._missing(paths) if local else set()
        tmp_dir = None
        try:
            for f in local:
                path, src = file_path(f["digest"], root), f.pop("src")
                if path not in missing or self._play_context.check_mode:
                    continue
                if not os.path.isfile(src):
                    raise AnsibleActionFail("file %s: the controller's copy %s does not exist" % (f["name"], src))
                tmp_dir = tmp_dir or self._make_tmp_path()
                remote = self._connection._shell.join_path(tmp_dir, "file-" + f["digest"].split(":", 1)[1])
                self._transfer_file(src, remote)
                self._fixup_perms2((tmp_dir, remote))
                f["src"] = remote
            result.update(self._execute_module(module_name=MODULE, module_args=dict(args, files=files),
                                               task_vars=task_vars))
        finally:
            if tmp_dir:
                self._remove_tmp_path(tmp_dir)
        return result

    def _missing(self, paths):
        """The paths not on the host: one shell round trip for all of them."""
        script = "; ".join("test -e %s || echo %s" % (shlex_quote(p), shlex_quote(p)) for p in paths) + "; true"
        answer = self._low_level_execute_command(script)
        if answer.get("rc") != 0:
            raise AnsibleActionFail("could not look for the files on the host: %s" % answer.get("stderr", ""))
        return set(answer.get("stdout", "").splitlines())
