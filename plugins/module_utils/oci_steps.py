# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The steps of an OCI workload on its host: trust its repository, pull its image, run it, wait until it
answers, remove it.

Each step reads what the host has, decides what it would change, changes it unless ``check`` is set, and
returns its result with ``changed`` and ``diff``. The modules that take one step each (oci_trust, oci_image,
oci_service, oci_probe) and gpuaas.apps.oci_workload, which takes them all in one module run, call these
functions: one place for each step.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import glob
import hashlib
import json
import os

from ansible_collections.gpuaas.apps.plugins.module_utils.file_artifacts import ROOT as FILES_ROOT
from ansible_collections.gpuaas.apps.plugins.module_utils.file_artifacts import FileArtifactError, file_path
from ansible_collections.gpuaas.apps.plugins.module_utils.files import read_text, remove_file, write_file
from ansible_collections.gpuaas.apps.plugins.module_utils.oci import (
    ENV_DIR,
    PODMAN_MISSING,
    POLICY_PATH,
    RECORD_DIR,
    REGISTRIES_CONF_D,
    REGISTRIES_D,
    UNIT_DIR,
    OciError,
    auth_file_text,
    cdi_devices,
    check_devices,
    check_memory,
    check_name,
    check_scope,
    container_name,
    docker_scopes,
    env_file_text,
    env_path,
    insecure_registries_text,
    normalize_ports,
    normalize_probe,
    normalize_volumes,
    parse_reference,
    plan_images,
    read_json,
    record_path,
    record_text,
    registries_d_scopes,
    registries_d_text,
    remember_image,
    remove_scopes,
    requirement,
    resolve_devices,
    scope_for,
    set_scopes,
    trust_paths,
    unit_journal,
    unit_name,
    unit_text,
    wait_ready,
)


class StepFailed(OciError):
    """A step that failed after it had something to say (its result goes into fail_json beside the message)."""

    def __init__(self, msg, **result):
        super(StepFailed, self).__init__(msg)
        self.result = result


class Systemd:
    def __init__(self, module):
        self.module = module
        self.bin = module.get_bin_path("systemctl", required=True)

    def run(self, *args, **kw):
        return self.module.run_command([self.bin] + list(args), check_rc=kw.get("check", True))

    def active(self, unit):
        return self.run("is-active", "--quiet", unit, check=False)[0] == 0

    def enabled(self, unit):
        return self.run("is-enabled", "--quiet", unit, check=False)[0] == 0


# ---- the modules' arguments ------------------------------------------------------------------------
def service_argument_spec():
    """The argument spec of how the container runs (oci_service and oci_workload; documented in the doc fragment
    gpuaas.apps.oci_service_options), a fresh copy each call."""
    return dict(
        command=dict(type="list", elements="str", default=[]),
        env=dict(type="dict", default={}),
        network=dict(type="str", choices=["bridge", "host"], default="bridge"),
        ports=dict(type="list", elements="dict", default=[], options=dict(
            host_port=dict(type="int"), container_port=dict(type="int"),
            protocol=dict(type="str", default="tcp"), host_ip=dict(type="str"))),
        volumes=dict(type="list", elements="dict", default=[], options=dict(
            source=dict(type="path", required=True), target=dict(type="str", required=True),
            read_only=dict(type="bool", default=False))),
        cpus=dict(type="float"),
        memory=dict(type="str"),
        cgroups=dict(type="bool", default=True),
        restart=dict(type="str", choices=["no", "on-failure", "always"], default="on-failure"),
        restart_sec=dict(type="int", default=5),
        stop_timeout=dict(type="int", default=10),
        gpus=dict(type="str", choices=["auto", "none"], default="auto"),
        devices=dict(type="list", elements="str", default=[]),
        probe=dict(type="dict", default={}),
        keep_images=dict(type="int", default=1),
        # A file artifact as the platform gives it (catalog/files.py); only name, digest and mount are read here.
        # Every file the workload's version placed is given, mounted or not: the record lists each, so that each
        # leaves the host with the workload (a file without a mount is only recorded).
        files=dict(type="list", elements="dict", default=[], options=dict(
            name=dict(type="str", required=True), digest=dict(type="str", required=True),
            mount=dict(type="str"), size=dict(type="int"), media_type=dict(type="str"),
            path=dict(type="str"), src=dict(type="str"), url=dict(type="str"))),
    )


