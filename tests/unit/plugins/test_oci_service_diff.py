"""oci_image and oci_service run for real (`ansible -m` over SSH) on a Debian 12 test host with podman inside,
pulling from a real registry: check mode reports the change and changes nothing on the host, --diff shows what
changes (the image's presence and record; the unit, the environment with its values hidden, the record), a
second run changes nothing, and state=absent in check mode lists what it would remove and removes nothing.

The test host and the registry are gpuaas_api.testhosts / testregistry hosts (about 6 s to start); the images
are the testregistry's 2 MB busybox httpd under tags of this file's own, removed afterwards."""

import hashlib
import json
import shlex
import subprocess
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

import live_ansible
import pytest
from gpuaas_api import testhosts
from gpuaas_api import testregistry as tr

NAME = "web"
UNIT = f"/etc/systemd/system/gpuaas-oci-{NAME}.service"
ENV_FILE = f"/etc/gpuaas-oci/{NAME}.env"
RECORD = f"/var/lib/gpuaas-oci/{NAME}.json"
VERSIONS = ("svcdiff-a", "svcdiff-b")  # image tags of this file alone: removed after it
SECRET = "s3cret-Only-For-This-Test"


class Host:
    def __init__(self, prefix, host, inventory, refs):
        self.prefix, self.host, self.inventory, self.refs = prefix, host, inventory, refs

    def module(self, module, args, check=False, diff=True):
        result = live_ansible.run(self.inventory, "node", module, args, check=check, diff=diff)[0]
        assert not result.get("failed"), result.get("msg") or result
        return result

    def sh(self, command):
        proc = subprocess.run(["podman", "exec", self.host["container"], "sh", "-c", command], capture_output=True,
                              text=True, timeout=60, check=False)
        return proc.stdout.strip()

    def has_image(self, ref):
        return self.sh(f"podman image exists {ref} && echo yes") == "yes"

    def unit_state(self):
        return self.sh(f"systemctl is-active gpuaas-oci-{NAME}; systemctl is-enabled gpuaas-oci-{NAME} 2>/dev/null")

    def container(self):
        out = self.sh(f"podman container inspect gpuaas-oci-{NAME} 2>/dev/null")
        return json.loads(out)[0] if out and out != "[]" else None

    def version(self):
        with urllib.request.urlopen(f"http://{self.host['address']}:8080/version.txt", timeout=5) as response:  # noqa: S310
            return response.read().decode().strip()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    prefix = f"svcdiff{uuid.uuid4().hex[:6]}"
    try:
        for flavor in ("registry", "oci"):
            testhosts.build(flavor)  # one at a time, before the hosts start side by side
        testhosts.ensure_ssh_key()
        testhosts.ensure_network()
        with ThreadPoolExecutor(2) as pool:
            started = pool.submit(testhosts.up, prefix, ["node"], "oci")
            registry = pool.submit(tr.Registry.start, prefix)
            (host,), registry = started.result(), registry.result()
        refs = [tr.push(registry, "apps/web", v, tr.build_image(v)) for v in VERSIONS]
        # The site's configuration, not the workload's: the registry speaks plain HTTP.
        subprocess.run(["podman", "exec", "-i", host["container"], "sh", "-c",
                        "cat > /etc/containers/registries.conf.d/50-gpuaas-test.conf"],
                       input=registry.registries_conf(), text=True, check=True, timeout=60)
        inventory = tmp_path_factory.mktemp("svcdiff") / "hosts.ini"
        inventory.write_text(testhosts.inventory([host]))
        yield Host(prefix, host, inventory, refs)
    finally:
        testhosts.down(prefix)
        subprocess.run(["podman", "rmi", "--ignore", *(f"{tr.IMAGE_NAME}:{v}-8080" for v in VERSIONS)],
                       capture_output=True, check=False, timeout=120)


