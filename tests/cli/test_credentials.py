"""`gpuaas instances credential`: a runtime access credential the app declares, fetched into a file only its owner
may read (0600 whatever the umask), never over an existing file unless --force, never printed unless `-o -`. The
service reads it for real (tests/operations/test_credentials.py: the test app's credential module on a worker's
host, with a local connection)."""

from __future__ import annotations

import secrets
import stat

from operations.helpers import CREDENTIAL, deployed_with_credential, events, make_instance

SA = "service_account"


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_credential_lands_in_a_private_file(ops, cli, local_hosts, tmp_path):
    iid, workers, marker = deployed_with_credential(ops, "kube")
    secret = f"token: {secrets.token_urlsafe(32)}\n"
    for node in workers:
        (marker / f"{node}.secret").write_text(secret)
    token = ops.w.tokens[SA]
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()

    # By default: the file name the app suggests, in the current directory; created 0600 even with umask 0.
    got = cli("instances", "credential", "kube", CREDENTIAL, token=token, cwd=here, umask=0)
    assert got.returncode == 0, got.stderr
    written = here / "opsapp-admin.txt"
    assert written.read_text() == secret and mode(written) == 0o600
    assert secret.strip() not in got.stdout + got.stderr
    assert got.stdout.startswith(f"{written.name}: text/plain, credential {CREDENTIAL} of kube from {workers[0]}")

    # An existing file is refused before anything is issued; --force replaces it with a new private file.
    issued = len(events(ops, iid, type="runtime_secret.issued"))
    chosen = elsewhere / "mine.txt"
    chosen.write_text("keep me")
    chosen.chmod(0o644)
    refused = cli("instances", "credential", iid, CREDENTIAL, "-o", str(chosen), token=token)
    assert refused.returncode == 1 and f"{chosen} exists; pass --force" in refused.stderr
    assert chosen.read_text() == "keep me" and len(events(ops, iid, type="runtime_secret.issued")) == issued
    forced = cli("instances", "credential", iid, CREDENTIAL, "-o", str(chosen), "--force", token=token, umask=0)
    assert forced.returncode == 0, forced.stderr
    assert chosen.read_text() == secret and mode(chosen) == 0o600
    assert [p.name for p in elsewhere.iterdir()] == ["mine.txt"]  # no staged copy left behind

    # `-o -` prints it, and only it.
    printed = cli("instances", "credential", "kube", CREDENTIAL, "-o", "-", token=token)
    assert printed.returncode == 0 and printed.stdout == secret, printed.stderr

    # A name the app does not declare: said before anything is asked.
    unknown = cli("instances", "credential", "kube", "nope", token=token, cwd=here)
    assert unknown.returncode == 1 and f"declares no credential nope (it declares: {CREDENTIAL})" in unknown.stderr
    assert len(events(ops, iid, type="runtime_secret.issued")) == issued + 2


def test_a_refusal_is_the_services_error(ops, cli, tmp_path):
    iid = make_instance(ops, "viewonly")[0]["id"]  # refused before its status matters
    target = tmp_path / "out.txt"
    denied = cli("instances", "credential", iid, CREDENTIAL, "-o", str(target), token=ops.w.tokens["project_member"])
    assert denied.returncode == 1 and "forbidden: permission apps.instance.credentials.issue" in denied.stderr
    assert "(HTTP 403, correlation_id " in denied.stderr and not target.exists()
