"""`gpuaas login` / `logout` and the read commands (`apps list`, `instances list|show`, `members list`)
against the control service over real HTTP: what each prints, in text and as JSON, and the error
envelope as one line with a non-zero status."""

from __future__ import annotations

import json
import re
import stat
import subprocess
import tomllib

from operations.helpers import TEST_APP, make_instance

SA = "service_account"
ENVELOPE_LINE = re.compile(r"^gpuaas: (\w+): (.+) \(HTTP (\d{3}), correlation_id ([0-9a-f-]{36})\)$")


def error_line(done: subprocess.CompletedProcess) -> tuple[str, str, int, str]:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, (done.returncode, done.stderr)
    match = ENVELOPE_LINE.match(lines[0])
    assert match, lines[0]
    return match[1], match[2], int(match[3]), match[4]


def test_login_stores_the_token_0600_and_the_environment_overrides_it(ops, cli):
    token = ops.w.tokens[SA]
    # No environment at all: the file is the only source. umask 0 would leave a plain create world-readable.
    login = cli("login", "--url", cli.url, "--token-stdin", stdin=token + "\n", api=False, umask=0)
    assert login.returncode == 0, login.stderr
    assert login.stdout.strip() == (f"logged in to {cli.url} as service_account operator; token stored in "
                                    f"{cli.config_file} (mode 0600)")
    assert stat.S_IMODE(cli.config_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(cli.config_file.parent.stat().st_mode) == 0o700
    assert tomllib.loads(cli.config_file.read_text()) == {"url": cli.url, "token": token}
    assert token not in login.stdout + login.stderr

    listed = cli("instances", "list", api=False)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split() == ["NAME", "STATUS", "APP", "VERSION", "MEMBERS", "ID"]

    # GPUAAS_TOKEN wins over the file: a wrong one is refused with the service's envelope.
    code, message, status, _ = error_line(cli("instances", "list", token="not-a-token"))
    assert (code, status) == ("unauthenticated", 401), message

    # A token the service refuses is not stored; the one stored stays.
    refused = cli("login", "--url", cli.url, "--token-stdin", stdin="wrong-token\n")
    assert refused.returncode == 1 and refused.stderr.startswith(f"gpuaas login: {cli.url} refused the token: "
                                                                 "unauthenticated: "), refused.stderr
    assert tomllib.loads(cli.config_file.read_text())["token"] == token
    no_tty = cli("login", "--url", cli.url, stdin="")
    assert no_tty.returncode == 1 and "pass the token with --token-stdin" in no_tty.stderr

    # Widened by hand: the commands still work and say so.
    cli.config_file.chmod(0o644)
    warned = cli("apps", "list", api=False)
    assert warned.returncode == 0 and "others may read it; chmod 600 it" in warned.stderr

    out = cli("logout", api=False)
    assert out.returncode == 0
    assert out.stdout.strip() == f"logged out of {cli.url}: token removed from {cli.config_file}"
    assert tomllib.loads(cli.config_file.read_text()) == {"url": cli.url}
    assert stat.S_IMODE(cli.config_file.stat().st_mode) == 0o600
    gone = cli("instances", "list", api=False)
    assert gone.returncode == 1 and gone.stderr.strip() == f"gpuaas: not logged in to {cli.url}: run `gpuaas login` " \
                                                           "or set GPUAAS_TOKEN"


def test_read_commands_print_tables_and_json(ops, cli):
    w = ops.w
    instance, _ = make_instance(ops, "reads", workers=2)
    token = w.tokens[SA]

    apps = cli("apps", "list", token=token)
    assert apps.returncode == 0, apps.stderr
    header, *rows = apps.stdout.splitlines()
    assert header.split() == ["APP", "NAME", "BACKEND", "VERSIONS"]
    listed = {row.split()[0]: row for row in rows}
    assert listed.keys() == {TEST_APP, "slurm"}
    assert listed[TEST_APP].split("  ")[-1] == "1.0.0 (active)" and "bare_metal" in listed[TEST_APP].split()
    as_json = json.loads(cli("apps", "list", "-o", "json", token=token).stdout)
    assert {a["slug"]: [v["version"] for v in a["versions"]] for a in as_json}[TEST_APP] == ["1.0.0"]

    # The service account's project, without naming it (GET /v1/me says which).
    listed = cli("instances", "list", token=token)
    assert listed.returncode == 0, listed.stderr
    table = [line.split() for line in listed.stdout.splitlines()]
    assert table[0] == ["NAME", "STATUS", "APP", "VERSION", "MEMBERS", "ID"]
    assert ["reads", "created", TEST_APP, "1.0.0", "controller", "1/1,", "worker", "2/2", instance["id"]] in table
    items = json.loads(cli("instances", "list", "--app", TEST_APP, "--status", "created", "-o", "json",
                           token=token).stdout)
    assert [i["name"] for i in items] == ["reads"] and items[0]["id"] == instance["id"]
    assert json.loads(cli("instances", "list", "--status", "running", "-o", "json", token=token).stdout) == []

    # A tenant admin reads every project of its tenant: the listing names the project of each.
    admin = cli("instances", "list", token=w.tokens["tenant_admin"])
    assert admin.returncode == 0, admin.stderr
    header, *lines = [line.split() for line in admin.stdout.splitlines()]
    assert header == ["NAME", "STATUS", "APP", "VERSION", "MEMBERS", "PROJECT", "ID"]
    assert {(line[0], line[-2]) for line in lines} >= {("reads", "project-a1"), ("slurm-a1", "project-a1"),
                                                      ("slurm-a2", "project-a2")}
    assert "slurm-a2" in cli("instances", "list", "--project", "project-a2", token=w.tokens["tenant_admin"]).stdout

    # show, by name and by id
    shown = cli("instances", "show", "reads", token=token)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"reads  {instance['id']}"
    assert "  status    created" in lines and f"  app       {TEST_APP} 1.0.0" in lines
    member_rows = [line.split() for line in lines[lines.index("") + 1:]]
    assert member_rows[0] == ["ROLE", "NODE", "HOST", "ADDRESS", "STATUS", "REASON", "ID"]
    assert sorted(row[0] for row in member_rows[1:]) == ["controller", "worker", "worker"]
    assert all(row[4] == "pending" for row in member_rows[1:])
    by_id = json.loads(cli("instances", "show", instance["id"], "-o", "json", token=token).stdout)
    assert by_id["name"] == "reads" and len(by_id["members"]) == 3 and by_id["operations"] == []
    members = json.loads(cli("members", "list", "reads", "-o", "json", token=token).stdout)
    assert sorted(m["id"] for m in members) == sorted(m["id"] for m in by_id["members"])

    # Errors: the envelope in one line (code, message, correlation id), exit status 1.
    code, message, status, cid = error_line(cli("instances", "show", w.ids["instance_a2"], token=token))
    assert (code, status, message) == ("not_found", 404, f"app_instance {w.ids['instance_a2']} not found "
                                                         f'{{"kind":"app_instance","id":"{w.ids["instance_a2"]}"}}')
    missing = cli("instances", "show", "nope", token=token)
    assert missing.returncode == 1 and missing.stderr.strip() == ("gpuaas: no instance named nope in the projects "
                                                                   "this token may read")
    as_json = cli("instances", "show", w.ids["instance_a2"], "-o", "json", token=token)
    envelope = json.loads(as_json.stderr)
    assert as_json.returncode == 1 and envelope["error"]["code"] == "not_found"
    assert re.fullmatch(r"[0-9a-f-]{36}", envelope["error"]["correlation_id"])
    assert cid != envelope["error"]["correlation_id"]
