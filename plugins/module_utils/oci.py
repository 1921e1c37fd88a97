# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""OCI workloads run by podman under systemd: the pure logic the gpuaas.apps oci_* modules share.

Written against podman 4.3 (Debian 12), which has no quadlet: a workload is a systemd unit that runs
``podman run --rm --replace`` (the shape ``podman generate systemd --new`` gives), written here so that
its text is a function of the request alone. What lives here:

* image references, pinned by digest only (``registry/repository@sha256:<64 hex>``);
* the containers trust policy (``/etc/containers/policy.json``): editing the scopes one workload
  manages and keeping everything else, the registries.d and registries.conf.d drop-ins;
* the unit, its ``podman run`` arguments and its environment file;
* CDI device discovery (GPUs);
* readiness and health probes (http, tcp, command);
* the record a workload keeps on its host (``/var/lib/gpuaas-oci/<name>.json``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import copy
import json
import os
import re
import signal
import socket
import subprocess
import time
import uuid

from urllib.error import HTTPError, URLError
from urllib.request import ProxyHandler, build_opener

POLICY_PATH = "/etc/containers/policy.json"
REGISTRIES_D = "/etc/containers/registries.d"
REGISTRIES_CONF_D = "/etc/containers/registries.conf.d"
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
UNIT_DIR = "/etc/systemd/system"
ENV_DIR = "/etc/gpuaas-oci"
RECORD_DIR = "/var/lib/gpuaas-oci"
# Everything this collection names on a host starts with this: units, containers, drop-in files.
PREFIX = "gpuaas-oci-"
TRUST_PREFIX = "gpuaas-"
# The CDI device a GPU host offers for all its GPUs (nvidia-ctk cdi generate names it so).
GPU_CDI_DEVICE = "nvidia.com/gpu=all"
HEADER = "# Managed by gpuaas.apps; edits are overwritten.\n"
PODMAN_MISSING = "podman is not installed on this host (install the Debian package podman)"

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
# Docker's reference grammar: a domain (with a dot or a port, or "localhost") then path components.
_DOMAIN_RE = re.compile(r"^(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*|\[[0-9a-fA-F:]+\])(?::[0-9]{1,5})?$")
_COMPONENT_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MEMORY_RE = re.compile(r"^[0-9]+[bkmg]?$", re.IGNORECASE)
_CDI_NAME_RE = re.compile(r"^[a-z0-9.-]+/[a-zA-Z0-9_.-]+=[a-zA-Z0-9_.:-]+$")


class OciError(Exception):
    """A request that cannot be done, or a command that failed; str() is a message fit for fail_json."""


# ---- image references -----------------------------------------------------------------------------
class Reference:
    """An image pinned by digest: ``registry/repository@sha256:<hex>``."""

    def __init__(self, registry, repository, digest):
        self.registry = registry
        self.repository = repository
        self.digest = digest

    @property
    def name(self):
        """registry/repository: the policy scope of the image's repository."""
        return "%s/%s" % (self.registry, self.repository)

    def __str__(self):
        return "%s@%s" % (self.name, self.digest)

    def __eq__(self, other):
        return isinstance(other, Reference) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))

    def __repr__(self):
        return "Reference(%r)" % str(self)


def parse_reference(text):
    """``registry/repository@sha256:<64 hex>`` -> Reference; anything else raises OciError saying why.

    A tag is refused, also next to a digest: what runs must be what was pinned, and a tag can move.
    The registry must be named: a short name would be resolved through the host's search registries.
    """
    ref = (text or "").strip()
    example = "registry.example.com/team/app@sha256:<64 hex digits>"
    if not ref:
        raise OciError("no image given; name it by digest: %s" % example)
    name, at, digest = ref.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = last.partition(":")[2] if ":" in last else ""
    if not at:
        what = "a tag (%r)" % tag if tag else "no digest"
        raise OciError("image %r names %s; images are pulled by digest only: %s" % (ref, what, example))
    if tag:
        raise OciError("image %r carries a tag (%r) next to its digest; give the digest only (%s)"
                       % (ref, tag, example))
    if not _DIGEST_RE.fullmatch(digest):
        raise OciError("image %r: the digest must be sha256: followed by 64 lowercase hex digits" % ref)
    if "/" not in name:
        raise OciError("image %r names no registry; give registry/repository@sha256:... (%s)" % (ref, example))
    registry, repository = name.split("/", 1)
    if not ("." in registry or ":" in registry or registry == "localhost") or not _DOMAIN_RE.fullmatch(registry):
        raise OciError("image %r names no registry (%r is not a host name with a dot or a port); give "
                       "registry/repository@sha256:... (%s)" % (ref, registry, example))
    if not all(_COMPONENT_RE.fullmatch(c) for c in repository.split("/")):
        raise OciError("image %r: repository %r may only hold lowercase letters, digits and separators (. _ -)"
                       % (ref, repository))
    return Reference(registry, repository, digest)