def auth_argument_spec():
    """A pull's registry credentials (oci_image and oci_workload). Only the password is secret: no_log on the
    whole dict would also mask the registry's address wherever it appears in the result."""
    return dict(type="dict", no_log=False, options=dict(
        registry=dict(type="str", required=True),
        username=dict(type="str", required=True),
        password=dict(type="str", required=True, no_log=True),
    ))


# ---- the request, checked without the host -----------------------------------------------------------
SERVICE_OPTIONS = ("name", "image", "command", "env", "network", "ports", "volumes", "cpus", "memory", "cgroups",
                   "restart", "restart_sec", "stop_timeout", "gpus", "devices", "probe", "keep_images", "files")


CHOICES = {"network": ("bridge", "host"), "restart": ("no", "on-failure", "always"), "gpus": ("auto", "none")}


def _problems(checks):
    """Runs (what, check) pairs; the problem sentences of those that raised. A value of the wrong shape (a
    string where a list of ports belongs) is a problem too, not a crash."""
    problems = []
    for what, check in checks:
        try:
            check()
        except OciError as error:
            problems.append(str(error))
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            problems.append("%s: not of the expected shape (%s)" % (what, error))
    return problems


def request_problems(params):
    """Every problem of a workload's service options (SERVICE_OPTIONS) that shows without its host (a tag instead
    of a digest, a bad port, a probe without a port), one sentence each; [] when there is none."""
    return _problems([
        ("name", lambda: check_name(params.get("name"))),
        ("image", lambda: parse_reference(params.get("image")) if params.get("image") else None),
        ("command", lambda: [_command_line(a) for a in params.get("command") or []]),
        ("env", lambda: env_file_text(_mapping("env", params.get("env") or {}))),
        ("ports", lambda: normalize_ports(params.get("ports"))),
        ("volumes", lambda: normalize_volumes(params.get("volumes"))),
        ("files", lambda: file_volumes(params.get("files"))),
        ("devices", lambda: check_devices(params.get("devices"))),
        ("memory", lambda: check_memory(params.get("memory"))),
        ("probe", lambda: normalize_probe(params.get("probe"))),
        ("numbers", lambda: _numbers(params)),
        ("choices", lambda: _choices(params)),
    ])


def workload_problems(params):
    """request_problems() and the rest of gpuaas.apps.oci_workload's request: an image, the trust, the pull's
    credentials. The playbooks ask this on the control node, before any host is contacted; oci_workload
    asks it again on the host before it changes anything."""
    problems = request_problems(params)
    if not params.get("image"):
        problems.insert(0, "no image: name the image to run by digest (registry/repository@sha256:<64 hex digits>).")
        return problems
    checks = [
        ("trust", lambda: _trust_choice(params.get("public_key"), params.get("unsigned"))),
        ("insecure_registries", lambda: insecure_registries_text(params.get("insecure_registries") or [])),
    ]
    try:
        reference = parse_reference(params["image"])
    except OciError:
        reference = None  # named above
    if reference is not None:
        checks += [("auth", lambda: check_auth(params.get("auth"), reference)),
                   ("scope", lambda: check_scope(reference.name))]
    return problems + _problems(checks)


def _mapping(what, value):
    if not isinstance(value, dict):
        raise OciError("%s must be a mapping of names to values" % what)
    return value


def _choices(params):
    for key, allowed in CHOICES.items():
        if params.get(key) is not None and params[key] not in allowed:
            raise OciError("%s %r: one of %s" % (key, params[key], ", ".join(allowed)))


def _trust_choice(public_key, unsigned):
    if not public_key and not unsigned:
        raise OciError("public_key is required: images are accepted only when signed by it (unsigned=true "
                       "accepts unsigned images instead, explicitly)")
    if public_key and unsigned:
        raise OciError("give either public_key or unsigned=true, not both")


def _command_line(arg):
    if "\n" in arg or "\0" in arg:
        raise OciError("command arguments must be single lines")


