"""The content store (sha256-addressed blobs), its routes (real PostgreSQL, the real app), and the
per-digest install cache of collection tarballs (real ansible-galaxy builds and installs)."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from gpuaas_api.config import OperationSettings
from gpuaas_api.content import collections as cc
from gpuaas_api.content.routes import content_store
from gpuaas_api.content.store import (
    ContentMissing,
    ContentStore,
    ContentTooLarge,
    DigestMismatch,
    InvalidDigest,
    parse_digest,
)

GALAXY = Path(sys.executable).parent / "ansible-galaxy"
PLAYBOOK = """- name: Say hello
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Hello
      ansible.builtin.debug:
        msg: hello
"""


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def blobs(store: ContentStore) -> list[str]:
    """Every entry of the store's blob directory, temporary files included."""
    d = store.root / "sha256"
    return sorted(os.listdir(d)) if d.exists() else []


# Store and routes ---------------------------------------------------------------------------------

@pytest.fixture
def store(app, database, tmp_path) -> ContentStore:
    app.state.content_store = ContentStore(tmp_path / "content", database)
    return app.state.content_store


def upload_audits(w, digest: str) -> list[dict]:
    rows = w.call("platform_admin", "GET", "/v1/audit", 200,
                  params={"action": "apps.catalog.content.upload", "limit": 100}).json()["items"]
    return [r for r in rows if r["target_id"] == digest]


def test_upload_download_round_trip_is_audited_and_idempotent(world, store):
    data = os.urandom(3 << 20)  # over the app-wide 1 MiB body limit: this route streams instead
    digest = digest_of(data)
    url = f"/v1/content/{digest}"
    world.call("platform_admin", "HEAD", url, 404)
    created = world.call("platform_admin", "PUT", url, 201, content=data,
                         headers={"Content-Type": "application/octet-stream"}).json()
    assert created == {"digest": digest, "size": len(data), "created": True}
    assert store.has(digest) and store.path(digest).read_bytes() == data
    head = world.call("platform_admin", "HEAD", url, 200)
    assert int(head.headers["content-length"]) == len(data) and head.content == b""
    got = world.call("platform_admin", "GET", url, 200)
    assert got.content == data and got.headers["content-type"] == "application/octet-stream"
    assert got.headers["etag"] == f'"{digest}"'

    (audit,) = upload_audits(world, digest)
    assert audit["actor_kind"] == "user" and audit["target_kind"] == "content"
    publisher = {"kind": "user", "id": audit["actor_id"], "name": "root@platform.example"}
    assert audit["after"] == {"digest": digest, "size": len(data), "created": True, "publisher": publisher,
                              "catalog": "platform", "tenant_id": None}

    again = world.call("platform_admin", "PUT", url, 200, content=data).json()
    assert again == {"digest": digest, "size": len(data), "created": False}
    assert blobs(store) == [parse_digest(digest)]
    # nothing new was stored, but every publication is audited: who uploaded what
    assert [a["after"]["created"] for a in upload_audits(world, digest)] == [False, True]


def test_bytes_that_do_not_hash_to_the_digest_are_refused_and_not_stored(world, store):
    claimed = digest_of(b"the real tarball")
    body = world.call("platform_admin", "PUT", f"/v1/content/{claimed}", 422, content=b"something else").json()
    assert body["error"]["code"] == "artifact_digest_mismatch"
    assert body["error"]["details"] == {"expected": claimed, "actual": digest_of(b"something else")}
    assert blobs(store) == []  # not even a temporary file is left
    world.call("platform_admin", "HEAD", f"/v1/content/{claimed}", 404)
    assert world.call("platform_admin", "GET", f"/v1/content/{claimed}", 404).json()["error"]["code"] == "not_found"
    assert upload_audits(world, claimed) == []


