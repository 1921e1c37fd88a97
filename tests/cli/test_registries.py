"""`gpuaas registries` (issue 29 item 3): a platform admin allowlists a host, a tenant admin registers a private
registry there with the password on stdin or in a file (never on the command line), rotates and removes it; no
output carries the password. Run as its own process against the served app."""

from __future__ import annotations

from .conftest import out, rows

HOST = "registry.acme.example:5000"
PASSWORD = "cli-pull-secret-8Hq2"


def test_registries_from_the_allowlist_to_removal(ops, cli, tmp_path):
    w = ops.w
    admin, tenant_admin = w.tokens["platform_admin"], w.tokens["tenant_admin"]
    refused = cli("registries", "add", "acme", "--host", HOST, "--username", "puller", "--password-stdin",
                  token=tenant_admin, stdin=PASSWORD + "\n")
    assert refused.returncode == 1 and "registry_not_allowlisted" in refused.stderr, refused.stderr
    out(cli("registries", "allowlist", "add", HOST, "--note", "acme's", token=admin))
    assert rows(cli("registries", "allowlist", "list", token=admin))[1][:2] == [HOST, "acme's"]
    assert "forbidden" in cli("registries", "allowlist", "list", token=tenant_admin).stderr

    # No terminal and no password source: refused before anything is sent.
    none = cli("registries", "add", "acme", "--host", HOST, "--username", "puller", token=tenant_admin, stdin="")
    assert none.returncode == 1 and "--password-stdin" in none.stderr, none.stderr
    added = cli("registries", "add", "acme", "--host", HOST, "--username", "puller", "--password-stdin",
                token=tenant_admin, stdin=PASSWORD + "\n")
    assert rows(added)[1][:4] == ["acme", HOST, "puller", "set"]
    secret_file = tmp_path / "password"
    secret_file.write_text("rotated-" + PASSWORD)
    rotated = cli("registries", "rotate", "acme", "--username", "puller2", "--password-file", str(secret_file),
                  token=tenant_admin)
    assert rows(rotated)[1][:3] == ["acme", HOST, "puller2"]
    shown = out(cli("registries", "show", "acme", "-o", "yaml", token=tenant_admin))
    assert "credentials_set: true" in shown and "username: puller2" in shown
    listed = cli("registries", "list", token=tenant_admin)
    assert rows(listed)[1][0] == "acme"
    assert "not found" in cli("registries", "list", "--tenant", w.ids["tenant_a"],
                              token=w.tokens["other_tenant_admin"]).stderr
    removed = cli("registries", "remove", "acme", token=tenant_admin)
    assert rows(cli("registries", "list", token=tenant_admin)) == [rows(listed)[0]]
    out(cli("registries", "allowlist", "remove", HOST, token=admin))
    for done in (refused, added, rotated, listed, removed):
        assert PASSWORD not in done.stdout + done.stderr