def service_args(ref, **extra):
    # Test hosts are containers: their containers get no cgroups and only host networking.
    return dict(name=NAME, image=ref, cgroups=False, network="host", stop_timeout=1, env={"TOKEN": SECRET},
                probe={"type": "http", "port": 8080, "path": "/version.txt"}) | extra


def hidden_env(value):
    """The environment file of TOKEN=value as --diff shows it: a hash of the value in its place."""
    digest = hashlib.sha256(value.encode()).hexdigest()[:12]
    return f"# Managed by gpuaas.apps; edits are overwritten.\nTOKEN=(sha256 {digest})\n"


def diffs_by_file(result):
    return {d["after_header"]: d for d in result["diff"]}


def podman_run(unit):
    """The `podman run` arguments of a unit's ExecStart, unquoted; [] for no unit."""
    lines = unit.replace(" \\\n\t", " ").splitlines()
    start = [line for line in lines if line.startswith("ExecStart=")]
    return shlex.split(start[0].removeprefix("ExecStart=")) if start else []


def test_oci_image_check_mode_diff_and_a_second_pull(node):
    ref = node.refs[0]
    checked = node.module("oci_image", dict(name=ref, service=NAME), check=True)
    assert checked["changed"] and not checked["pulled"], checked
    assert checked["diff"] == {"before": {"image": ref, "present": False, "recorded": False},
                               "after": {"image": ref, "present": True, "recorded": True}}
    assert not node.has_image(ref) and node.sh(f"ls {RECORD} 2>/dev/null") == "", "check mode changed the host"

    pulled = node.module("oci_image", dict(name=ref, service=NAME))
    assert pulled["changed"] and pulled["pulled"] and pulled["diff"] == checked["diff"], pulled
    assert node.has_image(ref) and json.loads(node.sh(f"cat {RECORD}"))["images"] == [ref]

    again = node.module("oci_image", dict(name=ref, service=NAME))
    assert not again["changed"] and not again["pulled"], again
    assert again["diff"]["before"] == again["diff"]["after"] == {"image": ref, "present": True, "recorded": True}

    removing = node.module("oci_image", dict(name=ref, state="absent"), check=True)
    assert removing["changed"] and not removing["removed"], removing
    assert removing["diff"] == {"before": {"image": ref, "present": True}, "after": {"image": ref, "present": False}}
    assert node.has_image(ref), "check mode removed the image"


def test_oci_service_check_mode_shows_the_unit_environment_and_record_and_starts_nothing(node):
    ref = node.refs[0]
    record_before = node.sh(f"cat {RECORD}")
    checked = node.module("oci_service", service_args(ref), check=True)
    assert checked["changed"] and checked["restarted"], checked
    diffs = diffs_by_file(checked)
    assert set(diffs) == {UNIT, ENV_FILE, RECORD}
    assert diffs[UNIT]["before"] == ""
    run = podman_run(diffs[UNIT]["after"])
    assert run[-1] == ref and {"--pull=never", "--cgroups=disabled"} <= set(run), run
    assert run[run.index("--network") + 1] == "host" and run[run.index("--env-file") + 1] == ENV_FILE
    # The environment's values are secret: the diff shows a hash of each, never the value.
    assert (diffs[ENV_FILE]["before"], diffs[ENV_FILE]["after"]) == ("", hidden_env(SECRET))
    assert SECRET not in json.dumps(checked["diff"])
    assert diffs[RECORD]["before"] == record_before + "\n"
    assert json.loads(diffs[RECORD]["after"])["image"] == ref
    assert json.loads(diffs[RECORD]["after"])["probe"]["path"] == "/version.txt"
    assert node.sh(f"ls {UNIT} {ENV_FILE} 2>/dev/null") == "" and node.sh(f"cat {RECORD}") == record_before
    assert node.unit_state().startswith("inactive") and node.container() is None

    started = node.module("oci_service", service_args(ref))
    assert started["changed"] and started["restarted"], started
    assert [d["after"] for d in started["diff"]] == [d["after"] for d in checked["diff"]]
    assert node.unit_state() == "active\nenabled" and node.version() == VERSIONS[0]
    assert node.sh(f"cat {UNIT}") + "\n" == diffs[UNIT]["after"]

    again = node.module("oci_service", service_args(ref))
    assert not again["changed"] and not again["restarted"], again
    assert all(d["before"] == d["after"] for d in again["diff"]), again["diff"]


