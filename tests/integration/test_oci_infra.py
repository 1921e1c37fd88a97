"""The OCI test infrastructure itself: a real registry host, signed test images, podman inside test hosts.

One registry and two `oci` test hosts for the module: Debian 13 (podman 5.4, verifies sigstore signatures)
and Debian 12 (podman 4.3.1 as Debian ships it, which cannot). The node-side configuration a collection
role will own later (policy.json, registries.d, registries.conf.d) is written here by the test itself.
"""

import json
import shlex
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from gpuaas_api import testhosts
from gpuaas_api import testregistry as tr

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

REPO = "gpuaas-test/web"  # signatures required here
OPEN_REPO = "gpuaas-test-open/web"  # not named by the policy
KEY_PATH = "/etc/pki/containers/gpuaas-test.pub"


def sh(host: dict, script: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:  # noqa: A002
    """Run a shell script on a test host over SSH, as roles do."""
    proc = subprocess.run(
        testhosts.ssh_command(host["address"]) + [script], input=input, text=True, capture_output=True, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{host['name']}: {script!r} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


WRITE_FILES = (
    "import json, os, sys\n"
    "for path, text in json.load(sys.stdin).items():\n"
    "    os.makedirs(os.path.dirname(path), exist_ok=True)\n"
    "    open(path, 'w').write(text)\n"
)


def write(host: dict, files: dict[str, str]) -> None:
    """Write files (path -> text) on a test host in one SSH call."""
    sh(host, f"python3 -c {shlex.quote(WRITE_FILES)}", input=json.dumps(files))


def http_get(address: str, port: int, path: str = "/version.txt", timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://{address}:{port}{path}", timeout=3) as response:  # noqa: S310
                return response.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


@pytest.fixture(scope="module")
def oci():
    prefix = f"ocinfra{uuid.uuid4().hex[:6]}"
    timings = {}
    try:
        started = time.monotonic()
        for flavor in ("registry", "oci-trixie", "oci"):
            testhosts.build(flavor)  # one at a time: two flavors share the Debian 13 base image
        timings["test host images (cached after the first run)"] = time.monotonic() - started
        started = time.monotonic()
        testhosts.ensure_ssh_key()
        testhosts.ensure_network()
        with ThreadPoolExecutor(3) as pool:
            registry_f = pool.submit(tr.Registry.start, prefix)
            deb13_f = pool.submit(testhosts.up, prefix, ["deb13"], "oci-trixie")
            deb12_f = pool.submit(testhosts.up, prefix, ["deb12"], "oci")
            registry, (deb13,), (deb12,) = registry_f.result(), deb13_f.result(), deb12_f.result()
        timings["registry + 2 oci hosts up"] = time.monotonic() - started

        key, other_key = tr.SigningKey.generate(), tr.SigningKey.generate()
        started = time.monotonic()
        images = {v: tr.build_image(v) for v in ("v1", "v2", "v3")}
        timings["3 test images built"] = time.monotonic() - started
        started = time.monotonic()
        refs = {
            "signed": tr.push(registry, REPO, "v1", images["v1"], sign_with=key),
            "unsigned": tr.push(registry, REPO, "v2", images["v2"]),
            "other_key": tr.push(registry, REPO, "v3", images["v3"], sign_with=other_key),
            "open": tr.push(registry, OPEN_REPO, "v2", images["v2"]),
        }
        timings["4 pushes, 2 signed"] = time.monotonic() - started

        policy = {
            "default": [{"type": "insecureAcceptAnything"}],
            "transports": {"docker": {f"{registry.address}/{REPO}": [{"type": "sigstoreSigned", "keyPath": KEY_PATH}]}},
        }
        node_config = {
            KEY_PATH: key.public_pem.decode(),
            "/etc/containers/policy.json": json.dumps(policy, indent=2) + "\n",
            "/etc/containers/registries.d/gpuaas-test.yaml":
                f"docker:\n  {registry.address}:\n    use-sigstore-attachments: true\n",
            "/etc/containers/registries.conf.d/50-gpuaas-test.conf": registry.registries_conf(),
        }
        for host in (deb12, deb13):
            write(host, node_config)
        yield {"registry": registry, "deb12": deb12, "deb13": deb13, "refs": refs, "timings": timings}
    finally:
        testhosts.down(prefix)
        for name, seconds in timings.items():
            print(f"\n{name}: {seconds:.1f} s", end="")


def test_images_are_reproducible_and_distinct(oci):
    refs, registry = oci["refs"], oci["registry"]
    digest = refs["signed"].split("@")[1]
    assert refs["signed"] == f"{registry.address}/{REPO}@{digest}"
    assert len({r.split("@")[1] for r in refs.values()}) == 3  # "open" is v2 again: the same digest
    assert refs["open"].split("@")[1] == refs["unsigned"].split("@")[1]
    # Same content, pushed again under another tag: the same digest (build --timestamp 0, same compression).
    again = tr.push(registry, OPEN_REPO, "v1-again", tr.build_image("v1"))
    assert again.split("@")[1] == digest
    # Signatures are sigstore attachments next to the image: sha256-<hex>.sig in the same repository.
    with urllib.request.urlopen(f"http://{registry.address}/v2/{REPO}/tags/list", timeout=5) as r:  # noqa: S310
        tags = set(json.load(r)["tags"])
    signed_hex = digest.split(":")[1]
    assert f"sha256-{signed_hex}.sig" in tags
    assert f"sha256-{refs['unsigned'].split(':')[-1]}.sig" not in tags


def test_signed_image_pulls_by_digest_and_its_nested_container_answers(oci):
    host, ref = oci["deb13"], oci["refs"]["signed"]
    started = time.monotonic()
    sh(host, f"podman pull -q {ref}")
    print(f"\ncold pull of the signed test image on a Debian 13 host: {time.monotonic() - started:.2f} s")
    sh(host, f"podman run -d --name web --network host {ref}")
    assert sh(host, "podman exec web cat /www/version.txt").stdout == "v1\n"
    # Host networking: the container's port is the host's port, reachable like any service on it.
    assert http_get(host["address"], 8080) == "v1\n"
    state = json.loads(sh(host, "podman inspect web").stdout)[0]
    assert state["State"]["Running"] is True
    assert state["ImageDigest"] == ref.split("@")[1]
    # The test image stops at once and cleanly on SIGTERM (units that stop it do not end up failed).
    started = time.monotonic()
    sh(host, "podman stop -t 30 web")  # a container that ignored SIGTERM would take 30 s
    assert time.monotonic() - started < 20
    assert sh(host, "podman inspect --format '{{.State.ExitCode}}' web").stdout.strip() == "0"


def test_unsigned_image_is_refused(oci):
    host, ref = oci["deb13"], oci["refs"]["unsigned"]
    proc = sh(host, f"podman pull -q {ref}", check=False)
    assert proc.returncode != 0
    assert "A signature was required, but no signature exists" in proc.stderr
    assert sh(host, f"podman image exists {ref}", check=False).returncode != 0


def test_image_signed_with_another_key_is_refused(oci):
    host, ref = oci["deb13"], oci["refs"]["other_key"]
    proc = sh(host, f"podman pull -q {ref}", check=False)
    assert proc.returncode != 0
    assert "cryptographic signature verification failed" in proc.stderr
    assert sh(host, f"podman image exists {ref}", check=False).returncode != 0


def test_debian12_podman_runs_nested_containers_but_refuses_every_sigstore_signature(oci):
    host, refs = oci["deb12"], oci["refs"]
    # Debian 12 patched sigstore out of containers/image: even a correctly signed image is refused.
    proc = sh(host, f"podman pull -q {refs['signed']}", check=False)
    assert proc.returncode != 0
    assert "Debian-local change: sigstore disabled" in proc.stderr
    # Without a signature requirement, podman inside the Debian 12 host pulls and runs the image.
    sh(host, f"podman pull -q {refs['open']} && podman run -d --name web --network host {refs['open']}")
    assert http_get(host["address"], 8080) == "v2\n"


def test_bridge_networking_cannot_work_inside_test_hosts(oci):
    # /proc/sys is read-only in a test host: CNI (Debian 12) and netavark (Debian 13) fail to publish a port.
    for host in (oci["deb12"], oci["deb13"]):
        proc = sh(host, f"timeout 60 podman run -d --name bridged -p 18080:8080 {oci['refs']['open']}", check=False)
        assert proc.returncode not in (0, 124), proc.stderr
        assert "read-only file system" in proc.stderr.lower(), proc.stderr


def test_basic_auth(oci):
    registry, host = oci["registry"], oci["deb12"]
    image = tr.build_image("v1")
    registry.set_credentials("gpuaas-ci", "s3cret-for-the-test")
    try:
        # Anonymous requests are refused; pushes from here use the credentials.
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://{registry.address}/v2/_catalog", timeout=5)  # noqa: S310
        assert refused.value.code == 401
        ref = tr.push(registry, "gpuaas-test-auth/web", "v1", image)
        anonymous = sh(host, f"podman pull -q {ref}", check=False)
        assert anonymous.returncode != 0
        assert "unauthorized" in anonymous.stderr.lower()
        write(host, {"/run/gpuaas-test-auth.json": registry.auth_json()})
        sh(host, f"podman pull -q --authfile /run/gpuaas-test-auth.json {ref} && rm -f /run/gpuaas-test-auth.json")
        assert sh(host, f"podman image exists {ref}", check=False).returncode == 0
    finally:
        registry.clear_credentials()
    with urllib.request.urlopen(f"http://{registry.address}/v2/", timeout=5) as r:  # noqa: S310
        assert r.status == 200
