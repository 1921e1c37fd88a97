"""The pure logic of plugins/module_utils/oci.py: references, the trust policy, the unit, CDI, probes,
the workload's record."""

import base64
import builtins
import http.server
import json
import socket
import threading

import pytest
import yaml
from ansible_collections.gpuaas.apps.plugins.module_utils import oci

DIGEST = "sha256:" + "ab" * 32
REF = f"10.88.0.5:5000/apps/web@{DIGEST}"


# ---- references -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "registry", "repository"), [
    (REF, "10.88.0.5:5000", "apps/web"),
    (f"registry.example.com/team/sub/app@{DIGEST}", "registry.example.com", "team/sub/app"),
    (f"localhost/app@{DIGEST}", "localhost", "app"),
    (f"localhost:5000/a_b/c-d.e@{DIGEST}", "localhost:5000", "a_b/c-d.e"),
    (f"  {REF}\n", "10.88.0.5:5000", "apps/web"),
])
def test_a_digest_reference_is_parsed(text, registry, repository):
    ref = oci.parse_reference(text)
    assert (ref.registry, ref.repository, ref.digest) == (registry, repository, DIGEST)
    assert str(ref) == f"{registry}/{repository}@{DIGEST}"
    assert ref.name == f"{registry}/{repository}"
    assert ref == oci.parse_reference(str(ref))


@pytest.mark.parametrize(("text", "words"), [
    ("10.88.0.5:5000/apps/web:v1", "names a tag ('v1'); images are pulled by digest only"),
    ("10.88.0.5:5000/apps/web", "names no digest; images are pulled by digest only"),
    (f"10.88.0.5:5000/apps/web:v1@{DIGEST}", "carries a tag ('v1') next to its digest; give the digest only"),
    ("10.88.0.5:5000/apps/web@sha256:abc", "the digest must be sha256: followed by 64 lowercase hex digits"),
    (f"10.88.0.5:5000/apps/web@sha512:{'ab' * 64}", "the digest must be sha256:"),
    (f"10.88.0.5:5000/apps/web@{DIGEST.upper()}", "the digest must be sha256:"),
    (f"web@{DIGEST}", "names no registry"),
    (f"apps/web@{DIGEST}", "'apps' is not a host name with a dot or a port"),
    (f"10.88.0.5:5000/Apps/web@{DIGEST}", "repository 'Apps/web' may only hold lowercase letters"),
    (f"10.88.0.5:5000/apps//web@{DIGEST}", "may only hold lowercase letters"),
    ("", "no image given"),
])
def test_anything_but_a_digest_reference_is_refused_saying_why(text, words):
    with pytest.raises(oci.OciError) as refused:
        oci.parse_reference(text)
    assert words in str(refused.value)


# ---- the trust policy -----------------------------------------------------------------------------
PEM = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"
DEBIAN_POLICY = {"default": [{"type": "insecureAcceptAnything"}],
                 "transports": {"docker-daemon": {"": [{"type": "insecureAcceptAnything"}]},
                                "docker": {"quay.io/other": [{"type": "reject"}]}}}


def test_a_signed_scope_requires_sigstore_by_the_key_for_the_images_own_repository():
    (req,) = oci.requirement(PEM)
    assert req["type"] == "sigstoreSigned"
    assert base64.b64decode(req["keyData"]).decode() == PEM
    assert req["signedIdentity"] == {"type": "matchRepository"}
    assert oci.requirement(None) == [{"type": "insecureAcceptAnything"}]
    with pytest.raises(oci.OciError, match="PEM block"):
        oci.requirement("not a key")


def test_setting_scopes_keeps_everything_else_and_removing_them_restores_the_policy():
    req = oci.requirement(PEM)
    new = oci.set_scopes(DEBIAN_POLICY, ["10.88.0.5:5000/apps/web", "10.88.0.5:5000/apps/api"], req)
    assert new["default"] == DEBIAN_POLICY["default"]
    assert new["transports"]["docker-daemon"] == DEBIAN_POLICY["transports"]["docker-daemon"]
    assert new["transports"]["docker"]["quay.io/other"] == [{"type": "reject"}]
    assert new["transports"]["docker"]["10.88.0.5:5000/apps/web"] == req
    assert DEBIAN_POLICY["transports"]["docker"] == {"quay.io/other": [{"type": "reject"}]}  # not mutated
    back = oci.remove_scopes(new, ["10.88.0.5:5000/apps/web", "10.88.0.5:5000/apps/api"])
    assert back == DEBIAN_POLICY


