"""A real OCI registry for tests, tiny test images to push to it, and sigstore keys that sign them.

    from gpuaas_api import testregistry as tr

    reg = tr.Registry.start(prefix)        # a `registry` test host (testhosts) on the test network
    own = tr.Registry.start(prefix, name="acme-registry")  # another one beside it (a tenant's own registry)
    reg.address                            # "10.88.0.5:5000": plain HTTP; reached from here and from test hosts
    image = tr.build_image("v1")           # local image: FROM scratch, static busybox httpd on :8080 serving /www
    key = tr.SigningKey.generate()         # ECDSA P-256 in cosign's encrypted key format; key.public_pem
    ref = tr.push(reg, "apps/web", "v1", image, sign_with=key)  # "10.88.0.5:5000/apps/web@sha256:..."
    ref = tr.push(reg, "apps/web", "v2", tr.build_image("v2"))  # unsigned
    tr.sign(reg, "apps/web", "v2", other_key)                   # sign what a tag points at (signatures add up)
    reg.set_credentials("user", "secret")  # basic auth (htpasswd, bcrypt) alone; pushes here use it from then on
    reg.clear_credentials()                # anonymous again
    reg.use_token_service(realm, service, issuer, certificate_pem)  # bearer tokens only (see below)
    reg.registries_conf()                  # registries.conf text for a test host: this registry is plain HTTP
    reg.stop()

The registry is Debian's docker-registry (distribution 2.8) as the systemd unit of a Debian 13 test host:
Debian 12's skopeo and podman have sigstore patched out (they neither sign nor verify), Debian 13's sign
with `skopeo copy --sign-by-sigstore-private-key`, so signing runs on the registry host, with the key and
its passphrase in that host's /tmp (a tmpfs) for the length of the call. Signatures are stored as sigstore
attachments (`sha256-<digest>.sig` tags in the same repository), as cosign does.

With `use_token_service` the registry takes only bearer tokens of a Docker token service (the control
service's GET /v1/registry/token, `auth: token`): clients get one from `realm` with their credentials, and
the registry checks it against `certificate_pem` (the service's GET /v1/registry/certificate). Such a
token service grants pull only, so push and sign everything first: pushes fail from then on.

Test images are reproducible (`podman build --timestamp 0`): the same version and port give the same
digest on every machine; two versions give two digests. The container answers
`GET http://HOST:PORT/version.txt` with the version, stops at once on SIGTERM (exit 0), and has busybox's
sh, wget and cat for `podman exec`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import shutil
import struct
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import testhosts

PORT = 5000
IMAGE_NAME = "localhost/gpuaas-testimage"
BUSYBOX = Path("/bin/busybox")  # Debian package busybox-static (scripts/setup.sh installs it)
REGISTRY_CONFIG_PATH = "/etc/docker/registry/config.yml"
HTPASSWD_PATH = "/etc/docker/registry/htpasswd"
ISSUER_CERTIFICATE_PATH = "/etc/docker/registry/token-issuer.pem"
RECIPE_LABEL = "io.gpuaas.testimage.recipe"
OPEN_POLICY = '{"default": [{"type": "insecureAcceptAnything"}]}\n'

# cosign's encrypted private key (sigstore/cosign pkg/cosign keys, secure-systems-lab go-securesystemslib
# encrypted): PEM around JSON {kdf: scrypt, cipher: nacl/secretbox, ciphertext} sealing a PKCS#8 DER key.
PRIVATE_KEY_PEM_TYPE = "ENCRYPTED SIGSTORE PRIVATE KEY"
SCRYPT_N, SCRYPT_R, SCRYPT_P = 32768, 8, 1


def _check(proc: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    if proc.returncode != 0:
        raise RuntimeError(f"testregistry: {what} failed (rc={proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc


# ---------------------------------------------------------------------------------------------- keys


@dataclass(frozen=True)
class SigningKey:
    """A sigstore signing key pair. private_pem is encrypted with passphrase (cosign's format)."""

    public_pem: bytes
    private_pem: bytes = field(repr=False)
    passphrase: bytes = field(repr=False)

    @classmethod
    def generate(cls, passphrase: bytes | None = None) -> SigningKey:
        import nacl.secret
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        passphrase = passphrase if passphrase is not None else secrets.token_urlsafe(24).encode()
        key = ec.generate_private_key(ec.SECP256R1())
        der = key.private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        salt, nonce = os.urandom(32), os.urandom(nacl.secret.SecretBox.NONCE_SIZE)
        box_key = hashlib.scrypt(
            passphrase, salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32, maxmem=64 * 1024 * 1024
        )
        # secretbox output as Go's secretbox.Seal writes it: the Poly1305 tag, then the encrypted bytes.
        sealed = nacl.secret.SecretBox(box_key).encrypt(der, nonce).ciphertext

        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        document = {
            "kdf": {"name": "scrypt", "params": {"N": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P}, "salt": b64(salt)},
            "cipher": {"name": "nacl/secretbox", "nonce": b64(nonce)},
            "ciphertext": b64(sealed),
        }
        public = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return cls(public_pem=public, private_pem=_pem(PRIVATE_KEY_PEM_TYPE, json.dumps(document).encode()),
                   passphrase=passphrase)


def _pem(kind: str, data: bytes) -> bytes:
    body = base64.b64encode(data).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return ("\n".join([f"-----BEGIN {kind}-----", *lines, f"-----END {kind}-----"]) + "\n").encode()


# ---------------------------------------------------------------------------------------------- registry


@dataclass
class Registry:
    """A running registry test host. Create with Registry.start(prefix); address is "IP:5000"."""

    prefix: str
    name: str
    container: str
    host: str
    credentials: tuple[str, str] | None = field(default=None, repr=False)
    token_realm: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{PORT}"

    @classmethod
    def start(cls, prefix: str, name: str = "registry") -> Registry:
        """Start (or find) the registry host `prefix-name`, anonymous access, and wait until it answers."""
        (started,) = testhosts.up(prefix, [name], "registry")
        registry = cls(prefix=prefix, name=name, container=started["container"], host=started["address"])
        registry.clear_credentials()  # a fresh host is anonymous already; one found running may not be
        return registry

    def stop(self) -> None:
        """Remove this registry host (and everything pushed to it)."""
        testhosts.remove_containers([self.container])

    def exec(self, *cmd: str, input: str | None = None) -> subprocess.CompletedProcess:  # noqa: A002
        """Run a command on the registry host; returns the completed process (not checked)."""
        args = ["podman", "exec", *(["-i"] if input is not None else []), self.container, *cmd]
        return subprocess.run(args, input=input, text=True, capture_output=True, check=False)

    def set_credentials(self, user: str, password: str) -> None:
        """Require basic auth (htpasswd, bcrypt) for every request, with this one user."""
        if not re.fullmatch(r"[A-Za-z0-9._-]+", user) or not password:
            raise ValueError("testregistry: user must be [A-Za-z0-9._-]+ and password non-empty")
        # The password goes over stdin: never on a command line or in a log.
        _check(self.exec("htpasswd", "-iBc", HTPASSWD_PATH, user, input=password + "\n"), "htpasswd")
        _check(self.exec("chown", "root:docker-registry", HTPASSWD_PATH), "chown htpasswd")
        _check(self.exec("chmod", "0640", HTPASSWD_PATH), "chmod htpasswd")
        self._write_config(f"auth:\n  htpasswd:\n    realm: gpuaas-test\n    path: {HTPASSWD_PATH}\n")
        self.credentials, self.token_realm = (user, password), None
        self._restart()

    def clear_credentials(self) -> None:
        """Anonymous access again."""
        self._write_config("")
        self.exec("rm", "-f", HTPASSWD_PATH, ISSUER_CERTIFICATE_PATH)
        self.credentials = self.token_realm = None
        self._restart()

    def use_token_service(self, realm: str, service: str, issuer: str, certificate_pem: str) -> None:
        """Require a bearer token from the token service at `realm` (Docker token authentication) for
        every request: signed by the key of `certificate_pem`, issued by `issuer` for `service`."""
        for name, value in (("realm", realm), ("service", service), ("issuer", issuer)):
            if not re.fullmatch(r"[A-Za-z0-9._:/?=&-]+", value):
                raise ValueError(f"testregistry: unexpected characters in the token service's {name}: {value!r}")
        _check(self.exec("sh", "-c", f"cat > {ISSUER_CERTIFICATE_PATH}", input=certificate_pem),
               "writing the token issuer's certificate")
        self._write_config(f"auth:\n  token:\n    realm: {realm}\n    service: {service}\n    issuer: {issuer}\n"
                           f"    rootcertbundle: {ISSUER_CERTIFICATE_PATH}\n")
        self.exec("rm", "-f", HTPASSWD_PATH)
        self.credentials, self.token_realm = None, realm
        self._restart()

    def registries_conf(self) -> str:
        """registries.conf(.d) text telling podman/skopeo on a test host that this registry is plain HTTP."""
        return f'[[registry]]\nlocation = "{self.address}"\ninsecure = true\n'

    def auth_json(self) -> str:
        """A containers auth.json for the current credentials (a secret: keep it out of logs)."""
        if self.credentials is None:
            return json.dumps({"auths": {}})
        token = base64.b64encode(":".join(self.credentials).encode()).decode()
        return json.dumps({"auths": {self.address: {"auth": token}}})

    def _write_config(self, auth: str) -> None:
        config = testhosts.REGISTRY_CONFIG + auth
        _check(self.exec("sh", "-c", f"cat > {REGISTRY_CONFIG_PATH}", input=config), "writing the registry config")

    def _restart(self, timeout: float = 30.0) -> None:
        _check(self.exec("systemctl", "restart", "docker-registry"), "restarting docker-registry")
        expected = 401 if self.credentials or self.token_realm else 200
        deadline = time.monotonic() + timeout
        status: int | str = "no answer"
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=3) as response:  # noqa: S310
                    status = response.status
            except urllib.error.HTTPError as err:
                status = err.code
            except OSError as err:
                status = str(err)
            if status == expected:
                return
            time.sleep(0.3)
        raise RuntimeError(f"testregistry: {self.address}/v2/ answered {status}, expected {expected}")

    @contextmanager
    def _client_dir(self) -> Iterator[Path]:
        """A private temp dir with what skopeo needs to talk to this registry: policy, registries.d, auth."""
        with tempfile.TemporaryDirectory(prefix="gpuaas-registry-") as tmp:
            d = Path(tmp)
            (d / "policy.json").write_text(OPEN_POLICY)
            (d / "registries.d").mkdir()
            (d / "registries.d" / "registry.yaml").write_text(
                f"docker:\n  {self.address}:\n    use-sigstore-attachments: true\n"
            )
            (d / "auth.json").write_text(self.auth_json())
            os.chmod(d / "auth.json", 0o600)
            yield d