# ---- the containers trust policy ------------------------------------------------------------------
DEFAULT_POLICY = {"default": [{"type": "insecureAcceptAnything"}]}


def requirement(public_key=None):
    """The policy requirement for a scope: signed by ``public_key`` (PEM) for the image's own
    repository, or, without a key, anything (an explicit opt-out, never the default of a caller)."""
    if not public_key:
        return [{"type": "insecureAcceptAnything"}]
    key = public_key.strip() + "\n"
    if "-----BEGIN PUBLIC KEY-----" not in key:
        raise OciError("the public key must be a PEM block (-----BEGIN PUBLIC KEY----- ...)")
    return [{
        "type": "sigstoreSigned",
        "keyData": base64.b64encode(key.encode("utf-8")).decode("ascii"),
        "signedIdentity": {"type": "matchRepository"},
    }]


def check_scope(scope):
    """A docker transport scope: a registry (host[:port]) or registry/namespace[/repository]."""
    registry = scope.split("/", 1)[0]
    rest = scope.split("/", 1)[1] if "/" in scope else ""
    bad_path = rest and not all(_COMPONENT_RE.fullmatch(c) for c in rest.split("/"))
    if "@" in scope or not _DOMAIN_RE.fullmatch(registry) or bad_path:
        raise OciError("%r is not a registry or repository scope (registry[:port][/namespace/repository])" % scope)
    return scope


def docker_scopes(policy):
    return ((policy.get("transports") or {}).get("docker")) or {}


def set_scopes(policy, scopes, req):
    """A copy of ``policy`` with each of ``scopes`` (docker transport) requiring ``req``."""
    new = copy.deepcopy(policy) if policy else copy.deepcopy(DEFAULT_POLICY)
    docker = new.setdefault("transports", {}).setdefault("docker", {})
    for scope in scopes:
        docker[scope] = copy.deepcopy(req)
    return new


def remove_scopes(policy, scopes):
    """A copy of ``policy`` without ``scopes``; a docker transport (and transports) left empty is dropped
    too, as set_scopes() adds them."""
    new = copy.deepcopy(policy)
    docker = docker_scopes(new)
    for scope in scopes:
        docker.pop(scope, None)
    transports = new.get("transports")
    if transports is not None and "docker" in transports and not transports["docker"]:
        del transports["docker"]
    if transports == {}:
        del new["transports"]
    return new


def scope_for(policy, reference):
    """The docker scope of ``policy`` that decides about ``reference`` (containers-policy.json(5): the
    repository, then its parent namespaces, then the registry, then the wildcard domains), or
    'default'."""
    docker = docker_scopes(policy)
    parts = reference.repository.split("/")
    for i in range(len(parts), 0, -1):
        candidate = "%s/%s" % (reference.registry, "/".join(parts[:i]))
        if candidate in docker:
            return candidate
    if reference.registry in docker:
        return reference.registry
    host = reference.registry.split(":", 1)[0]
    labels = host.split(".")
    for i in range(1, len(labels)):
        wildcard = "*." + ".".join(labels[i:])
        if wildcard in docker:
            return wildcard
    return "default"


def registries_d_text(scopes, sigstore):
    """A registries.d drop-in (YAML; written as JSON, which YAML reads) for ``scopes``. It is also the
    record of the scopes a workload's trust manages in policy.json."""
    body = {"docker": dict((scope, {"use-sigstore-attachments": bool(sigstore)}) for scope in sorted(scopes))}
    return HEADER + json.dumps(body, indent=2, sort_keys=True) + "\n"


def registries_d_scopes(text):
    """The scopes a registries_d_text() file lists (comment lines skipped)."""
    body = "\n".join(line for line in (text or "").splitlines() if not line.lstrip().startswith("#"))
    if not body.strip():
        return []
    try:
        data = json.loads(body)
    except ValueError:
        raise OciError("not a drop-in this collection wrote (not JSON): %s" % body[:200]) from None
    return sorted((data.get("docker") or {}).keys())


def insecure_registries_text(registries):
    """A registries.conf.d drop-in that lets podman talk plain HTTP to ``registries`` (host:port)."""
    lines = [HEADER.rstrip("\n"), "# These registries are reached over plain HTTP (no TLS)."]
    for registry in sorted(registries):
        if not _DOMAIN_RE.fullmatch(registry):
            raise OciError("%r is not a registry (host or host:port)" % registry)
        lines += ["", "[[registry]]", 'location = "%s"' % registry, "insecure = true"]
    return "\n".join(lines) + "\n"