def test_a_policy_without_transports_gets_them_and_loses_them_again():
    plain = {"default": [{"type": "insecureAcceptAnything"}]}
    new = oci.set_scopes(plain, ["r.example.com/a"], oci.requirement(PEM))
    assert list(new["transports"]["docker"]) == ["r.example.com/a"]
    assert oci.remove_scopes(new, ["r.example.com/a"]) == plain
    # No policy at all: the one Debian ships.
    assert oci.set_scopes(None, ["r.example.com/a"], [{"type": "reject"}])["default"] == plain["default"]


def test_the_deciding_scope_is_the_most_specific_one():
    ref = oci.parse_reference(f"reg.example.com:5000/team/sub/app@{DIGEST}")
    policy = {"default": [], "transports": {"docker": {}}}
    docker = policy["transports"]["docker"]
    assert oci.scope_for(policy, ref) == "default"
    for scope in ["*.example.com", "reg.example.com:5000", "reg.example.com:5000/team",
                  "reg.example.com:5000/team/sub", "reg.example.com:5000/team/sub/app"]:
        docker[scope] = []
        assert oci.scope_for(policy, ref) == scope


@pytest.mark.parametrize("scope", ["r.example.com", "r.example.com:5000", "10.0.0.1:5000/a/b", "localhost/x"])
def test_scopes_are_registries_or_repositories(scope):
    assert oci.check_scope(scope) == scope


@pytest.mark.parametrize("scope", [f"r.example.com/a@{DIGEST}", "r.example.com/A", "r example.com", "r.example.com/a/"])
def test_anything_else_is_not_a_scope(scope):
    with pytest.raises(oci.OciError, match="is not a registry or repository scope"):
        oci.check_scope(scope)


def test_the_registries_d_drop_in_is_yaml_and_records_its_scopes():
    text = oci.registries_d_text(["b.example.com/x", "a.example.com/y"], sigstore=True)
    assert text.startswith("# Managed by gpuaas.apps")
    assert yaml.safe_load(text) == {"docker": {"a.example.com/y": {"use-sigstore-attachments": True},
                                               "b.example.com/x": {"use-sigstore-attachments": True}}}
    assert oci.registries_d_scopes(text) == ["a.example.com/y", "b.example.com/x"]
    assert oci.registries_d_scopes("") == []
    with pytest.raises(oci.OciError, match="not a drop-in this collection wrote"):
        oci.registries_d_scopes("docker:\n  a: {}\n")


def test_insecure_registries_are_toml_registry_entries():
    text = oci.insecure_registries_text(["10.88.0.5:5000", "r.example.com"])
    assert '[[registry]]\nlocation = "10.88.0.5:5000"\ninsecure = true' in text
    assert text.count("[[registry]]") == 2
    with pytest.raises(oci.OciError):
        oci.insecure_registries_text(['evil"]\n[x'])


def test_trust_paths_are_named_after_the_workload():
    assert oci.trust_paths("web") == ("/etc/containers/registries.d/gpuaas-web.yaml",
                                      "/etc/containers/registries.conf.d/gpuaas-web.conf")


# ---- the unit -------------------------------------------------------------------------------------
def spec(**changes):
    base = dict(name="web", image=REF, command=[], network="bridge", ports=[], volumes=[], cpus=None, memory=None,
                cgroups=True, restart="on-failure", restart_sec=5, stop_timeout=10, devices=[],
                env_file="/etc/gpuaas-oci/web.env")
    return base | changes


def test_run_arguments_name_the_container_its_environment_network_and_image_last():
    args = oci.run_arguments(spec(command=["--port", "80"]))
    assert args[:8] == ["--name", "gpuaas-oci-web", "--label", "io.gpuaas.oci.service=web", "--env-file",
                        "/etc/gpuaas-oci/web.env", "--network", "bridge"]
    assert args[-3:] == [REF, "--port", "80"]