def _skopeo(d: Path | str) -> list[str]:
    return ["skopeo", "--policy", f"{d}/policy.json", "--registries.d", f"{d}/registries.d"]


def digest_of(registry: Registry, repo: str, tag: str) -> str:
    """The manifest digest "sha256:..." that repo:tag points at, read back from the registry."""
    with registry._client_dir() as d:
        proc = subprocess.run(
            [*_skopeo(d), "inspect", "--tls-verify=false", "--authfile", str(d / "auth.json"),
             "--format", "{{.Digest}}", f"docker://{registry.address}/{repo}:{tag}"],
            text=True, capture_output=True, check=False,
        )
    return _check(proc, f"skopeo inspect {repo}:{tag}").stdout.strip()


def push(registry: Registry, repo: str, tag: str, image: str, sign_with: SigningKey | None = None) -> str:
    """Push a local image as repo:tag (signed with sign_with if given); returns "ADDRESS/repo@sha256:..."."""
    with registry._client_dir() as d:
        proc = subprocess.run(
            [*_skopeo(d), "copy", "--quiet", "--dest-tls-verify=false", "--dest-authfile", str(d / "auth.json"),
             f"containers-storage:{image}", f"docker://{registry.address}/{repo}:{tag}"],
            text=True, capture_output=True, check=False,
        )
        _check(proc, f"pushing {image} as {repo}:{tag}")
    digest = digest_of(registry, repo, tag)
    if sign_with is not None:
        sign(registry, repo, tag, sign_with)
    return f"{registry.address}/{repo}@{digest}"