def test_oci_service_check_mode_of_an_upgrade_shows_the_new_image_and_keeps_the_old_running(node):
    old, new = node.refs
    node.module("oci_image", dict(name=new, service=NAME))
    running = node.container()
    checked = node.module("oci_service", service_args(new, env={"TOKEN": SECRET + "-2"}), check=True)
    assert checked["changed"] and checked["restarted"], checked
    diffs = diffs_by_file(checked)
    before, after = podman_run(diffs[UNIT]["before"]), podman_run(diffs[UNIT]["after"])
    assert before[-1] == old and after == before[:-1] + [new], (before, after)
    assert (diffs[ENV_FILE]["before"], diffs[ENV_FILE]["after"]) == (hidden_env(SECRET), hidden_env(SECRET + "-2"))
    assert SECRET not in json.dumps(checked["diff"])
    record_before, record_after = (json.loads(diffs[RECORD][k]) for k in ("before", "after"))
    assert (record_before["image"], record_before["previous"]) == (old, [])
    assert (record_after["image"], record_after["previous"]) == (new, [old])
    # Nothing moved: the same container still serves the old image.
    assert node.container()["Id"] == running["Id"] and node.version() == VERSIONS[0]
    assert podman_run(node.sh(f"cat {UNIT}"))[-1] == old


def test_oci_service_absent_in_check_mode_lists_everything_then_removes_it_once(node):
    old, new = node.refs
    gone = [f"unit gpuaas-oci-{NAME}.service", f"container gpuaas-oci-{NAME}", f"image {old}", f"image {new}",
            f"file {UNIT}", f"file {ENV_FILE}", f"file {RECORD}"]
    checked = node.module("oci_service", dict(name=NAME, state="absent"), check=True)
    assert checked["changed"] and checked["removed"] == gone, checked
    assert checked["diff"] == {"before": "\n".join(gone) + "\n", "after": ""}
    assert node.unit_state() == "active\nenabled" and node.has_image(old) and node.has_image(new)

    removed = node.module("oci_service", dict(name=NAME, state="absent"))
    assert removed["changed"] and removed["removed"] == gone, removed
    assert node.unit_state().startswith("inactive") and node.container() is None
    assert node.sh("podman images --format '{{.Digest}}'") == ""
    assert node.sh(f"ls {UNIT} {ENV_FILE} {RECORD} 2>/dev/null") == ""

    again = node.module("oci_service", dict(name=NAME, state="absent"))
    assert not again["changed"] and again["removed"] == [] and again["diff"] == {"before": "", "after": ""}, again


def workload_args(ref, **extra):
    """oci_workload's options: the service's, and the trust (Debian 12's podman cannot verify sigstore
    signatures, so this host accepts the repository's images unsigned, explicitly)."""
    return service_args(ref, unsigned=True) | extra


TRUST_FILE = f"/etc/containers/registries.d/gpuaas-{NAME}.yaml"