def trust_paths(name, registries_d=REGISTRIES_D, registries_conf_d=REGISTRIES_CONF_D):
    base = TRUST_PREFIX + name
    return os.path.join(registries_d, base + ".yaml"), os.path.join(registries_conf_d, base + ".conf")


# ---- the workload unit ----------------------------------------------------------------------------
def unit_name(name):
    return PREFIX + name + ".service"


def container_name(name):
    return PREFIX + name


def env_path(name, env_dir=ENV_DIR):
    return os.path.join(env_dir, name + ".env")


def record_path(name, record_dir=RECORD_DIR):
    return os.path.join(record_dir, name + ".json")


def check_name(name):
    if not NAME_RE.fullmatch(name or ""):
        raise OciError("name %r: 1 to 63 lowercase letters, digits, '.', '_' or '-', starting with a letter or "
                       "digit" % name)
    return name


def _single_line(what, value):
    if "\n" in value or "\r" in value or "\0" in value:
        raise OciError("%s must be a single line" % what)
    return value


def env_file_text(env):
    """``KEY=value`` lines for ``podman run --env-file`` (which takes a value literally, to the end of
    the line, so a value cannot hold a newline)."""
    lines = []
    for key in sorted(env or {}):
        if not _ENV_NAME_RE.fullmatch(key):
            raise OciError("environment variable name %r: letters, digits and '_', not starting with a digit" % key)
        value = env[key]
        if isinstance(value, bool):
            value = "true" if value else "false"
        lines.append("%s=%s" % (key, _single_line("environment variable %s" % key, str(value))))
    return HEADER + "".join(line + "\n" for line in lines)


def normalize_ports(ports):
    """[{host_port, container_port, protocol, host_ip}] checked, defaults filled, sorted."""
    out, seen = [], set()
    for port in ports or []:
        p = dict(port)
        unknown = set(p) - {"host_port", "container_port", "protocol", "host_ip"}
        if unknown:
            raise OciError("port %r: unknown keys %s" % (port, ", ".join(sorted(unknown))))
        try:
            host_port = int(p.get("host_port") or p.get("container_port"))
            container_port = int(p.get("container_port") or host_port)
        except (TypeError, ValueError):
            raise OciError("port %r: host_port and container_port must be numbers from 1 to 65535" % (port,)) from None
        protocol = p.get("protocol") or "tcp"
        host_ip = p.get("host_ip") or ""
        if not (0 < host_port < 65536 and 0 < container_port < 65536):
            raise OciError("port %r: host_port and container_port must be from 1 to 65535" % (port,))
        if protocol not in ("tcp", "udp"):
            raise OciError("port %r: protocol must be tcp or udp" % (port,))
        if host_ip and not re.fullmatch(r"[0-9a-fA-F.:]+", host_ip):
            raise OciError("port %r: host_ip must be an IP address" % (port,))
        key = (host_ip, host_port, protocol)
        if key in seen:
            raise OciError("host port %s/%s is published twice" % (host_port, protocol))
        seen.add(key)
        out.append({"host_ip": host_ip, "host_port": host_port, "container_port": container_port, "protocol": protocol})
    return sorted(out, key=lambda p: (p["host_port"], p["protocol"], p["host_ip"]))


def normalize_volumes(volumes):
    """[{source, target, read_only}]: bind mounts of absolute host paths."""
    out = []
    for volume in volumes or []:
        v = dict(volume)
        unknown = set(v) - {"source", "target", "read_only"}
        if unknown:
            raise OciError("volume %r: unknown keys %s" % (volume, ", ".join(sorted(unknown))))
        source, target = v.get("source") or "", v.get("target") or ""
        for what, path in (("source", source), ("target", target)):
            if not path.startswith("/") or re.search(r"[:,\s]", path) or "/../" in path + "/":
                raise OciError("volume %r: %s must be an absolute path without ':', ',', spaces or '..'"
                               % (volume, what))
        out.append({"source": source, "target": target, "read_only": bool(v.get("read_only", False))})
    return out


def check_devices(devices):
    for device in devices or []:
        if not (_CDI_NAME_RE.fullmatch(device) or re.fullmatch(r"/dev/[A-Za-z0-9_./-]+", device)) or "/../" in device:
            raise OciError("device %r: a CDI device (vendor.com/class=name) or a path under /dev" % device)
    return list(devices or [])


def check_memory(memory):
    if memory in (None, ""):
        return None
    memory = str(memory)
    if not _MEMORY_RE.fullmatch(memory):
        raise OciError("memory %r: a number of bytes with an optional unit b, k, m or g (e.g. 512m)" % memory)
    return memory.lower()


