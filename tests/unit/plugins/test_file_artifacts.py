"""plugins/module_utils/file_artifacts.py (gpuaas.apps.file_artifact's verify-and-place) and the read-only mounts
oci_steps makes of placed files. A file appears at its digest's path only once its bytes hash to the digest; a
tampered source is refused and leaves nothing there; a copy altered on the host is removed and refused, naming both
digests, and the next run places a verified copy. The module on a real host: tests/e2e/test_file_artifacts.py."""

import hashlib
import json
import os
import stat

import pytest
from ansible_collections.gpuaas.apps.plugins.module_utils import oci_steps
from ansible_collections.gpuaas.apps.plugins.module_utils.file_artifacts import FileArtifactError, file_path, place
from ansible_collections.gpuaas.apps.plugins.module_utils.oci_steps import file_volumes, request_problems
from test_oci_steps import GOOD

DATA = b"model weights, or any file the version pins\n"
DIGEST = "sha256:" + hashlib.sha256(DATA).hexdigest()


def entries(root):
    return sorted(os.listdir(os.path.join(root, "sha256")))


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "transferred"
    path.write_bytes(DATA)
    return str(path)


def test_a_file_is_placed_read_only_at_its_digests_path_once(tmp_path, source):
    root = str(tmp_path / "files")
    placed = place(DIGEST, src=source, root=root)
    path = file_path(DIGEST, root)
    assert placed == dict(digest=DIGEST, path=path, changed=True, placed=True, size=len(DATA))
    assert path == os.path.join(root, "sha256", DIGEST.split(":")[1])
    with open(path, "rb") as f:
        assert f.read() == DATA
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o444
    # Again: verified where it is, left alone; no source needed.
    assert place(DIGEST, root=root) == dict(digest=DIGEST, path=path, changed=False, placed=False, size=len(DATA))
    assert entries(root) == [DIGEST.split(":")[1]]


def test_a_tampered_source_is_refused_and_leaves_nothing(tmp_path):
    root = str(tmp_path / "files")
    tampered = tmp_path / "tampered"
    tampered.write_bytes(DATA.replace(b"weights", b"WEIGHTS"))
    found = "sha256:" + hashlib.sha256(tampered.read_bytes()).hexdigest()
    with pytest.raises(FileArtifactError) as refused:
        place(DIGEST, src=str(tampered), root=root)
    assert f"expected {DIGEST}, found {found}" in str(refused.value)
    assert entries(root) == []  # neither the file nor its temporary copy
    # A download of more than the declared size is cut off, and leaves nothing either.
    with pytest.raises(FileArtifactError, match="more than its declared 4 bytes"):
        place(DIGEST, fetch=lambda: iter([DATA[:4], DATA[4:]]), size=4, root=root)
    assert entries(root) == []
    assert place(DIGEST, fetch=lambda: iter([DATA[:4], DATA[4:]]), size=len(DATA), root=root)["placed"]


def test_a_copy_altered_on_the_host_is_removed_and_refused_then_placed_again(tmp_path, source):
    root = str(tmp_path / "files")
    path = place(DIGEST, src=source, root=root)["path"]
    os.chmod(path, 0o644)
    with open(path, "ab") as f:
        f.write(b"appended on the host\n")
    with open(path, "rb") as f:
        found = "sha256:" + hashlib.sha256(f.read()).hexdigest()
    with pytest.raises(FileArtifactError) as refused:
        place(DIGEST, src=source, root=root)
    assert "altered on this host" in str(refused.value)
    assert f"expected {DIGEST}, found {found}" in str(refused.value)
    assert not os.path.lexists(path)
    assert place(DIGEST, src=source, root=root)["placed"]
    with open(path, "rb") as f:
        assert f.read() == DATA


def test_check_mode_writes_nothing_and_a_missing_file_needs_a_source(tmp_path, source):
    root = str(tmp_path / "files")
    assert place(DIGEST, src=source, root=root, check=True)["placed"]
    assert not os.path.exists(file_path(DIGEST, root))
    with pytest.raises(FileArtifactError, match="no source was given"):
        place(DIGEST, root=root)
    for bad in ("sha256:" + "AB" * 32, "sha512:" + "ab" * 64, "../../etc/passwd", None):
        with pytest.raises(FileArtifactError, match="must be sha256"):
            file_path(bad, root)


def test_a_workload_mounts_each_file_read_only_from_its_digests_path():
    files = [{"name": "site", "digest": DIGEST, "mount": "/www/site.txt", "path": "/etc/shadow",
              "src": "/tmp/x", "size": 1}]
    # The source is the digest's path, never the path an entry carries.
    assert file_volumes(files) == [{"source": file_path(DIGEST), "target": "/www/site.txt", "read_only": True}]
    assert request_problems(GOOD | {"files": files}) == []
    problems = request_problems(GOOD | {"files": [{"name": "a", "digest": "sha256:nope", "mount": "/a"},
                                                  {"name": "b", "digest": DIGEST, "mount": "relative/b"}]})
    assert len(problems) == 1 and "must be sha256" in problems[0]
    problems = request_problems(GOOD | {"files": [{"name": "b", "digest": DIGEST, "mount": "/www/../etc/b"}]})
    assert len(problems) == 1 and "absolute path" in problems[0]


def test_a_teardown_removes_the_files_no_other_workload_on_the_host_mounts(tmp_path, source, monkeypatch):
    root = str(tmp_path / "files")
    monkeypatch.setattr(oci_steps, "FILES_ROOT", root)
    kept_data = b"a file another workload mounts\n"
    kept_source = tmp_path / "kept"
    kept_source.write_bytes(kept_data)
    mine = place(DIGEST, src=source, root=root)["path"]
    shared = place("sha256:" + hashlib.sha256(kept_data).hexdigest(), src=str(kept_source), root=root)["path"]
    records = tmp_path / "records"
    records.mkdir()
    (records / "other.json").write_text(json.dumps({"name": "other", "files": {shared: 1}}))
    record = {"name": "web", "files": {mine: 1, shared: 2, "/etc/passwd": 3}}
    # Only paths under the files root, only those no other record lists: never what a record names elsewhere.
    assert oci_steps.file_artifacts_to_remove(record, str(records / "web.json")) == [mine]
    os.unlink(mine)
    assert oci_steps.file_artifacts_to_remove(record, str(records / "web.json")) == []
