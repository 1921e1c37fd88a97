"""Finding 6, the run's side: worker environment variables whose names escaped a denylist
(AWS_ACCESS_KEY_ID, SENTRY_DSN, a proxy URL with a password) landed in run artifacts that tenants can
download, and a worker killed with SIGKILL left the plaintext secret vars file on disk for ever."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import tarfile
import tempfile
from pathlib import Path

from operations.helpers import instance_secrets, make_instance, wait_for, wait_op
from operations.test_queue import run_processes, worker_process

SA = "service_account"
WORKER_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE7Q3PDKEY",
    "SENTRY_DSN": "https://d41d8cd98f00b204e980@errors.example.invalid/42",
    "HTTPS_PROXY": "http://proxyuser:pr0xy-pa55@proxy.example.invalid:3128",
    "SOME_VENDOR_API_KEY": "vendor-key-0a9b8c7d",
}


def test_the_workers_environment_never_reaches_a_run_or_its_artifacts(ops, monkeypatch):
    for name, value in WORKER_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    ops.start_worker()  # in this process: it sees the variables above
    instance, _ = make_instance(ops, "env")
    op = ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()
    assert wait_op(ops, op["id"])["status"] == "succeeded"
    blob = ops.w.call(SA, "GET", f"/v1/operations/{op['id']}/artifacts", 200).content
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        names = tar.getnames()
        text = "".join(tar.extractfile(m).read().decode(errors="replace") for m in tar.getmembers() if m.isfile())
    assert any(n.endswith("/command") for n in names)  # the file that records the run's environment
    assert "GPUAAS_OPERATION_ID" in text  # what the platform sets for the run is there
    for name, value in WORKER_CREDENTIALS.items():
        assert name not in text and value not in text, f"{name} reached the run's artifacts"


def files_containing(roots: list[Path], needle: str) -> list[Path]:
    found = []
    for root in roots:
        for path in root.rglob("*"):
            try:
                if path.is_file() and not path.is_symlink() and needle in path.read_text(errors="replace"):
                    found.append(path)
            except OSError:
                continue
    return found


def temp_dirs() -> set[Path]:
    return {p for p in Path(tempfile.gettempdir()).iterdir() if p.name.startswith("gpuaas-") and p.is_dir()}


def test_no_file_holding_a_secret_survives_a_killed_worker(ops, tmp_path):
    # The directories of the temp dir that were there before the worker started belong to other tests and
    # processes (on a machine that ran the suite, hundreds, gigabytes: reading them took most of this test's
    # time); what the worker and its run leave is in those made since, and in the state dir.
    before = temp_dirs()
    instance, marker = make_instance(ops, "killed")
    (marker / "slow").touch()
    doomed = worker_process(ops, tmp_path / "worker.log", "doomed")
    try:
        op = ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()
        wait_for(lambda: (marker / "munge.key").exists(), 60, what="the run to use its secret")
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
    finally:
        doomed.kill()
        for pid in run_processes(op["id"]):  # the host died with the worker: its orphaned run goes too
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    secret = instance_secrets(ops, instance["id"])["munge_key"]
    (marker / "munge.key").unlink()  # the playbook's own copy, on the "host"
    made = temp_dirs() - before
    assert any(p.name.startswith("gpuaas-secrets-") for p in made), "the run's secrets directory is not among them"
    assert files_containing([ops.settings.state_dir, *made], secret) == []
    (marker / "slow").unlink()
    ops.start_worker()
    assert wait_op(ops, op["id"], timeout=60)["status"] == "succeeded"  # and the retry still gets the secret