def systemd_quote(arg):
    """One argument of an ExecStart= line, as systemd splits it back (systemd.service(5), "Command
    lines"): always double-quoted, backslash and quote escaped, and % and $ doubled so that systemd
    expands neither specifiers nor variables in it."""
    arg = _single_line("an argument of the container's command line", arg)
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return '"%s"' % escaped


def run_arguments(spec):
    """The ``podman run`` options and arguments after the fixed ones the unit adds (see unit_text())."""
    args = ["--name", container_name(spec["name"]), "--label", "io.gpuaas.oci.service=" + spec["name"],
            "--env-file", spec["env_file"], "--network", spec["network"]]
    if spec["network"] != "host":
        for p in spec["ports"]:
            published = "%s:%s" % (p["host_port"], p["container_port"])
            if p["host_ip"]:
                published = "%s:%s" % (p["host_ip"], published)
            args += ["--publish", "%s/%s" % (published, p["protocol"])]
    for v in spec["volumes"]:
        args += ["--volume", "%s:%s%s" % (v["source"], v["target"], ":ro" if v["read_only"] else "")]
    for device in spec["devices"]:
        args += ["--device", device]
    if spec["cgroups"]:
        if spec.get("cpus"):
            args += ["--cpus", "%g" % float(spec["cpus"])]
        if spec.get("memory"):
            args += ["--memory", spec["memory"]]
    args.append(spec["image"])
    args += list(spec["command"])
    return args


