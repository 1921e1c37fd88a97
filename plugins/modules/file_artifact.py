#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: file_artifact
short_description: Place files by digest on the host, verified there, in one module run
version_added: "0.3.0"
description:
  - Makes each of O(files) present at C(<root>/sha256/<64 hex>), read-only (mode 0444); the place is computed from
    the file's digest alone. The control service's runs give each file of an app version this way (file artifacts).
  - New bytes come from O(files[].src) (a copy on the host; the action plugin transfers the controller's copy,
    O(files[].src) on the controller, only when the host lacks the file) or are downloaded from O(files[].url).
    They are written to a temporary file beside the final path while they are hashed, and renamed into place only
    when they hash to the digest. Otherwise the run fails naming the expected and the found digest, and nothing is
    left at the digest's path.
  - A file already at its path is hashed again on every run and left alone when it matches. One that no longer
    matches was altered on the host; it is removed and the run fails, naming both digests; the next run places a
    verified copy again.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  files:
    description: The files.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The file's name (for messages and the result).
        type: str
        required: true
      digest:
        description: C(sha256:<64 lowercase hex>).
        type: str
        required: true
      size:
        description: Its size in bytes, when known; a download of more is refused.
        type: int
      src:
        description: A copy of the bytes on the host (the action plugin sets it from the controller's copy).
        type: path
      url:
        description: Where to download the bytes when the host lacks the file (http or https).
        type: str
      path:
        description: Ignored; the path is computed from O(files[].digest) (the platform's entry carries it).
        type: str
      mount:
        description: Ignored (where a workload mounts the file; the platform's entry carries it).
        type: str
      media_type:
        description: Ignored (the platform's entry carries it).
        type: str
  root:
    description: Where the files live, under C(sha256/).
    type: path
    default: /var/lib/gpuaas/files
  validate_certs:
    description: Verify the TLS certificate of an https O(files[].url).
    type: bool
    default: true
  workload:
    description:
      - The OCI workload (the O(gpuaas.apps.oci_workload#module:name) of M(gpuaas.apps.oci_workload)) the files are
        placed for. Each file is added to the workload's record as soon as it is in place, so that it leaves the host
        with the workload (O(gpuaas.apps.oci_workload#module:state=absent)), even when the workload never started.
    type: str
notes:
  - A download follows no redirect; a redirect fails the run naming the URL (a source is allowlisted by its URL,
    and a redirect could send the host anywhere).
  - Supports check mode (it reports which files it would place; an altered copy still fails the run) and diff
    mode (the files present before and after).
extends_documentation_fragment:
  - gpuaas.apps.attributes.check_and_diff
"""

EXAMPLES = r"""
- name: Place the version's files, verified by digest on the host
  gpuaas.apps.file_artifact:
    files:
      - name: weights
        digest: sha256:4d4f0e0c9d2b0f7a5c1e3b6a8d9f0e1c2b3a4d5e6f708192a3b4c5d6e7f80912
        src: /var/lib/gpuaas/content/sha256/4d4f0e0c9d2b0f7a5c1e3b6a8d9f0e1c2b3a4d5e6f708192a3b4c5d6e7f80912
      - name: tokenizer
        digest: sha256:0c9d2b0f7a5c1e3b6a8d9f0e1c2b3a4d5e6f708192a3b4c5d6e7f809124d4f0e
        url: https://files.example.com/models/tokenizer.json
"""

RETURN = r"""
files:
  description: Each file, with its path on the host and whether this run placed it.
  returned: always
  type: list
  elements: dict
  sample: [{name: weights, digest: "sha256:4d4f...", path: /var/lib/gpuaas/files/sha256/4d4f..., placed: true,
            size: 1024}]
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.six.moves.urllib.error import HTTPError  # noqa: E402
from ansible.module_utils.urls import open_url  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.file_artifacts import (  # noqa: E402
    FileArtifactError,
    place,
)
from ansible_collections.gpuaas.apps.plugins.module_utils.oci import OciError  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.oci_steps import record_placed_files  # noqa: E402


def download(url, validate_certs):
    def chunks():
        # No redirect: the platform allowlisted this URL, not wherever it points.
        try:
            response = open_url(url, validate_certs=validate_certs, timeout=60, follow_redirects="none")
        except HTTPError as error:
            if 300 <= error.code < 400:
                where = error.headers.get("Location")
                raise FileArtifactError("%s answered a redirect (HTTP %d to %s): a file's source is not followed "
                                        "elsewhere; register the final URL" % (url, error.code, where)) from None
            raise
        try:
            yield from iter(lambda: response.read(1 << 20), b"")
        finally:
            response.close()
    return chunks


def main():
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True),
                digest=dict(type="str", required=True),
                size=dict(type="int"),
                src=dict(type="path"),
                url=dict(type="str"),
                # the rest of the platform's entry (catalog/files.py), not read here
                path=dict(type="str"), mount=dict(type="str"), media_type=dict(type="str"),
            )),
            root=dict(type="path", default="/var/lib/gpuaas/files"),
            validate_certs=dict(type="bool", default=True),
            workload=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    done, before, after = [], [], []
    try:
        for f in p["files"]:
            if f["url"] and not f["url"].startswith(("https://", "http://")):
                raise FileArtifactError("file %s: url must be http or https" % f["name"])
            fetch = download(f["url"], p["validate_certs"]) if f["url"] else None
            placed = place(f["digest"], src=f["src"], fetch=fetch, size=f["size"], root=p["root"],
                           check=module.check_mode)
            done.append(dict(placed, name=f["name"]))
            after.append(placed["path"])
            if not placed["placed"]:
                before.append(placed["path"])
            if p["workload"] and not module.check_mode:
                record_placed_files(p["workload"], [placed["path"]])
    except (FileArtifactError, OciError, IOError, OSError) as error:
        module.fail_json(msg="%s" % error, files=done)
    changed = any(f["changed"] for f in done)
    module.exit_json(changed=changed, files=[dict((k, v) for k, v in f.items() if k != "changed") for f in done],
                     diff=dict(before="\n".join(before) + ("\n" if before else ""),
                               after="\n".join(after) + ("\n" if after else "")))


if __name__ == "__main__":
    main()