def _numbers(params):
    # On the control node the values are as the inventory gave them; the module's argument spec converts them.
    try:
        counts = [int(params.get(key) or 0) for key in ("keep_images", "stop_timeout", "restart_sec")]
        cpus = None if params.get("cpus") is None else float(params["cpus"])
    except (TypeError, ValueError):
        raise OciError("keep_images, stop_timeout and restart_sec must be whole numbers, cpus a number") from None
    if min(counts) < 0:
        raise OciError("keep_images, stop_timeout and restart_sec must not be negative")
    if cpus is not None and cpus <= 0:
        raise OciError("cpus must be positive")


def file_volumes(files):
    """Read-only bind mounts of file artifacts: each file's content-addressed path on the host (from its digest
    alone, never from a given path) at its mount path in the container."""
    mounts = []
    for f in files or []:
        try:
            source = file_path(f.get("digest"))
        except FileArtifactError as error:
            raise OciError(str(error)) from None
        if not f.get("mount"):
            continue
        mounts.append(dict(source=source, target=f.get("mount"), read_only=True))
    return normalize_volumes(mounts)


# ---- trust ------------------------------------------------------------------------------------------
def policy_text(policy):
    return json.dumps(policy, indent=4, sort_keys=True) + "\n" if policy is not None else ""


def scopes_of_others(registries_d, own_path):
    """Scopes that other gpuaas drop-ins record (another workload's trust keeps them)."""
    others = set()
    for path in glob.glob(os.path.join(registries_d, "gpuaas-*.yaml")):
        if path != own_path:
            try:
                others.update(registries_d_scopes(read_text(path)))
            except OciError:
                continue
    return others


def trust(name, state, scopes, public_key=None, unsigned=False, insecure_registries=(), check=False,
          policy_path=POLICY_PATH, registries_d=REGISTRIES_D, registries_conf_d=REGISTRIES_CONF_D):
    """Requires signatures for ``scopes`` (state present) in the containers policy, with the registries.d and
    registries.conf.d drop-ins of workload ``name``; or removes what only this workload asked for (absent)."""
    name = check_name(name)
    d_path, conf_path = trust_paths(name, registries_d, registries_conf_d)
    old_d, old_conf = read_text(d_path), read_text(conf_path)
    recorded = registries_d_scopes(old_d) if old_d else []
    given = [check_scope(s) for s in scopes]
    policy = read_json(policy_path)
    result = dict(removed_scopes=[], kept_scopes=[])

    if state == "present":
        if not given:
            raise OciError("state=present needs scopes (the repositories whose images must be signed)")
        _trust_choice(public_key, unsigned)
        new_policy = set_scopes(policy, given, requirement(None if unsigned else public_key))
        managed = sorted(set(recorded) | set(given))
        new_d = registries_d_text(managed, sigstore=not unsigned)
        new_conf = insecure_registries_text(insecure_registries) if insecure_registries else None
        result["scopes"] = managed
    else:
        managed = sorted(set(recorded) | set(given))
        others = scopes_of_others(registries_d, d_path)
        result["kept_scopes"] = [s for s in managed if s in others]
        in_policy = docker_scopes(policy) if policy is not None else {}
        result["removed_scopes"] = [s for s in managed if s not in others and s in in_policy]
        new_policy = remove_scopes(policy, result["removed_scopes"]) if policy is not None else None
        new_d = new_conf = None
        result["scopes"] = []

    changes = [(policy_path, policy_text(policy), policy_text(new_policy)),
               (d_path, old_d or "", new_d or ""),
               (conf_path, old_conf or "", new_conf or "")]
    # Only a semantic change rewrites the policy: its formatting is the operator's until then.
    changed_files = [c for c in changes if (c[0] == policy_path and new_policy != policy)
                     or (c[0] != policy_path and c[1] != c[2])]
    result["diff"] = [dict(before_header=path, after_header=path, before=before, after=after)
                      for path, before, after in changes]
    if not check:
        for path, _before, after in changed_files:
            if after:
                write_file(path, after, 0o644)
            else:
                remove_file(path)
    result["files"] = [path for path, before, after in changes[1:] if after]
    result["changed"] = bool(changed_files)
    return result