def unit_text(spec, podman="/usr/bin/podman"):
    """The systemd unit of a workload: what ``podman generate systemd --new --name`` writes for such a
    container, with two differences that matter here: the image is never pulled by the unit
    (``--pull=never``: only a verified pull by digest brings it), and ``--cgroups`` follows the host
    (``no-conmon`` where systemd manages cgroups, ``disabled`` where containers get none)."""
    fixed = ["--cidfile=%t/%n.ctr-id", "--cgroups=%s" % ("no-conmon" if spec["cgroups"] else "disabled"),
             "--rm", "--sdnotify=conmon", "--replace", "--detach", "--pull=never"]
    run = " \\\n\t".join([podman + " run"] + fixed + [systemd_quote(a) for a in run_arguments(spec)])
    restart = spec.get("restart") or "on-failure"
    lines = [
        HEADER.rstrip("\n"),
        "[Unit]",
        "Description=gpuaas OCI workload %s" % spec["name"],
        "Wants=network-online.target",
        "After=network-online.target",
        "RequiresMountsFor=%t/containers",
        "",
        "[Service]",
        "Environment=PODMAN_SYSTEMD_UNIT=%n",
        "Restart=%s" % restart,
        "RestartSec=%d" % int(spec.get("restart_sec", 5)),
        "TimeoutStartSec=%d" % int(spec.get("start_timeout", 300)),
        "TimeoutStopSec=%d" % (int(spec.get("stop_timeout", 10)) + 60),
        "ExecStartPre=/bin/rm -f %t/%n.ctr-id",
        "ExecStart=" + run,
        "ExecStop=%s stop --ignore -t %d --cidfile=%%t/%%n.ctr-id" % (podman, int(spec.get("stop_timeout", 10))),
        "ExecStopPost=%s rm -f --ignore -t %d --cidfile=%%t/%%n.ctr-id" % (podman, int(spec.get("stop_timeout", 10))),
        "Type=notify",
        "NotifyAccess=all",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


# ---- CDI devices ----------------------------------------------------------------------------------
_CDI_KIND_LINE = re.compile(r"""^\s*"?kind"?\s*:\s*["']?([a-z0-9.-]+/[a-zA-Z0-9_.-]+)["']?\s*,?\s*$""")
_CDI_DEVICE_NAME = re.compile(r"""^\s*-?\s*"?name"?\s*:\s*["']?([a-zA-Z0-9_.:-]+)["']?\s*,?\s*$""")


def cdi_devices_in(text):
    """Fully qualified CDI device names (``kind=name``) a spec file declares. Read as YAML when PyYAML
    is there (JSON is YAML too), else line by line, which covers the layout nvidia-ctk writes."""
    try:
        import yaml  # not every host has it; the fallback below does not need it

        data = yaml.safe_load(text) or {}
        kind = data.get("kind")
        return ["%s=%s" % (kind, d.get("name")) for d in data.get("devices") or [] if kind and d.get("name")]
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 - an unreadable spec offers no device; podman would refuse it too
        return []
    kind, names = None, []
    for line in text.splitlines():
        if kind is None:
            match = _CDI_KIND_LINE.match(line)
            if match:
                kind = match.group(1)
                continue
        match = _CDI_DEVICE_NAME.match(line)
        if match and (line.lstrip().startswith("-") or line.startswith("  ")):
            names.append(match.group(1))
    return ["%s=%s" % (kind, n) for n in names] if kind else []


def cdi_devices(dirs=CDI_DIRS):
    """Every CDI device the host's spec directories declare."""
    found = set()
    for directory in dirs:
        try:
            entries = sorted(os.listdir(directory))
        except OSError:
            continue
        for entry in entries:
            if entry.endswith((".yaml", ".yml", ".json")):
                try:
                    with open(os.path.join(directory, entry)) as f:
                        found.update(cdi_devices_in(f.read()))
                except (IOError, OSError, UnicodeDecodeError):
                    continue
    return found


def resolve_devices(devices, gpus, available):
    """The devices a container gets: ``devices`` as given, plus all GPUs (``nvidia.com/gpu=all``) when
    ``gpus`` is 'auto' and the host has a CDI spec for them and ``devices`` names no GPU itself."""
    out = list(devices or [])
    names_gpu = any(d.startswith("nvidia.com/gpu=") for d in out)
    if gpus == "auto" and not names_gpu and GPU_CDI_DEVICE in available:
        out.append(GPU_CDI_DEVICE)
    return out


# ---- probes ---------------------------------------------------------------------------------------
PROBE_DEFAULTS = {"timeout": 2, "interval": 1, "deadline": 120}
PROBE_TYPES = ("http", "tcp", "command", "none")


def normalize_probe(probe):
    """A probe checked, with its defaults: {type, port, path, host, status, command, timeout, interval,
    deadline}. Type 'none' only asks that the container runs."""
    p = dict(probe or {})
    unknown = set(p) - {"type", "port", "path", "host", "status", "command", "timeout", "interval", "deadline"}
    if unknown:
        raise OciError("probe: unknown keys %s" % ", ".join(sorted(unknown)))
    kind = p.get("type") or "none"
    if kind not in PROBE_TYPES:
        raise OciError("probe type %r: one of %s" % (kind, ", ".join(PROBE_TYPES)))
    out = {"type": kind}
    for key, default in PROBE_DEFAULTS.items():
        try:
            out[key] = float(p.get(key, default)) if p.get(key) is not None else float(default)
        except (TypeError, ValueError):
            raise OciError("probe %s must be a number of seconds" % key) from None
        if out[key] < 0 or (key in ("timeout", "interval") and out[key] <= 0):
            raise OciError("probe %s must be positive" % key)
    if kind in ("http", "tcp"):
        try:
            out["port"] = int(p.get("port"))
        except (TypeError, ValueError):
            raise OciError("probe type %s needs a port (1-65535)" % kind) from None
        if not 0 < out["port"] < 65536:
            raise OciError("probe port must be from 1 to 65535")
        out["host"] = p.get("host") or "127.0.0.1"
        if not re.fullmatch(r"[A-Za-z0-9.:-]+", out["host"]):
            raise OciError("probe host %r: a host name or IP address" % out["host"])
    if kind == "http":
        out["path"] = p.get("path") or "/"
        if not re.fullmatch(r"/[\x21-\x7e]*", out["path"]):
            raise OciError("probe path %r: an absolute URL path without spaces" % out["path"])
        status = p.get("status") or [200, 399]
        if not (isinstance(status, (list, tuple)) and len(status) == 2 and all(isinstance(s, int) for s in status)):
            raise OciError("probe status must be [lowest, highest] accepted HTTP status")
        out["status"] = [int(status[0]), int(status[1])]
    if kind == "command":
        command = p.get("command")
        if isinstance(command, str) or not command or not all(isinstance(c, str) for c in command):
            raise OciError("probe type command needs command: a list of strings (argv, run in the container)")
        out["command"] = [_single_line("a probe command argument", c) for c in command]
    return out


def _error_words(error):
    """An OSError or URLError as a few lower-case words: 'connection refused', 'timed out'."""
    reason = getattr(error, "reason", error)
    if isinstance(reason, socket.timeout) or "timed out" in str(reason):
        return "timed out"
    words = getattr(reason, "strerror", None) or str(reason)
    return words[:1].lower() + words[1:]


def http_answer(host, port, path, status, timeout):
    """One GET: (ok, target, answer, code). The answer is 'HTTP <code>' or why none came ('connection
    refused', 'timed out'); code the HTTP status or None. Proxies from the environment are ignored (the
    probe targets the host)."""
    url = "http://%s:%d%s" % ("[%s]" % host if ":" in host else host, port, path)
    target = "GET %s" % url
    opener = build_opener(ProxyHandler({}))
    try:
        response = opener.open(url, timeout=timeout)
        code = response.getcode()
        response.close()
    except HTTPError as error:
        code = error.code
    except (URLError, socket.error, socket.timeout, ValueError) as error:
        return False, target, _error_words(error), None
    ok = status[0] <= code <= status[1]
    return ok, target, "HTTP %d%s" % (code, "" if ok else " (expected %d-%d)" % tuple(status)), code


def tcp_answer(host, port, timeout):
    """One connection: (ok, target, answer, None)."""
    target = "tcp %s:%d" % (host, port)
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.close()
        return True, target, "connected", None
    except (socket.error, socket.timeout) as error:
        return False, target, _error_words(error), None


def http_check(host, port, path, status, timeout):
    """(ok, detail) for one GET."""
    ok, target, answer, code = http_answer(host, port, path, status, timeout)
    return ok, "%s: %s" % (target, answer)


def tcp_check(host, port, timeout):
    ok, target, answer, code = tcp_answer(host, port, timeout)
    return ok, "%s: %s" % (target, answer)


class Podman:
    """Runs podman through AnsibleModule.run_command, in the C locale."""

    def __init__(self, module):
        self.module = module
        self._bin = None

    @property
    def path(self):
        if self._bin is None:
            self._bin = self.module.get_bin_path("podman")
            if not self._bin:
                raise OciError(PODMAN_MISSING)
        return self._bin

    def run(self, args, check=True, data=None):
        cmd = [self.path] + [str(a) for a in args]
        rc, out, err = self.module.run_command(cmd, check_rc=False, data=data, binary_data=data is not None,
                                               environ_update={"LC_ALL": "C", "LANG": "C"})
        if check and rc != 0:
            command = " ".join(str(a) for a in args)
            raise OciError("'podman %s' failed (rc=%s): %s" % (command, rc, (err or out or "").strip()))
        return rc, out, err

    def run_timed(self, args, timeout):
        """(rc, stdout, stderr) of podman ``args``, or (None, '', '') when it ran past ``timeout`` seconds
        (then it is killed): a probe must not hang on a workload that does not answer."""
        proc = subprocess.Popen([self.path] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=dict(os.environ, LC_ALL="C", LANG="C"))
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return None, "", ""
        return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    def available(self):
        """Whether podman is installed."""
        try:
            return bool(self.path)
        except OciError:
            return False

    def container(self, name):
        """podman inspect of a container, or None when there is none of that name."""
        rc, out, err = self.run(["container", "inspect", "--format", "json", name], check=False)
        if rc != 0:
            return None
        data = json.loads(out or "[]")
        return data[0] if data else None

    def image(self, reference):
        """podman inspect of an image, or None when the host does not have it."""
        rc, out, err = self.run(["image", "inspect", "--format", "json", str(reference)], check=False)
        if rc != 0:
            return None
        data = json.loads(out or "[]")
        return data[0] if data else None


def unit_journal(module, unit, lines=15):
    """The unit's last log lines (podman's own errors land there), or '' without journalctl."""
    journalctl = module.get_bin_path("journalctl")
    if not journalctl:
        return ""
    rc, out, err = module.run_command([journalctl, "-u", unit, "-n", str(lines), "--no-pager", "-o", "cat"],
                                      check_rc=False)
    return (out or "").strip()


# Marks the processes of one command probe in their environment, so that a timed-out one can be found.
PROBE_MARK = "GPUAAS_PROBE_RUN"


def kill_marked(mark, proc_dir="/proc"):
    """Kill every process whose environment holds ``mark`` (NAME=value); how many were killed.

    Killing a timed-out ``podman exec`` client does not end the command it started (conmon keeps the exec
    session): without this, every probe look that timed out would leave its command running in the workload."""
    needle = mark.encode("utf-8")
    killed = 0
    for entry in os.listdir(proc_dir):
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc_dir, entry, "environ"), "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            os.kill(int(entry), signal.SIGKILL)
            killed += 1
        except (IOError, OSError):
            continue  # gone already
    return killed


