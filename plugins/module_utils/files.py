# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Reading, writing and removing whole files, the way every gpuaas.apps module that keeps a file does it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import tempfile


def read_text(path):
    """The file's text, or None when there is none to read."""
    try:
        with open(path) as f:
            return f.read()
    except (IOError, OSError):
        return None


def write_file(path, data, mode, uid=-1, gid=-1):
    """Writes ``data`` (text or bytes) atomically: into a temporary file in the same directory that already has
    ``mode`` and, when given, owner ``uid`` and group ``gid``, then renamed over ``path``. A reader never sees a
    partial file, and a secret is never readable by others, not even for a moment. Creates a missing directory
    (mode 0755)."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    fd, tmp = tempfile.mkstemp(prefix=".gpuaas-", dir=directory)
    try:
        os.fchmod(fd, mode)
        if uid != -1 or gid != -1:
            os.fchown(fd, uid, gid)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if not isinstance(data, bytes) else data)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def remove_file(path):
    """Removes ``path``; True when there was one."""
    try:
        os.unlink(path)
        return True
    except OSError:
        return False
