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


class HostPodman:
    """Test double of oci.Podman (no podman here): every image is present, rmi succeeds."""
    available, path = staticmethod(lambda: True), "/usr/bin/podman"

    def image(self, reference):
        return {"Id": reference}

    def container(self, name):
        return None

    def run(self, args, check=True):
        return 0, "", ""


class HostSystemd:
    """Test double of the systemd wrapper: a unit starts (or fails to, with ``fails``) when asked to."""

    def __init__(self, fails=False):
        self.fails, self.running = fails, set()

    def active(self, unit):
        return unit in self.running

    def enabled(self, unit):
        return unit in self.running

    def run(self, *args, check=True):
        if args[0] in ("restart", "enable") and args[-1].endswith(".service"):
            if self.fails:
                return 1, "", "the container exited"
            self.running.add(args[-1])
        return 0, "", ""


class Module:
    warn = staticmethod(lambda message: None)
    get_bin_path = staticmethod(lambda name: None)


@pytest.fixture
def host(tmp_path, monkeypatch):
    """The module's host directories under tmp_path; files placed from bytes with ``put``."""
    root = str(tmp_path / "files")
    for name, directory in (("FILES_ROOT", root), ("UNIT_DIR", tmp_path / "units"), ("ENV_DIR", tmp_path / "env"),
                            ("RECORD_DIR", tmp_path / "records")):
        os.makedirs(directory, exist_ok=True)
        monkeypatch.setattr(oci_steps, name, str(directory))
    monkeypatch.setattr(oci_steps, "file_path", lambda digest: file_path(digest, root=root))
    monkeypatch.setattr(oci_steps, "cdi_devices", lambda: [])

    def put(data):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        src = tmp_path / digest.split(":")[1]
        src.write_bytes(data)
        placed = place(digest, src=str(src), root=root)["path"]
        oci_steps.record_placed_files("web", [placed], record_dir=str(tmp_path / "records"))
        return digest, placed

    return put


def request(files):
    return GOOD | {"restart_sec": 5, "files": files}


def record(tmp_path):
    return json.loads((tmp_path / "records" / "web.json").read_text())


def test_an_upgrade_removes_the_old_versions_file_and_an_unmounted_file_is_recorded_and_removed(tmp_path, host):
    x_digest, x = host(b"version 1's file\n")
    unmounted_digest, unmounted = host(b"a file the version places but mounts nowhere\n")
    systemd = HostSystemd()
    oci_steps.start(Module(), HostPodman(), systemd, request(
        [{"name": "site", "digest": x_digest, "mount": "/www/site.txt"},
         {"name": "notes", "digest": unmounted_digest, "mount": None}]))
    assert set(record(tmp_path)["files"]) == {x, unmounted}
    # The upgrade to a version pinning Y: once it started, X leaves the host (no other workload has it).
    y_digest, y = host(b"version 2's file\n")
    result = oci_steps.start(Module(), HostPodman(), systemd, request(
        [{"name": "site", "digest": y_digest, "mount": "/www/site.txt"},
         {"name": "notes", "digest": unmounted_digest}]))
    assert result["file_artifacts"] == [x] and not os.path.exists(x)
    assert set(record(tmp_path)["files"]) == {y, unmounted}
    # The teardown removes every file the record lists, the unmounted one too.
    removed = oci_steps.remove(HostPodman(), systemd, "web")
    assert sorted(removed["file_artifacts"]) == sorted([y, unmounted])
    assert not os.path.exists(y) and not os.path.exists(unmounted)


def test_files_placed_for_a_workload_whose_start_failed_stay_recorded_and_leave_with_it(tmp_path, host):
    x_digest, x = host(b"version 1's file\n")
    # Placed, recorded by the placing step: a workload that never started still has a record of its files.
    assert record(tmp_path)["files"] == {x: os.stat(x).st_ino}
    oci_steps.start(Module(), HostPodman(), HostSystemd(), request([{"name": "site", "digest": x_digest,
                                                                      "mount": "/www/site.txt"}]))
    y_digest, y = host(b"version 2's file\n")
    with pytest.raises(oci_steps.OciError, match="did not start"):
        oci_steps.start(Module(), HostPodman(), HostSystemd(fails=True), request(
            [{"name": "site", "digest": y_digest, "mount": "/www/site.txt"}]))
    # The failed start removed nothing and kept both recorded; the teardown removes both.
    assert set(record(tmp_path)["files"]) == {x, y} and os.path.exists(x)
    assert sorted(oci_steps.remove(HostPodman(), HostSystemd(), "web")["file_artifacts"]) == sorted([x, y])


def test_a_download_follows_no_redirect_and_names_the_url():
    """An allowlisted source that redirects could send the host anywhere: the download fails instead."""
    import http.server
    import threading

    from ansible_collections.gpuaas.apps.plugins.modules.file_artifact import download

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/models/site.txt"
    try:
        with pytest.raises(Exception) as refused:
            b"".join(download(url, True)())
    finally:
        server.shutdown()
    assert isinstance(refused.value, FileArtifactError)
    assert str(refused.value).startswith(url + " answered a redirect (HTTP 302 to http://169.254.169.254/")


def test_a_file_placed_again_still_restarts_the_workload(tmp_path, host):
    digest, path = host(b"the site\n")
    systemd = HostSystemd()
    files = [{"name": "site", "digest": digest, "mount": "/www/site.txt"}]
    oci_steps.start(Module(), HostPodman(), systemd, request(files))
    assert not oci_steps.start(Module(), HostPodman(), systemd, request(files))["restarted"]
    # An altered copy refused and placed again (a new inode): the record keeps the mounted one until the restart.
    os.link(path, tmp_path / "mounted")  # the container's bind mount holds the old inode
    os.unlink(path)
    digest, path = host(b"the site\n")
    assert oci_steps.start(Module(), HostPodman(), systemd, request(files))["restarted"]