def container_status(state):
    """A container's status from podman inspect ('running', 'exited', 'paused', ...), 'absent' for None."""
    return (state.get("State") or {}).get("Status", "unknown") if state else "absent"


def look(podman, probe, container, state, timeout=None):
    """One look with ``probe`` (from normalize_probe()) at a workload whose container's podman inspect is
    ``state`` (None: it has none), each at most ``timeout`` seconds (the probe's own timeout when
    shorter): {ok, target, answer, code}. An http or tcp probe asks even when the container does not run
    (what answers on its port is worth knowing); a command probe needs it running."""
    timeout = probe["timeout"] if timeout is None else min(timeout, probe["timeout"])
    kind, status = probe["type"], container_status(state)
    if kind == "none" or (kind == "command" and status != "running"):
        running = status == "running"
        return dict(ok=running, target="container %s" % container, code=None,
                    answer="running" if running else "not probed: the container is %s" % status)
    if kind == "http":
        ok, target, answer, code = http_answer(probe["host"], probe["port"], probe["path"], probe["status"], timeout)
    elif kind == "tcp":
        ok, target, answer, code = tcp_answer(probe["host"], probe["port"], timeout)
    else:
        target, code = "command %s" % " ".join(probe["command"]), None
        mark = "%s=%s" % (PROBE_MARK, uuid.uuid4().hex)
        rc, out, err = podman.run_timed(["exec", "--env", mark, container] + probe["command"], timeout)
        if rc is None:
            kill_marked(mark)
            ok, answer = False, "no answer within %gs" % timeout
        else:
            lines = (err or out or "").strip().splitlines()
            ok, answer, code = rc == 0, "rc=%s%s" % (rc, (": " + lines[-1]) if lines else ""), rc
    if answer == "timed out":
        answer = "timed out after %gs" % timeout
    return dict(ok=ok, target=target, answer=answer, code=code)