# ---- the image --------------------------------------------------------------------------------------
def pull_failure(reference, stderr, policy_path):
    """A message for a failed pull that says which of the usual causes it was."""
    detail = (stderr or "").strip().splitlines()
    detail = detail[-1] if detail else "no output"
    text = stderr or ""
    if "sigstore disabled" in text:
        return ("podman on this host cannot verify sigstore signatures (Debian 12's podman has them patched out), so "
                "the trust policy %s refuses every image it requires them for, %s too: run signed workloads on hosts "
                "whose podman verifies them (Debian 13), or accept unsigned images explicitly (oci_trust_unsigned): %s"
                % (policy_path, reference, detail))
    if "Source image rejected" in text or "signature" in text.lower():
        policy = read_json(policy_path) or {}
        scope = scope_for(policy, reference)
        where = "transports.docker[%r]" % scope if scope != "default" else "its default"
        return ("the trust policy %s (%s) refused image %s: %s" % (policy_path, where, reference, detail))
    if "unauthorized" in text or "authentication required" in text or "401" in text:
        return "registry %s refused to serve image %s without valid credentials: %s" % (
            reference.registry, reference, detail)
    if "manifest unknown" in text:
        return "registry %s has no image %s (manifest unknown)" % (reference.registry, reference)
    return "pulling image %s failed: %s" % (reference, detail)


def check_auth(auth, reference):
    """The pull's credentials must be for the image's registry."""
    if auth and not str(reference).startswith(auth["registry"].rstrip("/") + "/"):
        raise OciError("the credentials are for registry %s, but image %s is in %s"
                       % (auth["registry"], reference, reference.registry))