@pytest.mark.parametrize("digest", ["sha256:" + "AB" * 32, "sha256:" + "ab" * 31, "sha512:" + "ab" * 32,
                                    "ab" * 32, "sha256:" + "ab" * 32 + "00"])
def test_malformed_digests_are_refused(world, store, digest):
    for method in ("PUT", "GET", "HEAD"):
        response = world.call("platform_admin", method, f"/v1/content/{digest}", 422, content=b"x")
        if method != "HEAD":
            assert response.json()["error"]["code"] == "validation_error"
    assert blobs(store) == []


def test_uploads_over_the_content_limit_are_refused(world, store, app):
    app.state.settings = dataclasses.replace(app.state.settings, max_content_bytes=1024)
    data = os.urandom(1025)
    url = f"/v1/content/{digest_of(data)}"
    declared = world.call("platform_admin", "PUT", url, 413, content=data).json()
    assert declared["error"]["code"] == "payload_too_large" and declared["error"]["details"] == {"max_bytes": 1024}
    # Without a Content-Length (chunked): refused once the stream passes the limit.
    chunked = world.call("platform_admin", "PUT", url, 413, content=iter([data[:600], data[600:]]))
    assert chunked.json()["error"]["code"] == "payload_too_large"
    assert blobs(store) == []
    exact = os.urandom(1024)
    world.call("platform_admin", "PUT", f"/v1/content/{digest_of(exact)}", 201, content=exact)


# Tenant admins publish their tenant's private apps, so they upload too (tests/api/test_catalog_publishers.py).
@pytest.mark.parametrize("actor,status", [("anonymous", 401), ("project_admin", 403),
                                          ("project_member", 403), ("service_account", 403)])
def test_only_catalog_writers_reach_content(world, store, actor, status):
    data = b"a collection build"
    url = f"/v1/content/{digest_of(data)}"
    assert world.call(actor, "PUT", url, status, content=data).json()["error"]["code"] in (
        "unauthenticated", "forbidden")
    assert blobs(store) == []
    world.call("platform_admin", "PUT", url, 201, content=data)
    world.call(actor, "GET", url, status)
    world.call(actor, "HEAD", url, status)


def tenant_upload_audits(w, actor: str, tenant: str, digest: str) -> list[tuple]:
    rows = w.call(actor, "GET", "/v1/audit", 200, params={
        "tenant_id": w.ids[tenant], "action": "apps.catalog.content.upload", "limit": 100}).json()["items"]
    return [(r["tenant_id"], r["after"]["created"]) for r in rows if r["target_id"] == digest]