# A container's podman inspect, as far as look() reads it, for a container known to run.
RUNNING = {"State": {"Status": "running"}}


def probe_once(podman, probe, container, unit_running=None):
    """(ok, detail) for one look with ``probe`` (from normalize_probe()) at a workload whose container
    is ``container``: ready when the container runs and the probe answers. ``unit_running``: a callable that says
    whether the workload's unit runs (systemd, in milliseconds); an http or tcp look then needs no podman call
    (about 0.1 s) while it does."""
    if unit_running is not None and probe["type"] in ("http", "tcp") and unit_running():
        answer = look(podman, probe, container, RUNNING)
        return answer["ok"], "%s: %s" % (answer["target"], answer["answer"])
    state = podman.container(container)
    status = container_status(state)
    if status != "running":
        exit_code = (state.get("State") or {}).get("ExitCode") if state else None
        return False, ("container %s does not exist" % container if state is None
                       else "container %s is %s (exit code %s)" % (container, status, exit_code))
    answer = look(podman, probe, container, state)
    if probe["type"] == "none":
        return True, "container %s is running" % container
    return answer["ok"], "%s: %s" % (answer["target"], answer["answer"])


# The first looks of a readiness wait come sooner than the probe's interval: a container that was just started
# usually answers within a fraction of a second, and a local look costs next to nothing.
FIRST_LOOK_DELAY = 0.05


def wait_ready(podman, probe, container, deadline=None, clock=time.monotonic, sleep=time.sleep, unit_running=None):
    """Probe until ready or ``deadline`` (seconds; the probe's own by default) runs out: (ok, attempts,
    seconds, detail of the last look). The delay between looks starts at FIRST_LOOK_DELAY and doubles up to
    the probe's interval. ``unit_running`` as for probe_once(); a wait that ends unready then looks once more
    with the container's state, which the detail reports."""
    limit = probe["deadline"] if deadline is None else deadline
    started = clock()
    attempts = 0
    delay = min(FIRST_LOOK_DELAY, probe["interval"])
    while True:
        attempts += 1
        ok, detail = probe_once(podman, probe, container, unit_running)
        elapsed = clock() - started
        if ok or elapsed + delay > limit:
            break
        sleep(delay)
        delay = min(delay * 2, probe["interval"])
    if not ok and unit_running is not None:
        ok, detail = probe_once(podman, probe, container)
    return ok, attempts, elapsed, detail


# ---- health: what one replica looks like now -------------------------------------------------------
UNIT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "ExecMainStatus", "NRestarts")
# What the platform stores per member: at most this many keys, strings at most this long.
DETAIL_KEYS, DETAIL_CHARS = 16, 200


def unit_state(module, systemctl, unit):
    """``systemctl show``'s properties UNIT_PROPERTIES of ``unit`` (one command); {} when systemctl cannot say."""
    rc, out, err = module.run_command([systemctl, "show", unit, "--property=" + ",".join(UNIT_PROPERTIES)],
                                      check_rc=False, environ_update={"LC_ALL": "C", "LANG": "C"})
    return dict(line.split("=", 1) for line in (out or "").splitlines() if "=" in line) if rc == 0 else {}


