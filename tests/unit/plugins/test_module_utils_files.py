"""module_utils/files.py: whole files written atomically with their mode and owner from the first byte on."""

import grp
import os
import pwd
import stat
from pathlib import Path

from ansible_collections.gpuaas.apps.plugins.module_utils import files


def test_files_are_written_whole_with_their_mode(tmp_path):
    path = tmp_path / "sub" / "web.env"
    files.write_file(str(path), "A=1\n", 0o600)
    assert path.read_text() == "A=1\n" and stat.S_IMODE(path.stat().st_mode) == 0o600
    files.write_file(str(path), "A=2\n", 0o600)
    assert path.read_text() == "A=2\n" and sorted(p.name for p in path.parent.iterdir()) == ["web.env"]
    assert files.read_text(str(path)) == "A=2\n" and files.read_text(str(tmp_path / "none")) is None
    assert files.remove_file(str(path)) and not files.remove_file(str(path))


def test_bytes_and_an_owner_are_set_before_the_file_appears(tmp_path, monkeypatch):
    """The rename is the moment the file appears: by then it has its content, mode and owner."""
    nobody, nogroup = pwd.getpwnam("nobody").pw_uid, grp.getgrnam("nogroup").gr_gid
    path = tmp_path / "key"
    seen = {}
    rename = os.rename

    def look_then_rename(src, dst):
        info = os.stat(src)
        seen.update(mode=stat.S_IMODE(info.st_mode), uid=info.st_uid, gid=info.st_gid, data=Path(src).read_bytes())
        rename(src, dst)

    monkeypatch.setattr(os, "rename", look_then_rename)
    files.write_file(str(path), b"\x00secret", 0o400, nobody, nogroup)
    assert seen == dict(mode=0o400, uid=nobody, gid=nogroup, data=b"\x00secret")
    assert path.read_bytes() == b"\x00secret" and (path.stat().st_uid, path.stat().st_gid) == (nobody, nogroup)
