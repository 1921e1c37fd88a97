"""The platform's and a tenant's verbs of issue 27 (item 1), as a platform admin and then as the project admin it
makes, against the service over real HTTP: tenants, projects, users, role bindings, tokens, service accounts,
allocations, entitlements, policy overlays, roles, the audit log, break-glass instance access, the catalog's
versions and artifacts, the registry's configuration. Names, e-mails and id prefixes name objects; a list with
nothing in it prints its headers and exits 0; -o json and -o yaml print the API's objects."""

from __future__ import annotations

import json

import yaml
from operations.helpers import TEST_APP

from .conftest import out, rows

PA = "platform_admin"




def fields(done) -> dict[str, str]:
    """A read of one object: `key  value` lines."""
    return dict(line.split(None, 1) if " " in line else (line, "") for line in out(done).splitlines())


def test_a_platform_admin_sets_up_a_tenant_and_its_project_admin_automates_it(ops, cli):
    w = ops.w
    pa = w.tokens[PA]
    me = out(cli("whoami", token=pa)).splitlines()
    assert me[0].startswith("user root@platform.example ") and me[5].split()[:2] == ["platform_admin", "platform"]

    # Tenant, project, user, role: names all the way.
    assert rows(cli("tenants", "create", "acme", "--display-name", "Acme", token=pa))[1][:2] == ["acme", "Acme"]
    assert "acme" in [r[0] for r in rows(cli("tenants", "list", token=pa))[1:]]
    acme = yaml.safe_load(out(cli("tenants", "show", "acme", "-o", "yaml", token=pa)))
    assert acme["display_name"] == "Acme"
    assert rows(cli("projects", "create", "vision", "--tenant", "acme", token=pa))[1][0] == "vision"
    assert [r[0] for r in rows(cli("projects", "list", "--tenant", acme["id"][:8], token=pa))[1:]] == ["vision"]
    vision = fields(cli("projects", "show", "vision", token=pa))
    assert vision["tenant_id"] == acme["id"]
    assert rows(cli("users", "create", "ada@acme.example", "--tenant", "acme", token=pa))[1][0] == "ada@acme.example"
    ada = fields(cli("users", "show", "ada@acme.example", token=pa))  # every tenant's users, for a platform admin
    binding = rows(cli("bindings", "create", "project_admin", "--user", "ada@acme.example", "--project", "vision",
                       token=pa))[1]
    assert binding[:4] == ["project_admin", "project", "user", ada["id"]]
    assert [r[-1] for r in rows(cli("bindings", "list", "--project", "vision", token=pa))[1:]] == [binding[-1]]

    # A token for her: the secret alone on stdout, once.
    issued = cli("tokens", "create", "laptop", "--user", "ada@acme.example", token=pa)
    ada_token = out(issued).strip()
    assert ada_token.startswith("gpa_") and "shown only once" in issued.stderr and ada_token not in issued.stderr
    assert out(cli("whoami", token=ada_token)).startswith(f"user ada@acme.example  {ada['id']}\n")
    assert [r[0] for r in rows(cli("tokens", "list", token=ada_token))[1:]] == ["laptop"]

    # As her: a service account in her one project (the default), its token, revoked by name; then disabled.
    sa = rows(cli("service-accounts", "create", "ci", "--role", "sa_operator", "--description", "pipeline",
                  token=ada_token))[1]
    assert sa[:3] == ["ci", "pipeline", "no"]
    assert [r[0] for r in rows(cli("service-accounts", "list", token=ada_token))[1:]] == ["ci"]
    assert fields(cli("service-accounts", "show", "vision/ci", token=ada_token))["id"] == sa[-1]
    ci_token = out(cli("tokens", "create", "deploy", "--service-account", "ci", "--expires-in-days", "7",
                       token=ada_token)).strip()
    assert json.loads(out(cli("whoami", "-o", "json", token=ci_token)))["name"] == "ci"
    listed = json.loads(out(cli("tokens", "list", "--service-account", sa[-1][:8], "-o", "json", token=ada_token)))
    assert [t["name"] for t in listed] == ["deploy"] and listed[0]["revoked_at"] is None
    revoked = json.loads(out(cli("tokens", "revoke", "deploy", "--service-account", "ci", "-o", "json",
                                 token=ada_token)))
    assert revoked["id"] == listed[0]["id"] and revoked["revoked_at"] is not None
    assert cli("whoami", token=ci_token).returncode == 1
    assert rows(cli("service-accounts", "disable", "ci", token=ada_token))[1][:3] == ["ci", "pipeline", "yes"]
    # An empty list: headers only, exit 0.
    assert out(cli("policies", "list", "--project", "vision", token=ada_token)).split() == [
        "SCOPE", "KIND", "TENANT", "PROJECT", "DIMENSION", "EFFECT", "VALUES", "CREATED", "ID"]
    assert out(cli("entitlements", "list", "--project", "vision", token=pa)).split() == ["APP", "PROJECT", "CREATED",
                                                                                           "ID"]

    # Capacity and what the project may use.
    alloc = rows(cli("allocations", "create", "pool", "--project", "vision", "--shape", "baremetal", "--gpus", "8",
                     "--region", "eu-west-1", "--sku", "h100-8x", "--host", "n1=10.9.0.1", "--host", "n2=10.9.0.2",
                     token=pa))
    assert alloc[0][:6] == ["NAME", "CAPACITY", "SHAPE", "SKU", "GPU", "COUNT"]
    assert alloc[1][:7] == ["pool", "baremetal", "h100-8x", "8", "eu-west-1", "n1,", "n2"]
    assert [r[0] for r in rows(cli("allocations", "list", token=ada_token))[1:]] == ["pool"]
    assert json.loads(out(cli("allocations", "show", "pool", "-o", "json", token=ada_token)))["hosts"][1] == {
        "name": "n2", "address": "10.9.0.2", "ssh_user": "root", "ssh_port": 22}
    assert rows(cli("entitlements", "create", TEST_APP, "--project", "vision", token=pa))[1][0] == TEST_APP
    assert [r[0] for r in rows(cli("entitlements", "list", token=ada_token))[1:]] == [TEST_APP]
    overlay = rows(cli("policies", "create", "--scope", "project", "--project", "vision", "--dimension", "region",
                       "--effect", "deny", "eu-west-1", "us-east-1", token=ada_token))[1]
    effective = rows(cli("policies", "effective", token=ada_token))
    assert effective[0] == ["DIMENSION", "ALLOW", "DENY"] and ["region", "-", "eu-west-1,", "us-east-1"] in effective
    assert [r[-1] for r in rows(cli("policies", "list", "--project", "vision", token=ada_token))[1:]] == [overlay[-1]]
    assert out(cli("policies", "delete", overlay[-1][:8], token=ada_token)) == f"deleted policy overlay " \
                                                                              f"{overlay[-1][:8]}\n"
    assert out(cli("entitlements", "delete", TEST_APP, "--project", "vision", token=pa)) == \
        f"deleted the entitlement to {TEST_APP}\n"
    released = json.loads(out(cli("allocations", "release", "pool", "--project", "vision", "-o", "json", token=pa)))
    assert released["released_at"] is not None
    assert out(cli("tokens", "revoke-all", "--user", "ada@acme.example", token=pa)) == \
        "revoked 1 token(s) of ada@acme.example\n"
    assert out(cli("bindings", "delete", binding[-1][:8], token=pa)) == f"deleted role binding {binding[-1][:8]}\n"
    assert len(rows(cli("bindings", "list", "--project", "vision", token=pa))) == 1  # its headers alone

    # Roles, the audit log (newest first), and the platform's break-glass reads, each with its reason.
    assert {"platform_admin", "sa_operator"} <= {r[0] for r in rows(cli("roles", "list", token=pa))[1:]}
    created = json.loads(out(cli("audit", "list", "--action", "iam.tenant.create", "-o", "json", token=pa)))
    assert acme["id"] in [e["target_id"] for e in created]
    assert len(json.loads(out(cli("audit", "list", "-n", "2", "-o", "json", token=pa)))) == 2
    glass = ("--reason", "incident 7: stuck start")
    assert "slurm-a1" in [r[0] for r in rows(cli("admin", "instances", "list", "--tenant", "tenant-a", *glass,
                                                 token=pa))[1:]]
    assert fields(cli("admin", "instances", "show", "slurm-a1", *glass, token=pa))["status"] == "created"
    moved = rows(cli("admin", "instances", "transition", w.ids["instance_a1"][:8], "--to", "failed", *glass,
                     token=pa))
    assert moved[1][:2] == ["slurm-a1", "failed"]
    refused = cli("admin", "instances", "list", token=pa)
    assert refused.returncode == 2 and "--reason" in refused.stderr

    # The catalog: an app, its versions and artifacts, and the registry's configuration.
    assert fields(cli("apps", "show", "slurm", token=pa))["runtime_backend"] == "slurm"
    versions = rows(cli("versions", "list", "slurm", token=pa))
    assert versions[0][:3] == ["APP", "VERSION", "STATUS"] and versions[1][:3] == ["slurm", "1.0.0", "active"]
    shown = json.loads(out(cli("versions", "show", "slurm", "1.0.0", "-o", "json", token=pa)))
    assert rows(cli("versions", "transition", "slurm", "1.0.0", "--to", "deprecated", "--reason", "replaced",
                    token=pa))[1][:3] == ["slurm", "1.0.0", "deprecated"]
    artifact = fields(cli("artifacts", "show", shown["artifact_id"][:8], token=pa))
    assert artifact["id"] == shown["artifact_id"]
    assert [r[-1] for r in rows(cli("artifacts", "list", "slurm", token=pa))[1:]] == [shown["artifact_id"]]
    assert rows(cli("artifacts", "transition", shown["artifact_id"][:8], "--to", "deprecated", "--reason", "replaced",
                    token=pa))[1][3] == "deprecated"
    registry = yaml.safe_load(out(cli("registry", "certificate", "-o", "yaml", token=pa)))
    assert registry["rootcertbundle"].startswith("-----BEGIN CERTIFICATE-----")