def _number(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def unit_words(props):
    """The unit's state in a few words: 'active', 'inactive (exit code 137)', 'activating (auto-restart, exit
    code 137)', 'not installed'."""
    if props.get("LoadState") == "not-found":
        return "not installed"
    active, sub = props.get("ActiveState") or "unknown", props.get("SubState") or ""
    extra = [sub] if sub not in ("", active, "dead", "running") else []
    code = _number(props.get("ExecMainStatus"))
    if code and active != "active":
        extra.append("exit code %d" % code)
    return "%s (%s)" % (active, ", ".join(extra)) if extra else active


def digest_of(reference):
    """The sha256:<hex> of an image reference, or '' when it names none."""
    digest = (reference or "").rpartition("@")[2]
    return digest if _DIGEST_RE.fullmatch(digest) else ""


def replica_health(name, record, unit_props, state, answer, pinned=""):
    """How one workload of a host is, judged from what was read now: its record (None: not deployed here),
    its unit's properties (unit_state()), its container's podman inspect (None: none), the probe's answer
    (look(); None when not probed) and the image the platform pins (``pinned``, '' when unknown: then the
    record's). Returns (healthy, details): details are at most DETAIL_KEYS scalars, ``reason`` saying why
    it is not healthy ('' when it is)."""
    unit, container = unit_name(name), container_name(name)
    record = record or {}
    status = container_status(state)
    state_info = (state or {}).get("State") or {}
    running_digest = (state or {}).get("ImageDigest") or ""
    recorded_digest = digest_of(record.get("image"))
    pinned_digest = digest_of(pinned) or recorded_digest
    details = {
        "workload": name,
        "unit": unit_words(unit_props),
        "restarts": _number(unit_props.get("NRestarts")),
        "container": status,
        "exit_code": None if status in ("running", "absent") else _number(state_info.get("ExitCode")),
        "started_at": (state_info.get("StartedAt") or "") if status == "running" else "",
        "image": (state or {}).get("ImageName") or "",
        "running_digest": running_digest,
        "pinned_digest": pinned_digest,
        "digest_matches": (running_digest == pinned_digest) if running_digest and pinned_digest else None,
        "probe": answer["answer"] if answer else None,
        "probe_target": answer["target"] if answer else None,
        "probe_code": answer["code"] if answer else None,
        "probe_ok": answer["ok"] if answer else None,
    }
    if not record:
        reason = "the workload %s is not deployed on this host (no %s)" % (name, record_path(name, RECORD_DIR))
    elif unit_props.get("ActiveState") != "active":
        reason = "the unit %s is %s" % (unit, details["unit"])
    elif status != "running":
        exited = "" if details["exit_code"] is None else " (exit code %s)" % details["exit_code"]
        reason = "the container %s is %s%s" % (container, status, exited)
    elif running_digest != recorded_digest:
        reason = "the container runs %s, not the image deployed here (%s)" % (
            running_digest or details["image"] or "an unknown image", recorded_digest or record.get("image"))
    elif answer and not answer["ok"]:
        reason = "the probe got %s from %s" % (answer["answer"], answer["target"])
    else:
        reason = ""
    details["reason"] = reason
    return not reason, dict((k, v[:DETAIL_CHARS] if isinstance(v, str) else v) for k, v in details.items())


# ---- the record a workload keeps on its host ------------------------------------------------------
def read_json(path):
    """The JSON in ``path``, or None when there is no such file."""
    try:
        with open(path) as f:
            return json.load(f)
    except (IOError, OSError):
        return None
    except ValueError:
        raise OciError("%s is not valid JSON" % path) from None


def record_text(record):
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def remember_image(images, image):
    """The images a workload has on its host, in the order they came, with ``image`` among them."""
    images = list(images or [])
    return images if image in images else images + [image]


def plan_images(record, current, keep):
    """What a start of ``current`` makes of a workload's images, from its record before:
    (images, previous, retiring).

    ``previous`` are the images that ran before, oldest first, the ``keep`` newest of them (the targets of a
    fast rollback); ``retiring`` every other image the workload has on the host (pulled but never run, or
    run too long ago), to be removed; ``images`` what stays."""
    ran = list(record.get("previous") or []) + ([record["image"]] if record.get("image") else [])
    previous = []
    for image in reversed(ran):
        if image != current and image not in previous and len(previous) < max(0, keep):
            previous.insert(0, image)
    images = remember_image(record.get("images"), current)
    for image in previous:
        images = remember_image(images, image)
    retiring = [i for i in images if i != current and i not in previous]
    return [i for i in images if i not in retiring], previous, retiring


def auth_file_text(registry, username, password):
    """A containers-auth.json(5) holding one credential."""
    token = base64.b64encode(("%s:%s" % (username, password)).encode("utf-8")).decode("ascii")
    return json.dumps({"auths": {registry: {"auth": token}}})