def _pull(podman, reference, auth, auth_dir, service, policy_path):
    """podman pull, with the credentials in an auth file that exists only for the pull."""
    args = ["pull", "--quiet", str(reference)]
    auth_path = None
    try:
        if auth:
            auth_path = os.path.join(auth_dir, "gpuaas-oci-auth-%s.json" % (service or "pull"))
            if os.path.lexists(auth_path):
                os.unlink(auth_path)  # a leftover of an interrupted run
            fd = os.open(auth_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(auth_file_text(auth["registry"], auth["username"], auth["password"]))
            args[1:1] = ["--authfile", auth_path]
        rc, out, err = podman.run(args, check=False)
    finally:
        if auth_path and os.path.lexists(auth_path):
            os.unlink(auth_path)
    if rc != 0:
        raise OciError(pull_failure(reference, err or out, policy_path))


def _record_pull(service, reference, check):
    """Add the image to its workload's record; True when the record changed."""
    path = record_path(service)
    record = read_json(path) or {"name": service, "images": []}
    if str(reference) in record.get("images", []):
        return False
    record["images"] = remember_image(record.get("images"), str(reference))
    if not check:
        write_file(path, record_text(record), 0o644)
    return True


def image(module, podman, reference, state="present", auth=None, auth_dir="/run", service=None,
          policy_path=POLICY_PATH, check=False):
    """Pulls ``reference`` (a Reference, by digest) unless the host has it, and records it for workload
    ``service`` (its teardown removes it); or removes it (state absent)."""
    check_auth(auth, reference)
    if podman.available():
        before = podman.image(reference)
    elif check:
        module.warn("podman is not installed yet")
        before = None
    else:
        raise OciError(PODMAN_MISSING)
    result = dict(image=str(reference), repository=reference.name, digest=reference.digest, pulled=False,
                  removed=False)
    recorded = None  # (before, after): whether the workload's record lists the image
    if state == "present":
        changed = before is None
        if changed and not check:
            _pull(podman, reference, auth, auth_dir, service, policy_path)
            result["pulled"] = True
        after = podman.image(reference) if result["pulled"] else before
        if after:
            result["id"] = after.get("Id")
        if service:
            added = _record_pull(service, reference, check)
            changed = added or changed
            recorded = (not added, True)
    else:
        changed = before is not None
        if changed and not check:
            rc, out, err = podman.run(["rmi", str(reference)], check=False)
            if rc != 0 and "image not known" not in (err or ""):
                raise OciError("removing image %s failed: %s" % (reference, (err or out).strip()))
            result["removed"] = True
    result["changed"] = changed
    result["diff"] = dict(before={"image": str(reference), "present": before is not None},
                          after={"image": str(reference), "present": state == "present"})
    if recorded:  # a change of the record alone must show in the diff too
        result["diff"]["before"]["recorded"], result["diff"]["after"]["recorded"] = recorded
    return result


# ---- the service ------------------------------------------------------------------------------------
def hidden_env(text):
    """The environment file with each value replaced by a short hash, for diffs."""
    lines = []
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            line = "%s=(sha256 %s)" % (key, hashlib.sha256(value.encode("utf-8")).hexdigest()[:12])
        lines.append(line)
    return "\n".join(lines) + ("\n" if lines else "")


def service_spec(params, podman_path):
    """The checked request (``params`` holds SERVICE_OPTIONS), against this host (volume sources, devices):
    everything the unit, environment file and record are made of."""
    if not params["image"]:
        raise OciError("state=started needs image (registry/repository@sha256:...)")
    problems = request_problems(params)
    if problems:
        raise OciError(" ".join(problems))
    name = params["name"]
    volumes = normalize_volumes(params["volumes"])
    for v in volumes:
        if not os.path.exists(v["source"]):
            raise OciError("volume source %s does not exist on this host" % v["source"])
    mounts = file_volumes(params.get("files"))
    for f in params.get("files") or []:
        if not os.path.isfile(file_path(f["digest"])):
            raise OciError("file %s (%s) is not on this host verified: place it first (gpuaas.apps.file_artifact); "
                           "the container does not start without it" % (f["name"], f["digest"]))
    volumes += mounts
    available = cdi_devices()
    for device in params["devices"]:
        if device.startswith("/dev/"):
            if not os.path.exists(device):
                raise OciError("device %s does not exist on this host" % device)
        elif device not in available:
            raise OciError("device %s: no CDI spec under /etc/cdi or /var/run/cdi declares it (found: %s)"
                           % (device, ", ".join(sorted(available)) or "none"))
    spec = dict(
        name=name, image=str(parse_reference(params["image"])), command=list(params["command"]),
        network=params["network"], ports=normalize_ports(params["ports"]), volumes=volumes, cpus=params["cpus"],
        memory=check_memory(params["memory"]), cgroups=params["cgroups"], restart=params["restart"],
        restart_sec=params["restart_sec"], stop_timeout=params["stop_timeout"],
        devices=resolve_devices(params["devices"], params["gpus"], available), env_file=env_path(name, ENV_DIR),
    )
    return spec, env_file_text(params["env"]), normalize_probe(params["probe"]), unit_text(spec, podman_path)


def retire(podman, images, warnings):
    """Remove images; those still in use by a container stay (and stay recorded)."""
    removed, kept = [], []
    for image_ in images:
        rc, out, err = podman.run(["rmi", image_], check=False)
        if rc == 0 or "image not known" in (err or ""):
            removed.append(image_)
        else:
            kept.append(image_)
            warnings.append("image %s stays: %s" % (image_, (err or out).strip()))
    return removed, kept


def start(module, podman, systemd, params, check=False):
    """Runs the workload as its systemd unit: a changed unit or environment, or a unit that does not run,
    (re)starts it; otherwise a running one is left alone. The result's ``restarted`` says whether it (would
    have) restarted; ``warnings`` are for the caller to pass on."""
    name = params["name"]
    have_podman = podman.available()
    if not have_podman and not check:
        raise OciError(PODMAN_MISSING)
    if not have_podman:
        module.warn("podman is not installed yet")
    spec, env_text, probe, unit = service_spec(params, podman.path if have_podman else "/usr/bin/podman")
    unit_path = os.path.join(UNIT_DIR, unit_name(name))
    path_env, path_record = spec["env_file"], record_path(name, RECORD_DIR)
    # In check mode (before the pull) a missing image is what the pull will bring.
    if have_podman and not check and podman.image(spec["image"]) is None:
        raise OciError("image %s is not on this host: pull it first (gpuaas.apps.oci_image); the unit never "
                       "pulls" % spec["image"])

    old_record = read_json(path_record) or {}
    images, previous, retiring = plan_images(old_record, spec["image"], params["keep_images"])
    record = {"name": name, "unit": unit_name(name), "container": container_name(name), "image": spec["image"],
              "images": images, "previous": previous, "probe": probe}
    # A bind mount holds the file it was made of: a file placed again (a new inode at the same path, after an
    # altered copy was refused) reaches the container only through a restart.
    files = dict((file_path(f["digest"]), os.stat(file_path(f["digest"])).st_ino) for f in params.get("files") or [])
    # Files the record lists that this request no longer has (an upgrade's old version's, or placed by a run whose
    # start failed) stay recorded until this start succeeded, then leave the host unless another workload has them.
    stale = dict((p, i) for p, i in (old_record.get("files") or {}).items() if p not in files)
    if files or stale:
        record["files"] = dict(stale, **files)
    old_unit, old_env = read_text(unit_path), read_text(path_env)
    unit_changed, env_changed = unit != old_unit, env_text != old_env
    files_replaced = any((old_record.get("files") or {}).get(p) != i for p, i in files.items())
    record_changed = record_text(record) != record_text(old_record) if old_record else True
    running = have_podman and systemd.active(unit_name(name))
    enabled = systemd.enabled(unit_name(name)) if old_unit is not None else False
    restart = unit_changed or env_changed or files_replaced or not running
    warnings = []
    if not spec["cgroups"] and (spec["cpus"] or spec["memory"]):
        warnings.append("cgroups=false: the cpus/memory limits are not applied on this host")

    result = dict(unit=unit_name(name), container=container_name(name), image=spec["image"],
                  devices=spec["devices"], restarted=False, retired_images=[], warnings=warnings)
    result["diff"] = [
        dict(before_header=unit_path, after_header=unit_path, before=old_unit or "", after=unit),
        dict(before_header=path_env, after_header=path_env, before=hidden_env(old_env), after=hidden_env(env_text)),
        dict(before_header=path_record, after_header=path_record,
             before=record_text(old_record) if old_record else "", after=record_text(record)),
    ]
    result["changed"] = unit_changed or env_changed or record_changed or restart or not enabled or bool(retiring)
    if check:
        result["retired_images"] = retiring
        result["restarted"] = restart
        return result

    # The record first: an image is tracked (and torn down later) even when its start fails.
    if record_changed:
        write_file(path_record, record_text(record), 0o644)
    if env_changed:
        write_file(path_env, env_text, 0o600)
    if unit_changed:
        write_file(unit_path, unit, 0o644)
        systemd.run("daemon-reload")
    # A new unit starts with its enabling: one systemctl call instead of two. Only a new one: a unit that is not
    # active may still be activating or waiting to restart, and only a restart makes it run the new text.
    started_by_enable = old_unit is None and not running
    if started_by_enable:
        rc, out, err = systemd.run("enable", "--now", unit_name(name), check=False)
    elif not enabled:
        systemd.run("enable", unit_name(name))
    if restart and not started_by_enable:
        rc, out, err = systemd.run("restart", unit_name(name), check=False)
    if restart:
        if rc != 0 or not systemd.active(unit_name(name)):
            raise OciError("%s did not start: %s\n%s" % (unit_name(name), (err or out).strip(),
                                                         unit_journal(module, unit_name(name))))
        result["restarted"] = True
    if retiring:
        removed, kept = retire(podman, retiring, warnings)
        result["retired_images"] = removed
        if kept:
            record["images"] = images + kept
    if stale:
        result["file_artifacts"] = file_artifacts_to_remove(dict(files=stale), path_record)
        for path in result["file_artifacts"]:
            remove_file(path)
        if files:
            record["files"] = files
        else:
            record.pop("files")
    if (retiring and kept) or stale:
        write_file(path_record, record_text(record), 0o644)
    return result


def record_placed_files(name, paths, record_dir=RECORD_DIR):
    """Adds placed file artifacts to the workload's record (a record of its files alone when it has none yet), so
    that they leave the host with the workload even when its container never started. A file the record lists keeps
    its recorded inode (the one the running container mounts): a copy placed again is then seen by the start, which
    restarts the workload."""
    path_record = record_path(check_name(name), record_dir)
    record = read_json(path_record) or {"name": name}
    files = dict(record.get("files") or {})
    for path in paths:
        files.setdefault(path, os.stat(path).st_ino)
    if files != record.get("files"):
        record["files"] = files
        write_file(path_record, record_text(record), 0o644)
        return True
    return False


def wait(module, podman, name, probe, deadline=None, systemd=None):
    """Probes the workload until it is ready or the deadline (the probe's own unless given) ran out; raises
    StepFailed, with the unit's last log lines, when it was not ready in time. With ``systemd``, whether the
    container runs is asked of systemd (its unit active: milliseconds) instead of podman (about 0.1 s a look)."""
    unit_running = (lambda: systemd.active(unit_name(name))) if systemd else None
    ready, attempts, seconds, detail = wait_ready(podman, probe, container_name(name), deadline,
                                                  unit_running=unit_running)
    result = dict(ready=ready, attempts=attempts, seconds=round(seconds, 2), detail=detail, probe=probe)
    if not ready:
        limit = probe["deadline"] if deadline is None else deadline
        log = unit_journal(module, unit_name(name))
        raise StepFailed("workload %s was not ready within %gs (%d probes); last: %s%s"
                         % (name, limit, attempts, detail,
                            ("\nlast log lines of %s:\n%s" % (unit_name(name), log)) if log else ""), **result)
    return result


def file_artifacts_to_remove(record, path_record):
    """The file artifacts the workload's record lists that are on the host and that no other workload's record
    lists: a tenant's files leave the host with its workload (they are shared by digest only between workloads
    that still run there)."""
    mine = [p for p in record.get("files") or {} if p.startswith(os.path.join(FILES_ROOT, "sha256") + "/")]
    others = set()
    for path in glob.glob(os.path.join(os.path.dirname(path_record), "*.json")):
        if path != path_record:
            others.update((read_json(path) or {}).get("files") or {})
    return [p for p in mine if p not in others and os.path.lexists(p)]


def remove(podman, systemd, name, image_=None, stop_timeout=10, check=False):
    """Stops and removes the workload: its unit, container, environment file, every image of its record (and
    ``image_``) and the record."""
    name = check_name(name)
    unit = unit_name(name)
    unit_path = os.path.join(UNIT_DIR, unit)
    path_env, path_record = env_path(name, ENV_DIR), record_path(name, RECORD_DIR)
    record = read_json(path_record) or {}
    images = list(record.get("images") or [])
    if record.get("image") and record["image"] not in images:
        images.append(record["image"])
    if image_:
        images.append(str(parse_reference(image_)))
    have_podman = podman.available()
    container = podman.container(container_name(name)) if have_podman else None
    present_images = [i for i in images if have_podman and podman.image(i) is not None]
    unit_known = os.path.exists(unit_path) or systemd.active(unit) or systemd.enabled(unit)
    files = [f for f in (unit_path, path_env, path_record) if os.path.lexists(f)]
    artifacts = file_artifacts_to_remove(record, path_record)
    removed = ["unit %s" % unit] if unit_known else []
    removed += ["container %s" % container_name(name)] if container else []
    removed += ["image %s" % i for i in present_images] + ["file %s" % f for f in files + artifacts]
    result = dict(unit=unit, container=container_name(name), restarted=False, removed=removed, images=images,
                  retired_images=present_images, file_artifacts=artifacts,
                  changed=bool(removed))
    result["diff"] = dict(before="\n".join(removed) + ("\n" if removed else ""), after="")
    if check or not removed:
        return result
    if unit_known:
        systemd.run("disable", "--now", unit, check=False)
    if container:
        # Stopping the unit removes it already (ExecStopPost); this catches one started outside the unit.
        podman.run(["rm", "--force", "--ignore", "--time", str(stop_timeout), container_name(name)])
    for f in files + artifacts:
        remove_file(f)
    if unit_known:
        systemd.run("daemon-reload")
        systemd.run("reset-failed", unit, check=False)
    warnings = []
    gone, kept = retire(podman, present_images, warnings) if present_images else ([], [])
    if kept:
        raise StepFailed("could not remove images: %s" % "; ".join(warnings), **result)
    for directory in (ENV_DIR, RECORD_DIR):
        with contextlib.suppress(OSError):
            os.rmdir(directory)  # only when empty: other workloads keep theirs
    return result