def test_a_tenants_build_is_read_only_in_its_tenant_and_the_platforms_in_every_tenant(world, store):
    """Tenant admins hold apps.content.upload: each reads its own tenant's uploads and the platform's, and
    another tenant's build answers as content never stored (GET, HEAD, and a collection artifact naming it)."""
    theirs, never = b"tenant B's private build", digest_of(b"never stored")
    digest = digest_of(theirs)
    url = f"/v1/content/{digest}"
    assert world.call("other_tenant_admin", "PUT", url, 201, content=theirs).json()["created"] is True
    world.call("other_tenant_admin", "GET", url, 200)

    missing = world.call("tenant_admin", "GET", f"/v1/content/{never}", 404).json()["error"]
    hidden = world.call("tenant_admin", "GET", url, 404).json()["error"]
    assert hidden["details"] == {"kind": "content", "id": digest}
    assert (hidden["code"], hidden["message"].replace(digest, never)) == (missing["code"], missing["message"])
    assert world.call("tenant_admin", "HEAD", url, 404).content == b""
    world.call("tenant_admin", "POST", "/v1/catalog/apps", 201, json={
        "slug": "tenant-a-probe", "display_name": "Probe", "runtime_backend": "bare_metal",
        "tenant_id": world.ids["tenant_a"]})
    for reference in (f"collections/a.probe:1.0.0@{digest}", f"collections/a.probe:1.0.0@{never}"):
        refused = world.call("tenant_admin", "POST", "/v1/catalog/apps/tenant-a-probe/artifacts", 422,
                             json={"kind": "collection", "reference": reference}).json()["error"]
        assert refused["code"] == "artifact_content_missing"

    # The same bytes uploaded by tenant A: new for A (201, as if nobody had them), and from then on A's to read.
    assert world.call("tenant_admin", "PUT", url, 201, content=theirs).json()["created"] is True
    assert world.call("tenant_admin", "GET", url, 200).content == theirs
    assert int(world.call("tenant_admin", "HEAD", url, 200).headers["content-length"]) == len(theirs)
    world.call("tenant_admin", "POST", "/v1/catalog/apps/tenant-a-probe/artifacts", 201,
               json={"kind": "collection", "reference": f"collections/a.probe:1.0.0@{digest}"})
    assert world.call("tenant_admin", "PUT", url, 200, content=theirs).json()["created"] is False
    assert world.call("other_tenant_admin", "PUT", url, 200, content=theirs).json()["created"] is False
    assert blobs(store) == [parse_digest(digest)]  # one copy, whoever uploads it
    world.call("platform_admin", "GET", url, 200)  # the platform's principals read every digest
    # Each tenant's uploads are audited in its tenant, with created for its own scope.
    assert tenant_upload_audits(world, "tenant_admin", "tenant_a", digest) == [
        (world.ids["tenant_a"], False), (world.ids["tenant_a"], True)]
    assert tenant_upload_audits(world, "other_tenant_admin", "tenant_b", digest) == [
        (world.ids["tenant_b"], False), (world.ids["tenant_b"], True)]
    assert upload_audits(world, digest) == []  # no platform row

    # Platform content is every tenant's: its publishers read it, and uploading it again is new for their tenant.
    shared = b"a platform build"
    shared_url = f"/v1/content/{digest_of(shared)}"
    world.call("platform_admin", "PUT", shared_url, 201, content=shared)
    for actor in ("tenant_admin", "other_tenant_admin"):
        assert world.call(actor, "GET", shared_url, 200).content == shared
        world.call(actor, "HEAD", shared_url, 200)
    assert world.call("tenant_admin", "PUT", shared_url, 201, content=shared).json()["created"] is True
    assert [a["after"]["created"] for a in upload_audits(world, digest_of(shared))] == [True]


def test_the_default_store_lives_under_the_state_dir(app, tmp_path):
    app.state.operation_settings = OperationSettings(state_dir=tmp_path / "state")
    assert content_store(app).root == tmp_path / "state" / "content"
    assert content_store(app) is content_store(app)
    assert cc.cache_root(tmp_path / "state") == tmp_path / "state" / "collections"


def test_store_operations(tmp_path):
    store = ContentStore(tmp_path / "c")
    source = tmp_path / "blob"
    source.write_bytes(b"payload")
    digest = store.put_file(source)
    assert digest == digest_of(b"payload") and store.verify(digest) == store.path(digest)
    assert store.put_stream([b"pay", b"load"], digest) is False
    with pytest.raises(DigestMismatch):
        store.put_stream([b"other"], digest_of(b"different"))
    with pytest.raises(ContentTooLarge):
        store.put_stream([b"12345"], digest_of(b"12345"), max_bytes=4)
    with pytest.raises(ContentMissing):
        store.path(digest_of(b"never stored"))
    for bad in ("sha256:" + "A" * 64, "sha256:xyz", "", "sha256:" + "a" * 64 + "\n"):
        with pytest.raises(InvalidDigest):
            store.has(bad)
    assert blobs(store) == [parse_digest(digest)]
    blob = store.path(digest)
    blob.chmod(0o644)
    blob.write_bytes(b"bit rot")
    with pytest.raises(DigestMismatch):
        store.verify(digest)


# The database holds the content: every machine's copy comes from it ---------------------------------