def sign(registry: Registry, repo: str, tag: str, key: SigningKey) -> None:
    """Add a sigstore signature by key to the image repo:tag points at (its digest does not change)."""
    before = digest_of(registry, repo, tag)
    workdir = f"/tmp/gpuaas-sign-{secrets.token_hex(4)}"  # noqa: S108 (the registry host's private tmpfs)
    src = f"docker://{registry.address}/{repo}@{before}"
    dest = f"docker://{registry.address}/{repo}:{tag}"
    with registry._client_dir() as d:
        (d / "key.pem").write_bytes(key.private_pem)
        (d / "passphrase").write_bytes(key.passphrase)
        try:
            _check(registry.exec("mkdir", "-m", "0700", workdir), "making the signing directory")
            _check(
                subprocess.run(["podman", "cp", f"{d}/.", f"{registry.container}:{workdir}"],
                               text=True, capture_output=True, check=False),
                "copying the signing material to the registry host",
            )
            proc = registry.exec(
                *_skopeo(workdir), "copy", "--quiet", "--src-tls-verify=false", "--dest-tls-verify=false",
                "--authfile", f"{workdir}/auth.json",
                "--sign-by-sigstore-private-key", f"{workdir}/key.pem",
                "--sign-passphrase-file", f"{workdir}/passphrase", src, dest,
            )
            _check(proc, f"signing {repo}:{tag}")
        finally:
            registry.exec("rm", "-rf", workdir)
    after = digest_of(registry, repo, tag)
    if after != before:
        raise RuntimeError(f"testregistry: signing {repo}:{tag} changed its digest from {before} to {after}")


