"""`gpuaas apps publish` (issue 29 item 1): a tenant's publisher publishes a collection build as its tenant's
private app with its own token, run as its own process against the served app; another tenant does not see it,
the platform catalog is not the tenant publisher's, and `--private` needs a token of a tenant."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import yaml
from gpuaas_api.catalog.register import build
from operations.helpers import OPSAPP

from .conftest import out

PRIVATE = "tenant-a-opsapp"  # tenant A is named tenant-a: its private apps' slugs start with it


def private_build(tmp_path: Path) -> Path:
    """The test app's collection, built with its descriptor naming tenant A's private slug (a tarball: a directory
    is built anew, as another build, by each publish)."""
    source = tmp_path / "opsapp"
    shutil.copytree(OPSAPP, source)
    descriptor = source / "adapters" / "opsapp.yml"
    data = yaml.safe_load(descriptor.read_text())
    data["app"]["slug"] = PRIVATE
    descriptor.write_text(yaml.safe_dump(data))
    (tmp_path / "build").mkdir()
    return build(source, tmp_path / "build")


def test_a_tenant_publisher_publishes_a_private_app_with_its_own_token(ops, cli, app, tmp_path):
    w = ops.w
    # Publishing, not the gates (tests/cli/test_promote.py, test_smoke.py): an operator who names none, so that
    # --activate moves the build and its version by hand.
    app.state.settings = dataclasses.replace(app.state.settings, promotion_staging_checks=(),
                                             promotion_canary_smoke=False, promotion_canary_instances=0)
    user = w.call("tenant_admin", "POST", f"/v1/tenants/{w.ids['tenant_a']}/users", 201,
                  json={"email": "dev@tenant-a.example.com"}).json()
    w.call("tenant_admin", "POST", "/v1/role-bindings", 201, json={
        "principal_kind": "user", "principal_id": user["id"], "role": "catalog_publisher",
        "tenant_id": w.ids["tenant_a"]})
    token = w.call("tenant_admin", "POST", f"/v1/users/{user['id']}/tokens", 201, json={"name": "cli"}).json()["token"]
    source = private_build(tmp_path)

    # The platform catalog is not a tenant publisher's: the refusal names the call and its answer.
    refused = cli("apps", "publish", str(source), token=token)
    assert refused.returncode == 1 and "POST /v1/catalog/apps -> 403" in refused.stderr, refused.stderr
    # A platform admin's token has no tenant to publish privately to.
    none = cli("apps", "publish", str(source), "--private", token=w.tokens["platform_admin"])
    assert none.returncode == 1 and "belongs to none" in none.stderr, none.stderr

    published = out(cli("apps", "publish", str(source), "--private", "--activate", token=token))
    assert published.startswith(f"{PRIVATE} 1.0.0: active, artifact "), published
    again = out(cli("apps", "publish", str(source), "--private", "--activate", token=token))
    assert again == published  # the same build again changes nothing
    app = w.call("tenant_admin", "GET", f"/v1/catalog/apps/{PRIVATE}", 200).json()
    assert app["tenant_id"] == w.ids["tenant_a"]
    elsewhere = cli("apps", "publish", str(source), token=token)
    assert elsewhere.returncode == 1 and "is in your tenant's private catalog" in elsewhere.stderr, elsewhere.stderr

    # Inside tenant A it is in the catalog; tenant B sees no such app.
    assert PRIVATE in out(cli("apps", "list", token=w.tokens["project_member"]))
    assert PRIVATE not in out(cli("apps", "list", token=w.tokens["other_tenant_admin"]))
    shown = cli("apps", "show", PRIVATE, token=w.tokens["other_tenant_admin"])
    assert shown.returncode == 1 and "not found" in shown.stderr, shown.stderr
    # Its name stays its own: the same build is not published into the platform catalog under it.
    moved = cli("apps", "publish", str(source), token=w.tokens["platform_admin"])
    assert moved.returncode == 1, moved.stdout