def test_content_uploaded_on_one_machine_is_read_on_another_by_digest(world, store, database, tmp_path):
    data = os.urandom((2 << 20) + 17)  # three chunks
    digest = digest_of(data)
    world.call("platform_admin", "PUT", f"/v1/content/{digest}", 201, content=data)
    other = ContentStore(tmp_path / "other-machine", database)  # no disk in common with the replica
    assert other.has(digest) and other.size(digest) == len(data) and blobs(other) == []
    assert other.verify(digest).read_bytes() == data
    assert blobs(other) == [parse_digest(digest)]
    # the same bytes uploaded through another replica: already stored, no second copy in the database
    assert ContentStore(tmp_path / "third", database).put_stream([data], digest) is False
    with database.transaction() as conn:
        assert conn.execute("SELECT count(*) AS n FROM content_chunks WHERE digest = %s",
                            (digest,)).fetchone()["n"] == 3


def test_a_tampered_database_copy_is_refused_and_nothing_is_kept(world, store, database, tmp_path):
    data = os.urandom(4096)
    digest = digest_of(data)
    world.call("platform_admin", "PUT", f"/v1/content/{digest}", 201, content=data)
    with database.transaction() as conn:
        conn.execute("UPDATE content_chunks SET data = %s WHERE digest = %s", (b"x" + data[1:], digest))
    other = ContentStore(tmp_path / "other-machine", database)
    with pytest.raises(DigestMismatch):
        other.path(digest)
    assert blobs(other) == []  # not even a temporary file
    with pytest.raises(ContentMissing):
        other.path(digest_of(b"never uploaded"))


def test_a_tampered_local_copy_is_fetched_again_from_the_database(world, store, database, tmp_path, caplog):
    data = os.urandom(4096)
    digest = digest_of(data)
    world.call("platform_admin", "PUT", f"/v1/content/{digest}", 201, content=data)
    blob = store.path(digest)
    blob.chmod(0o644)
    blob.write_bytes(b"bit rot")
    with caplog.at_level(logging.WARNING):
        assert store.verify(digest).read_bytes() == data
    assert "fetching it again from the database" in caplog.text


def test_content_kept_on_disk_before_the_database_held_it_is_saved_there(database, tmp_path):
    local = ContentStore(tmp_path / "content")  # a store of the earlier kind: the disk alone
    digest, rotten = digest_of(b"an older build"), digest_of(b"rotten")
    assert local.put_stream([b"an older build"], digest) and local.put_stream([b"rotten"], rotten)
    local.path(rotten).chmod(0o644)
    local.path(rotten).write_bytes(b"changed on disk")
    shared = ContentStore(tmp_path / "content", database)
    assert shared.publish_local() == [digest]
    assert shared.publish_local() == []
    elsewhere = ContentStore(tmp_path / "elsewhere", database)
    assert elsewhere.path(digest).read_bytes() == b"an older build" and not elsewhere.has(rotten)


# Installed collections ----------------------------------------------------------------------------

def build_collection(src: Path, out: Path, *, name: str = "tiny", version: str = "1.0.0") -> Path:
    (src / "playbooks").mkdir(parents=True, exist_ok=True)
    (src / "adapters").mkdir()
    (src / "galaxy.yml").write_text(f"namespace: testns\nname: {name}\nversion: {version}\nreadme: README.md\n"
                                    "authors: [tests]\n")
    (src / "README.md").write_text("A collection for tests.\n")
    (src / "playbooks" / "hello.yml").write_text(PLAYBOOK)
    (src / "adapters" / "tiny.yml").write_text("app: {slug: tiny}\n")
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(GALAXY), "collection", "build", "--output-path", str(out), str(src)],
                   check=True, capture_output=True)
    return out / f"testns-{name}-{version}.tar.gz"


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("collection")
    return build_collection(root / "src", root / "out")