def test_bridge_publishes_ports_and_host_networking_does_not():
    ports = oci.normalize_ports([{"container_port": 80, "host_port": 8080},
                                 {"container_port": 53, "protocol": "udp", "host_ip": "127.0.0.1"}])
    bridge = oci.run_arguments(spec(ports=ports))
    assert bridge[8:10] == ["--publish", "127.0.0.1:53:53/udp"] and bridge[10:12] == ["--publish", "8080:80/tcp"]
    assert "--publish" not in oci.run_arguments(spec(network="host", ports=ports))


def test_limits_apply_only_where_containers_get_cgroups():
    with_cgroups = oci.run_arguments(spec(cpus=1.5, memory="512m"))
    assert with_cgroups[8:10] == ["--cpus", "1.5"] and with_cgroups[10:12] == ["--memory", "512m"]
    without = oci.run_arguments(spec(cpus=1.5, memory="512m", cgroups=False))
    assert "--cpus" not in without and "--memory" not in without
    assert "--cgroups=no-conmon" in oci.unit_text(spec())
    assert "--cgroups=disabled" in oci.unit_text(spec(cgroups=False))


def test_volumes_and_devices():
    volumes = oci.normalize_volumes([{"source": "/srv/data", "target": "/data", "read_only": True},
                                     {"source": "/srv/cache", "target": "/cache"}])
    args = oci.run_arguments(spec(volumes=volumes, devices=["nvidia.com/gpu=all", "/dev/fuse"]))
    assert args[8:16] == ["--volume", "/srv/data:/data:ro", "--volume", "/srv/cache:/cache", "--device",
                          "nvidia.com/gpu=all", "--device", "/dev/fuse"]


@pytest.mark.parametrize("volume", [{"source": "srv", "target": "/d"}, {"source": "/a:b", "target": "/d"},
                                    {"source": "/a", "target": "/d,ro"}, {"source": "/a/../etc", "target": "/d"},
                                    {"source": "/a", "target": "/d", "mode": "rw"}])
def test_bad_volumes_are_refused(volume):
    with pytest.raises(oci.OciError, match="volume"):
        oci.normalize_volumes([volume])


@pytest.mark.parametrize(("ports", "words"), [
    ([{"container_port": 0}], "from 1 to 65535"),
    ([{"container_port": "x"}], "must be numbers"),
    ([{"container_port": 80, "protocol": "sctp"}], "tcp or udp"),
    ([{"container_port": 80}, {"host_port": 80, "container_port": 81}], "host port 80/tcp is published twice"),
    ([{"container_port": 80, "host_ip": "a;b"}], "host_ip must be an IP address"),
    ([{"container_port": 80, "hostport": 1}], "unknown keys hostport"),
])
def test_bad_ports_are_refused(ports, words):
    with pytest.raises(oci.OciError, match=words):
        oci.normalize_ports(ports)


def test_the_unit_is_what_podman_generate_systemd_new_writes_but_never_pulls():
    unit = oci.unit_text(spec(), podman="/usr/bin/podman")
    for line in ["Type=notify", "NotifyAccess=all", "Environment=PODMAN_SYSTEMD_UNIT=%n",
                 "ExecStartPre=/bin/rm -f %t/%n.ctr-id", "Restart=on-failure", "WantedBy=multi-user.target",
                 "ExecStop=/usr/bin/podman stop --ignore -t 10 --cidfile=%t/%n.ctr-id",
                 "ExecStopPost=/usr/bin/podman rm -f --ignore -t 10 --cidfile=%t/%n.ctr-id"]:
        assert line in unit.splitlines(), line
    start = unit[unit.index("ExecStart=/usr/bin/podman run"):unit.index("ExecStop=")]
    for option in ["--cidfile=%t/%n.ctr-id", "--rm", "--sdnotify=conmon", "--replace", "--detach", "--pull=never"]:
        assert f"\t{option} \\\n" in start, option
    assert start.rstrip().endswith(f'"{REF}"')
    assert oci.unit_text(spec()) == oci.unit_text(spec()), "the same request must give the same text"