# ---------------------------------------------------------------------------------------------- images


def build_image(version: str, port: int = 8080) -> str:
    """A tiny local image serving /www over HTTP on port (with host networking: on the host's port).

    /www/version.txt holds version; builds are reproducible (same version and port, same digest).
    Returns the local reference, e.g. "localhost/gpuaas-testimage:v1-8080".
    """
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,100}", version):
        raise ValueError(f"testregistry: version must be usable in an image tag: {version!r}")
    if not _is_static_elf(BUSYBOX):
        raise RuntimeError(f"testregistry: {BUSYBOX} is missing or not static: install busybox-static (setup.sh)")
    ref = f"{IMAGE_NAME}:{version}-{port}"
    containerfile = (
        "FROM scratch\n"
        "COPY bin/ /bin/\n"
        "COPY www/ /www/\n"
        f'LABEL org.opencontainers.image.version="{version}"\n'
        f"EXPOSE {port}\n"
        # httpd as PID 1 would ignore SIGTERM (podman stop waits 10 s, then SIGKILL: exit 137, a failed
        # unit): a shell that exits 0 on TERM stops at once and cleanly.
        f"ENTRYPOINT [\"/bin/sh\", \"-c\", \"trap 'exit 0' TERM INT; "
        f"/bin/busybox httpd -f -p {port} -h /www & wait\"]\n"
    )
    # The recipe (Containerfile and busybox) as a label: an image left by an older recipe is rebuilt.
    recipe = hashlib.sha256(containerfile.encode() + BUSYBOX.read_bytes()).hexdigest()[:16]
    if testhosts.image_exists(ref) and testhosts.image_label(ref, RECIPE_LABEL) == recipe:
        return ref
    with tempfile.TemporaryDirectory(prefix="gpuaas-testimage-") as tmp:
        ctx = Path(tmp)
        (ctx / "bin").mkdir()
        shutil.copy2(BUSYBOX, ctx / "bin" / "busybox")
        for applet in ("sh", "wget", "cat", "ls"):
            os.symlink("busybox", ctx / "bin" / applet)
        (ctx / "www").mkdir()
        (ctx / "www" / "version.txt").write_text(version + "\n")
        (ctx / "Containerfile").write_text(containerfile + f"LABEL {RECIPE_LABEL}={recipe}\n")
        _check(
            subprocess.run(["podman", "build", "--quiet", "--timestamp", "0", "-t", ref, str(ctx)],
                           text=True, capture_output=True, check=False),
            f"building {ref}",
        )
    return ref


def _is_static_elf(path: Path) -> bool:
    """True for a 64-bit little-endian ELF file without a program interpreter (statically linked)."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return False
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    pt_interp = 3
    return all(struct.unpack_from("<I", data, phoff + i * phentsize)[0] != pt_interp for i in range(phnum))