@pytest.fixture(autouse=True)
def _fresh_process_memory():
    cc._MANIFESTS.clear()  # each test starts as a worker process does that has not seen the digest yet


@pytest.fixture
def stored(tmp_path, tarball) -> tuple[ContentStore, str]:
    store = ContentStore(tmp_path / "content")
    return store, store.put_file(tarball)


@pytest.fixture
def installs(monkeypatch) -> list[Path]:
    """Records every real install (the install itself still runs)."""
    calls: list[Path] = []
    real = cc._install

    def counting(tarball, target, root):
        calls.append(target)
        real(tarball, target, root)

    monkeypatch.setattr(cc, "_install", counting)
    return calls


def collection_dir(installed: Path) -> Path:
    return installed / "ansible_collections" / "testns" / "tiny"


def test_read_one_file_and_the_manifest_without_extracting(tarball):
    assert cc.read_collection_file(tarball, "playbooks/hello.yml").decode() == PLAYBOOK
    info = cc.collection_manifest(tarball)
    assert (info["namespace"], info["name"], info["version"]) == ("testns", "tiny", "1.0.0")
    for bad in ("../etc/passwd", "/etc/passwd", "playbooks/missing.yml", "playbooks"):
        with pytest.raises(cc.CollectionError):
            cc.read_collection_file(tarball, bad)


def test_first_call_installs_and_later_calls_reuse_the_cache(stored, tmp_path, installs):
    store, digest = stored
    cache = tmp_path / "cache"
    installed = cc.installed_collection(store, digest, cache)
    assert installed == cache / parse_digest(digest)
    assert os.listdir(installed / "ansible_collections") == ["testns"]
    assert (collection_dir(installed) / "playbooks" / "hello.yml").read_text() == PLAYBOOK
    playbook = collection_dir(installed) / "playbooks" / "hello.yml"
    before = (installed.stat().st_ino, playbook.stat().st_ino, playbook.stat().st_mtime_ns)

    # Python byte code written next to a plugin is not an alteration.
    pycache = collection_dir(installed) / "playbooks" / "__pycache__"
    pycache.mkdir()
    (pycache / "x.cpython-311.pyc").write_bytes(b"\0")
    cc._MANIFESTS.clear()  # a later worker process: re-reads the verified tarball, still no reinstall
    for _ in range(3):
        assert cc.installed_collection(store, digest, cache) == installed
    assert installs == [installed]
    assert (installed.stat().st_ino, playbook.stat().st_ino, playbook.stat().st_mtime_ns) == before
    assert sorted(p for p in os.listdir(cache) if not p.startswith(".")) == [parse_digest(digest)]


@pytest.mark.parametrize("tamper", ["edit", "add", "remove", "manifest"])
def test_an_altered_cache_is_discarded_and_reinstalled_once(stored, tmp_path, installs, caplog, tamper):
    store, digest = stored
    cache = tmp_path / "cache"
    installed = cc.installed_collection(store, digest, cache)
    coll = collection_dir(installed)
    playbook = coll / "playbooks" / "hello.yml"
    if tamper == "edit":
        playbook.write_text(PLAYBOOK.replace("hello", "rm -rf"))
    elif tamper == "add":
        (coll / "playbooks" / "extra.yml").write_text(PLAYBOOK)
    elif tamper == "remove":
        playbook.unlink()
    else:
        (coll / "MANIFEST.json").write_text("{}")
    with caplog.at_level(logging.WARNING, logger=cc.__name__):
        assert cc.installed_collection(store, digest, cache) == installed
    assert "was altered" in caplog.text and digest in caplog.text
    assert playbook.read_text() == PLAYBOOK
    assert sorted(os.listdir(coll / "playbooks")) == ["hello.yml"]
    assert len(installs) == 2
    assert not [p for p in os.listdir(cache) if p.startswith((".install-", ".discard-"))]


