"""`gpuaas artifacts upload-file` (issue 29 item 4): a publisher's file uploaded to the content store by its digest
and registered as a file artifact of the app, run as its own process against the served app."""

from __future__ import annotations

import hashlib

from operations.helpers import TEST_APP

from .conftest import out


def test_a_file_is_uploaded_by_digest_and_registered_as_a_file_artifact(ops, cli, tmp_path):
    w = ops.w
    data = b"weights of a small model\n" * 1000
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = tmp_path / "weights.bin"
    path.write_bytes(data)
    token = w.tokens["platform_admin"]
    printed = out(cli("artifacts", "upload-file", str(path), "--app", TEST_APP, "--media-type",
                      "application/octet-stream", token=token))
    assert printed.startswith(f"{TEST_APP} weights.bin@{digest}: draft, artifact "), printed
    assert f"({len(data)} bytes)" in printed
    artifacts = w.call("platform_admin", "GET", f"/v1/catalog/apps/{TEST_APP}/artifacts", 200).json()["items"]
    (artifact,) = [a for a in artifacts if a["kind"] == "file"]
    assert (artifact["digest"], artifact["size"], artifact["source"]) == (digest, len(data), None)
    stored = w.call("platform_admin", "HEAD", f"/v1/content/{digest}", 200)
    assert stored.headers["Content-Length"] == str(len(data))
    # A source outside the operator's allowlist (empty by default) is refused with its code.
    refused = cli("artifacts", "upload-file", str(path), "--app", TEST_APP, "--name", "remote",
                  "--source", "https://files.example.com/models/weights.bin", token=token)
    assert refused.returncode == 1 and "file_source_not_allowed" in refused.stderr + refused.stdout, refused.stderr