@pytest.mark.parametrize(("arg", "quoted"), [
    ("plain", '"plain"'),
    ("two words", '"two words"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("back\\slash", '"back\\\\slash"'),
    ("100%", '"100%%"'),
    ("$HOME", '"$$HOME"'),
    ("", '""'),
])
def test_systemd_quoting_escapes_quotes_backslashes_specifiers_and_variables(arg, quoted):
    assert oci.systemd_quote(arg) == quoted


def test_a_multi_line_argument_is_refused():
    with pytest.raises(oci.OciError, match="single line"):
        oci.systemd_quote("a\nb")


def test_the_environment_file_holds_literal_values_sorted():
    text = oci.env_file_text({"B": "two words", "A": "x=y", "C": True})
    assert text.splitlines()[1:] == ["A=x=y", "B=two words", "C=true"]
    with pytest.raises(oci.OciError, match="single line"):
        oci.env_file_text({"A": "a\nB=b"})
    with pytest.raises(oci.OciError, match="environment variable name '1A'"):
        oci.env_file_text({"1A": "x"})


@pytest.mark.parametrize("name", ["web", "a", "web-1.blue_2", "0" * 63])
def test_workload_names(name):
    assert oci.check_name(name) == name
    assert oci.unit_name(name) == f"gpuaas-oci-{name}.service" and oci.container_name(name) == f"gpuaas-oci-{name}"


@pytest.mark.parametrize("name", ["", "Web", "-web", "a/b", "a b", "0" * 64, "web\n"])
def test_bad_workload_names(name):
    with pytest.raises(oci.OciError, match="name"):
        oci.check_name(name)


@pytest.mark.parametrize("device", ["nvidia.com/gpu=all", "nvidia.com/gpu=0", "vendor.example/class=a:b", "/dev/fuse"])
def test_devices(device):
    assert oci.check_devices([device]) == [device]


@pytest.mark.parametrize("device", ["gpu", "/dev/../etc/shadow", "/etc/passwd", "nvidia.com/gpu"])
def test_bad_devices(device):
    with pytest.raises(oci.OciError, match="device"):
        oci.check_devices([device])


def test_memory_limits():
    assert oci.check_memory("512M") == "512m" and oci.check_memory(None) is None and oci.check_memory("") is None
    with pytest.raises(oci.OciError, match="memory"):
        oci.check_memory("1.5g")


# ---- CDI ------------------------------------------------------------------------------------------
# The layout `nvidia-ctk cdi generate` writes (shortened).
NVIDIA_CTK_SPEC = """\
---
cdiVersion: 0.5.0
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
devices:
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: "0"
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: all
kind: nvidia.com/gpu
"""
JSON_SPEC = json.dumps({"cdiVersion": "0.3.0", "kind": "vendor.example/fpga",
                        "devices": [{"name": "fpga0", "containerEdits": {}}]}, indent=2)


@pytest.mark.parametrize("with_yaml", [True, False], ids=["pyyaml", "no-pyyaml"])
def test_cdi_devices_are_read_with_or_without_pyyaml(monkeypatch, with_yaml):
    if not with_yaml:  # a host without python3-yaml: the line reader
        real_import = builtins.__import__

        def no_yaml(name, *args, **kwargs):
            if name == "yaml":
                raise ImportError("no yaml")
            return real_import(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", no_yaml)
    assert sorted(oci.cdi_devices_in(NVIDIA_CTK_SPEC)) == ["nvidia.com/gpu=0", "nvidia.com/gpu=all"]
    assert oci.cdi_devices_in(JSON_SPEC) == ["vendor.example/fpga=fpga0"]
    assert oci.cdi_devices_in("") == []


def test_cdi_devices_come_from_every_spec_directory(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "etc" / "nvidia.yaml").write_text(NVIDIA_CTK_SPEC)
    (tmp_path / "run" / "fpga.json").write_text(JSON_SPEC)
    (tmp_path / "run" / "notes.txt").write_text("kind: x/y")
    found = oci.cdi_devices([str(tmp_path / "etc"), str(tmp_path / "run"), str(tmp_path / "missing")])
    assert found == {"nvidia.com/gpu=0", "nvidia.com/gpu=all", "vendor.example/fpga=fpga0"}


def test_gpus_are_added_only_when_the_host_offers_them_and_none_is_named():
    offered = {"nvidia.com/gpu=all", "nvidia.com/gpu=0"}
    assert oci.resolve_devices([], "auto", offered) == ["nvidia.com/gpu=all"]
    assert oci.resolve_devices([], "auto", set()) == []
    assert oci.resolve_devices([], "none", offered) == []
    assert oci.resolve_devices(["nvidia.com/gpu=0"], "auto", offered) == ["nvidia.com/gpu=0"]
    assert oci.resolve_devices(["/dev/fuse"], "auto", offered) == ["/dev/fuse", "nvidia.com/gpu=all"]


# ---- probes ---------------------------------------------------------------------------------------
def test_probe_defaults_and_checks():
    assert oci.normalize_probe({}) == {"type": "none", "timeout": 2.0, "interval": 1.0, "deadline": 120.0}
    assert oci.normalize_probe({"type": "http", "port": "8080"}) == {
        "type": "http", "port": 8080, "host": "127.0.0.1", "path": "/", "status": [200, 399], "timeout": 2.0,
        "interval": 1.0, "deadline": 120.0}
    assert oci.normalize_probe({"type": "command", "command": ["true"], "deadline": 0})["deadline"] == 0.0


@pytest.mark.parametrize(("probe", "words"), [
    ({"type": "grpc"}, "probe type 'grpc'"),
    ({"type": "http"}, "needs a port"),
    ({"type": "tcp", "port": 70000}, "from 1 to 65535"),
    ({"type": "http", "port": 80, "path": "no-slash"}, "absolute URL path"),
    ({"type": "http", "port": 80, "status": [200]}, "[lowest, highest]"),
    ({"type": "command", "command": "true"}, "a list of strings"),
    ({"type": "command", "command": []}, "a list of strings"),
    ({"type": "none", "timeout": 0}, "timeout must be positive"),
    ({"type": "none", "deadline": "soon"}, "deadline must be a number"),
    ({"type": "none", "retries": 3}, "unknown keys retries"),
    ({"type": "tcp", "port": 80, "host": "a b"}, "host name or IP address"),
])
def test_bad_probes_are_refused(probe, words):
    with pytest.raises(oci.OciError) as refused:
        oci.normalize_probe(probe)
    assert words in str(refused.value)


@pytest.fixture
def http_server():
    """A real HTTP server on loopback answering /ok with 200, /missing with 404."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200 if self.path == "/ok" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_http_and_tcp_checks_against_a_real_server(http_server):
    port = http_server
    ok, detail = oci.http_check("127.0.0.1", port, "/ok", [200, 399], 2)
    assert ok and detail == f"GET http://127.0.0.1:{port}/ok: HTTP 200"
    ok, detail = oci.http_check("127.0.0.1", port, "/missing", [200, 399], 2)
    assert not ok and detail.endswith("HTTP 404 (expected 200-399)")
    assert oci.http_check("127.0.0.1", port, "/missing", [200, 404], 2)[0]
    assert oci.tcp_check("127.0.0.1", port, 2)[0]


def test_checks_of_a_closed_port_fail_with_the_reason():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    ok, detail = oci.http_check("127.0.0.1", closed, "/", [200, 399], 1)
    assert not ok and detail == f"GET http://127.0.0.1:{closed}/: connection refused"
    ok, detail = oci.tcp_check("127.0.0.1", closed, 1)
    assert not ok and detail == f"tcp 127.0.0.1:{closed}: connection refused"


# ---- health: one look, and the judgement the platform reads back -----------------------------------
HTTP_PROBE = oci.normalize_probe({"type": "http", "port": 1, "path": "/ok"})
RUNNING = {"State": {"Status": "running", "StartedAt": "2026-11-25T17:24:49Z"}, "ImageName": REF,
           "ImageDigest": DIGEST}


def test_a_look_gives_the_http_status_or_why_none_came(http_server):
    answer = oci.look(None, HTTP_PROBE | {"port": http_server}, "gpuaas-oci-web", RUNNING)
    assert answer == {"ok": True, "target": f"GET http://127.0.0.1:{http_server}/ok", "answer": "HTTP 200", "code": 200}
    missing = oci.look(None, HTTP_PROBE | {"port": http_server, "path": "/gone"}, "gpuaas-oci-web", RUNNING)
    assert (missing["ok"], missing["answer"], missing["code"]) == (False, "HTTP 404 (expected 200-399)", 404)
    # An http probe asks even when the container does not run: what answers on its port is worth knowing.
    assert oci.look(None, HTTP_PROBE | {"port": http_server}, "gpuaas-oci-web", None)["code"] == 200


def test_a_look_at_a_workload_that_does_not_answer_ends_at_the_timeout_given():
    with socket.socket() as deaf:  # listens, never accepts: the connection opens, no answer comes
        deaf.bind(("127.0.0.1", 0))
        deaf.listen(1)
        port = deaf.getsockname()[1]
        probe = oci.normalize_probe({"type": "http", "port": port, "timeout": 30})
        answer = oci.look(None, probe, "gpuaas-oci-web", RUNNING, timeout=0.3)
    assert (answer["ok"], answer["answer"], answer["code"]) == (False, "timed out after 0.3s", None)


def test_a_command_or_none_probe_of_a_container_that_does_not_run_is_not_run():
    command = oci.normalize_probe({"type": "command", "command": ["true"]})
    paused = {"State": {"Status": "paused"}}
    expected = {"ok": False, "target": "container gpuaas-oci-web", "answer": "not probed: the container is paused",
                "code": None}
    assert oci.look(None, command, "gpuaas-oci-web", paused) == expected
    assert oci.look(None, oci.normalize_probe(None), "gpuaas-oci-web", RUNNING)["ok"]
    assert oci.look(None, oci.normalize_probe(None), "gpuaas-oci-web", None)["answer"] == \
        "not probed: the container is absent"


@pytest.mark.parametrize(("props", "words"), [
    ({"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "ExecMainStatus": "0"}, "active"),
    ({"ActiveState": "inactive", "SubState": "dead", "ExecMainStatus": "0"}, "inactive"),
    ({"ActiveState": "inactive", "SubState": "dead", "ExecMainStatus": "137"}, "inactive (exit code 137)"),
    ({"ActiveState": "failed", "SubState": "failed", "ExecMainStatus": "137"}, "failed (exit code 137)"),
    ({"ActiveState": "activating", "SubState": "auto-restart", "ExecMainStatus": "137"},
     "activating (auto-restart, exit code 137)"),
    ({"LoadState": "not-found", "ActiveState": "inactive"}, "not installed"),
    ({}, "unknown"),
])
def test_a_units_state_in_a_few_words(props, words):
    assert oci.unit_words(props) == words


RECORD = {"image": REF, "probe": {"type": "http", "port": 8080}}
ACTIVE = {"ActiveState": "active", "SubState": "running", "ExecMainStatus": "0", "NRestarts": "2"}
ANSWERED = {"ok": True, "target": "GET http://127.0.0.1:8080/", "answer": "HTTP 200", "code": 200}
REFUSED = {"ok": False, "target": "GET http://127.0.0.1:8080/", "answer": "connection refused", "code": None}
OTHER = "sha256:" + "cd" * 32


def test_a_healthy_replica_says_what_it_runs_and_what_its_probe_answered():
    healthy, details = oci.replica_health("web", RECORD, ACTIVE, RUNNING, ANSWERED)
    assert healthy and details == {
        "workload": "web", "unit": "active", "restarts": 2, "container": "running", "exit_code": None,
        "started_at": "2026-11-25T17:24:49Z", "image": REF, "running_digest": DIGEST, "pinned_digest": DIGEST,
        "digest_matches": True, "probe": "HTTP 200", "probe_target": "GET http://127.0.0.1:8080/", "probe_code": 200,
        "probe_ok": True, "reason": ""}
    assert len(details) <= oci.DETAIL_KEYS
    # The platform's pin, when given, is what the running digest is compared with; the health is the record's.
    healthy, details = oci.replica_health("web", RECORD, ACTIVE, RUNNING, ANSWERED, pinned=f"r.example.com/a@{OTHER}")
    assert healthy and (details["pinned_digest"], details["digest_matches"]) == (OTHER, False)


@pytest.mark.parametrize(("record", "props", "state", "answer", "reason"), [
    (None, {}, None, None, "the workload web is not deployed on this host (no /var/lib/gpuaas-oci/web.json)"),
    (RECORD, {"ActiveState": "inactive", "SubState": "dead", "ExecMainStatus": "137"}, None, REFUSED,
     "the unit gpuaas-oci-web.service is inactive (exit code 137)"),
    (RECORD, ACTIVE, None, REFUSED, "the container gpuaas-oci-web is absent"),
    (RECORD, ACTIVE, {"State": {"Status": "paused"}, "ImageDigest": DIGEST}, None,
     "the container gpuaas-oci-web is paused"),
    (RECORD, ACTIVE, {"State": {"Status": "exited", "ExitCode": 1}}, REFUSED,
     "the container gpuaas-oci-web is exited (exit code 1)"),
    (RECORD, ACTIVE, RUNNING | {"ImageDigest": OTHER}, ANSWERED,
     f"the container runs {OTHER}, not the image deployed here ({DIGEST})"),
    (RECORD, ACTIVE, RUNNING, REFUSED, "the probe got connection refused from GET http://127.0.0.1:8080/"),
])
def test_a_failed_replica_says_why_in_one_line(record, props, state, answer, reason):
    healthy, details = oci.replica_health("web", record, props, state, answer)
    assert not healthy and details["reason"] == reason


def test_details_are_scalars_short_enough_to_store():
    long_ref = f"r.example.com/{'a' * 240}@{DIGEST}"
    healthy, details = oci.replica_health("web", {"image": long_ref}, ACTIVE, RUNNING | {"ImageName": long_ref}, None)
    assert healthy and details["probe"] is None
    assert all(v is None or isinstance(v, (str, int, bool)) for v in details.values())
    assert max(len(v) for v in details.values() if isinstance(v, str)) == oci.DETAIL_CHARS


# ---- the record -----------------------------------------------------------------------------------
A, B, C, D = (f"r.example.com/app@sha256:{c * 64}" for c in "abcd")


def test_a_first_start_keeps_its_image_only():
    assert oci.plan_images({}, A, 1) == ([A], [], [])
    assert oci.plan_images({"images": [A]}, A, 1) == ([A], [], [])


def test_an_upgrade_keeps_the_image_it_replaced_for_a_rollback():
    images, previous, retiring = oci.plan_images({"image": A, "images": [A, B]}, B, 1)
    assert (images, previous, retiring) == ([A, B], [A], [])


def test_older_images_and_images_that_never_ran_retire():
    # A ran, then B; C was pulled but its start was refused; now D starts.
    record = {"image": B, "previous": [A], "images": [A, B, C, D]}
    assert oci.plan_images(record, D, 1) == ([B, D], [B], [A, C])
    assert oci.plan_images(record, D, 2) == ([A, B, D], [A, B], [C])
    assert oci.plan_images(record, D, 0) == ([D], [], [A, B, C])


def test_a_rollback_keeps_the_image_it_leaves():
    record = {"image": B, "previous": [A], "images": [A, B]}
    assert oci.plan_images(record, A, 1) == ([A, B], [B], [])


def test_remember_image_keeps_the_order_they_came_in():
    assert oci.remember_image([A, B], A) == [A, B]
    assert oci.remember_image([A], B) == [A, B]
    assert oci.remember_image(None, A) == [A]


def test_a_record_that_is_not_json_is_named(tmp_path):
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(oci.OciError, match="is not valid JSON"):
        oci.read_json(str(tmp_path / "bad.json"))


def test_the_auth_file_is_containers_auth_json():
    data = json.loads(oci.auth_file_text("10.88.0.5:5000", "puller", "s3cret:x"))
    assert base64.b64decode(data["auths"]["10.88.0.5:5000"]["auth"]).decode() == "puller:s3cret:x"