def test_a_directory_link_inside_the_collection_is_kept_and_checked(tmp_path, installs, caplog):
    # The collection's playbooks/.internal/group_vars -> ../group_vars: the plays it holds read the same group_vars.
    src = tmp_path / "src"
    (src / "playbooks" / "group_vars").mkdir(parents=True)
    (src / "playbooks" / "group_vars" / "all.yml").write_text("ansible_pipelining: true\n")
    (src / "playbooks" / ".internal").mkdir()
    (src / "playbooks" / ".internal" / "group_vars").symlink_to("../group_vars")
    store = ContentStore(tmp_path / "content")
    digest = store.put_file(build_collection(src, tmp_path / "out"))
    cache = tmp_path / "cache"
    installed = cc.installed_collection(store, digest, cache)
    link = collection_dir(installed) / "playbooks" / ".internal" / "group_vars"
    assert link.is_symlink() and (link / "all.yml").read_text() == "ansible_pipelining: true\n"
    assert cc.installed_collection(store, digest, cache) == installed and len(installs) == 1

    # Pointed elsewhere, it is an alteration: the install is discarded and made again.
    link.unlink()
    link.symlink_to(tmp_path)
    with caplog.at_level(logging.WARNING, logger=cc.__name__):
        assert cc.installed_collection(store, digest, cache) == installed
    assert "unexpected directory link" in caplog.text and len(installs) == 2
    assert os.readlink(link) == "../group_vars"


def test_a_tampered_stored_tarball_is_refused_before_anything_is_installed(stored, tmp_path, installs):
    store, digest = stored
    blob = store.path(digest)
    blob.chmod(0o644)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    cache = tmp_path / "cache"
    with pytest.raises(DigestMismatch):
        cc.installed_collection(store, digest, cache)
    assert installs == [] and not cache.exists()


def test_a_missing_tarball_is_reported(tmp_path):
    with pytest.raises(ContentMissing):
        cc.installed_collection(ContentStore(tmp_path / "c"), digest_of(b"absent"), tmp_path / "cache")


def test_content_that_is_not_a_collection_is_refused(tmp_path, installs):
    store = ContentStore(tmp_path / "c")
    digest = store.put_file(Path(__file__))
    with pytest.raises(cc.CollectionError):
        cc.installed_collection(store, digest, tmp_path / "cache")
    assert installs == []


def test_two_threads_installing_one_digest_install_it_once(stored, tmp_path, installs):
    store, digest = stored
    cache = tmp_path / "cache"
    start = threading.Barrier(2)
    results: list[Path | BaseException] = []

    def worker():
        start.wait()
        try:
            results.append(cc.installed_collection(store, digest, cache))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            results.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [cache / parse_digest(digest)] * 2
    assert len(installs) == 1


PROCESS = """
import sys, time
from pathlib import Path
from gpuaas_api.content import collections as cc
from gpuaas_api.content.store import ContentStore
installs = []
real = cc._install
cc._install = lambda *a: (installs.append(1), real(*a))
ready, go = Path(sys.argv[3]), Path(sys.argv[4])
ready.touch()
while not go.exists():
    time.sleep(0.002)
cc.installed_collection(ContentStore(Path(sys.argv[1])), sys.argv[2], Path(sys.argv[5]))
print(len(installs))
"""


def test_two_processes_installing_one_digest_install_it_once(stored, tmp_path):
    store, digest = stored
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", PROCESS, str(store.root), digest, str(tmp_path / f"ready{i}"),
                               str(go), str(tmp_path / "cache")], stdout=subprocess.PIPE, text=True)
             for i in range(2)]
    while not all((tmp_path / f"ready{i}").exists() for i in range(2)):
        assert all(p.poll() is None for p in procs)
        time.sleep(0.01)
    go.touch()
    outputs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(outputs) == ["0", "1"]
    installed = collection_dir(tmp_path / "cache" / parse_digest(digest))
    assert (installed / "playbooks" / "hello.yml").read_text() == PLAYBOOK