def test_oci_workload_pulls_then_starts_in_one_module_run_each_with_check_mode_diff_and_idempotence(node):
    """gpuaas.apps.oci_workload takes the steps above (the host is clean again after the teardown test): pulled
    trusts and pulls and says whether a start is pending, started runs and waits, absent removes all of it."""
    ref = node.refs[0]
    checked = node.module("oci_workload", workload_args(ref, state="pulled"), check=True)
    assert checked["changed"] and checked["start_pending"] and not checked["pulled"], checked
    assert TRUST_FILE in {d.get("after_header") for d in checked["diff"]}
    assert not node.has_image(ref) and node.sh(f"ls {TRUST_FILE} {RECORD} 2>/dev/null") == "", "check mode changed it"

    pulled = node.module("oci_workload", workload_args(ref, state="pulled"))
    assert pulled["changed"] and pulled["pulled"] and pulled["trust_changed"] and pulled["start_pending"], pulled
    assert node.has_image(ref) and node.sh(f"ls {TRUST_FILE}") == TRUST_FILE
    # The running container is not this step's business: nothing runs yet.
    assert node.container() is None and node.sh(f"ls {UNIT} 2>/dev/null") == ""

    starting = node.module("oci_workload", workload_args(ref), check=True)
    assert starting["changed"] and starting["restarted"] and "ready" not in starting, starting
    assert node.container() is None
    started = node.module("oci_workload", workload_args(ref))
    assert started["changed"] and started["restarted"] and started["ready"], started
    assert node.version() == VERSIONS[0] and node.unit_state() == "active\nenabled"
    assert SECRET not in json.dumps(started["diff"])  # the environment's values show as hashes

    settled = node.module("oci_workload", workload_args(ref, state="pulled"))
    assert not settled["changed"] and not settled["start_pending"], settled
    assert settled["start_reason"].startswith("nothing: it runs and answers"), settled
    again = node.module("oci_workload", workload_args(ref))
    assert not again["changed"] and not again["restarted"] and again["ready"], again
    assert all(d["before"] == d["after"] for d in again["diff"]), again["diff"]

    # A changed environment is for the start to apply: pulled only says so, and the container keeps running.
    running = node.container()["Id"]
    changed_env = node.module("oci_workload", workload_args(ref, state="pulled", env={"TOKEN": SECRET + "-2"}))
    assert not changed_env["changed"] and changed_env["start_pending"], changed_env
    assert node.container()["Id"] == running


def test_oci_workload_absent_removes_the_workload_and_its_trust(node):
    ref = node.refs[0]
    checked = node.module("oci_workload", dict(name=NAME, state="absent"), check=True)
    assert checked["changed"] and f"image {ref}" in checked["removed"], checked
    assert node.unit_state() == "active\nenabled" and node.sh(f"ls {TRUST_FILE}") == TRUST_FILE

    removed = node.module("oci_workload", dict(name=NAME, state="absent"))
    assert removed["changed"] and removed["images"] == [ref] and removed["trust_changed"], removed
    assert node.container() is None and node.sh("podman images --format '{{.Digest}}'") == ""
    assert node.sh(f"ls {UNIT} {ENV_FILE} {RECORD} {TRUST_FILE} 2>/dev/null") == ""

    again = node.module("oci_workload", dict(name=NAME, state="absent"))
    assert not again["changed"] and again["removed"] == [], again


def test_oci_workload_pulled_with_start_idle_starts_where_the_unit_does_not_run_and_leaves_a_running_one_alone(node):
    """The playbooks' first step: a host where the workload's unit does not run starts it in the same module run;
    where it runs, an upgrade is only pulled (the rolling restart comes after)."""
    old, new = node.refs
    first = node.module("oci_workload", workload_args(old, state="pulled", start_idle=True))
    assert first["changed"] and first["restarted"] and first["ready"], first
    assert not first["running"] and not first["start_pending"], first
    assert node.version() == VERSIONS[0]
    running = node.container()["Id"]

    upgrade = node.module("oci_workload", workload_args(new, state="pulled", start_idle=True))
    assert upgrade["changed"] and upgrade["pulled"] and upgrade["running"] and upgrade["start_pending"], upgrade
    assert "restarted" not in upgrade and node.container()["Id"] == running and node.version() == VERSIONS[0]

    assert node.module("oci_workload", dict(name=NAME, state="absent"))["changed"]
