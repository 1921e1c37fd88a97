"""Real containerized test hosts for gpuaas.apps: podman containers that boot systemd and run sshd.

Molecule scenarios use the images built here (podman driver); end-to-end tests and `make demo` start
SSH-reachable hosts with `up` and use them as allocations.

    gpuaas testhosts image [--flavor FLAVOR] [--rebuild]       build the image once, then reuse it
    gpuaas testhosts up --prefix demo NAME...                   start hosts, print them as JSON
    gpuaas testhosts down --prefix demo | --all                 remove hosts started by this command
    gpuaas testhosts inventory --prefix demo                    print an ini inventory for running hosts

Images (built locally; no registry is reachable here):
    base   Debian bookworm with systemd, sshd and python3: packages get installed by the roles from the
           Debian mirror, as in production.
    slurm  base plus the Slurm, munge and MariaDB packages pre-installed (units disabled), so scenarios
           that are not about installation start fast.
    slurm-trixie
           the same on Debian 13: Slurm 24.11 (JSON output from scontrol and sinfo, slurmrestd) and munge 0.5.16.
    oci    base plus Debian 12's podman 4.3.1, crun and fuse-overlayfs, set up to run containers inside the
           host without --privileged (docs/dev/oci-test-hosts.md): inner containers use `--network host`;
           cgroups are off inside, so resource limits are not enforced there. Debian 12's podman has
           sigstore verification patched out: a `sigstoreSigned` policy refuses every image.
    oci-trixie
           the same on Debian 13 (podman 5.4.2, skopeo 1.18), whose podman verifies sigstore signatures.
    rke2   Debian 13 with what the RKE2 test double (tests/rke2_double/) runs on: a real etcd (etcd-server
           3.5, its own unit disabled: the double's `rke2 server` runs the member), a real kubectl
           (kubernetes-client 1.32), python3-yaml and openssl. No RKE2: the double's release is installed by
           the roles, like the real one.
    registry
           Debian 13 with docker-registry (distribution 2.8) on :5000 over plain HTTP and skopeo 1.18,
           which signs images (sigstore); driven by gpuaas_api.testregistry.
    postgres
           base plus Debian 12's PostgreSQL 15 (cluster 15/main made, its unit disabled): the tests set up a
           primary and a streaming standby on two hosts (tests/multihost, docs/dev/multihost.md).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import platformdirs

STATE_DIR = (Path(os.environ.get("GPUAAS_STATE_DIR") or platformdirs.user_state_path("gpuaas", appauthor=False))
             / "testhosts")
SSH_KEY = STATE_DIR / "id_ed25519"
NETWORK = "gpuaas-test"
LABEL = "io.gpuaas.testhost"
MIRROR = os.environ.get("GPUAAS_DEBIAN_MIRROR", "http://deb.debian.org/debian")

BASE_PACKAGES = "python3,systemd,systemd-sysv,dbus,openssh-server,iproute2,sudo,procps,ca-certificates"
SLURM_PACKAGES = ["munge", "slurmctld", "slurmd", "slurm-client", "slurmdbd", "mariadb-server"]
SLURM_UNITS = ["munge", "slurmctld", "slurmd", "slurmdbd", "mariadb"]

IMAGES = {
    "base": "localhost/gpuaas-testhost:bookworm",
    "slurm": "localhost/gpuaas-testhost-slurm:bookworm",
    "slurm-trixie": "localhost/gpuaas-testhost-slurm:trixie",
    "oci": "localhost/gpuaas-testhost-oci:bookworm",
    "oci-trixie": "localhost/gpuaas-testhost-oci:trixie",
    "registry": "localhost/gpuaas-testhost-registry:trixie",
    "rke2": "localhost/gpuaas-testhost-rke2:trixie",
    "postgres": "localhost/gpuaas-testhost-postgres:bookworm",
}
# Debian releases the hosts are bootstrapped from: "base" is the bookworm one.
BASE_IMAGES = {"bookworm": IMAGES["base"], "trixie": "localhost/gpuaas-testhost:trixie"}

# Podman inside a test host (see docs/dev/oci-test-hosts.md). /sys/fs/cgroup is read-only inside, so the
# inner podman runs without cgroups (runc refuses that, crun accepts it); /proc/sys is read-only, so it sets
# no sysctls and bridge networking cannot work: inner containers use the host's network (--network host).
# The bridge subnet only keeps a failed bridge attempt from routing the test network's 10.88.0.0/16 inside.
OCI_CONTAINERS_CONF = """\
# Test hosts only: podman inside an unprivileged container (gpuaas testhosts, flavor oci).
[containers]
default_sysctls = []
cgroups = "disabled"
[engine]
runtime = "crun"
[network]
default_subnet = "10.89.0.0/24"
"""
OCI_PACKAGES = ["podman", "crun", "fuse-overlayfs", "catatonit", "skopeo"]
# What the outer container needs for the inner podman: FUSE for fuse-overlayfs, mounts (SYS_ADMIN),
# network namespaces and device nodes of inner containers, their ulimits (SYS_RESOURCE).
OCI_RUN_ARGS = ["--device", "/dev/fuse", "--cap-add", "SYS_ADMIN,NET_ADMIN,MKNOD,SYS_RESOURCE"]
# Podman 5 warns on every command when the machine uses cgroup v1 (this machine kind does, production
# hosts do not): keep that out of the output roles and tests read.
PODMAN5_QUIET = "PODMAN_IGNORE_CGROUPSV1_WARNING=1"
FLAVOR_RUN_ARGS = {"oci": OCI_RUN_ARGS, "oci-trixie": OCI_RUN_ARGS}

# The registry host: docker-registry serves plain HTTP on :5000, storage under /var/lib/docker-registry.
# gpuaas_api.testregistry rewrites this file to turn basic auth on and off.
REGISTRY_CONFIG = """\
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: /var/lib/docker-registry
  delete:
    enabled: true
http:
  addr: :5000
"""


def run(cmd: list[str], check: bool = True, capture: bool = False, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, text=True, capture_output=capture, **kw)


def image_exists(ref: str) -> bool:
    return run(["podman", "image", "exists", ref], check=False).returncode == 0


def image_label(ref: str, label: str) -> str:
    out = run(["podman", "image", "inspect", "--format", "{{json .Labels}}", ref], check=False, capture=True).stdout
    return (json.loads(out or "null") or {}).get(label, "")


def build_base(rebuild: bool, suite: str = "bookworm") -> str:
    ref = BASE_IMAGES[suite]
    if image_exists(ref) and not rebuild:
        return ref
    with tempfile.TemporaryDirectory(prefix="gpuaas-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        print(f"testhosts: debootstrap {suite} into {rootfs} (one to three minutes)", file=sys.stderr)
        run(
            ["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", suite, str(rootfs), MIRROR],
            stdout=subprocess.DEVNULL,
        )
        (rootfs / "etc/apt/sources.list").write_text(
            f"deb {MIRROR} {suite} main\ndeb {MIRROR} {suite}-updates main\n"
            f"deb http://deb.debian.org/debian-security {suite}-security main\n"
        )
        # Containers have no console and no kernel to manage: units that would only fail or wait.
        for unit in ["getty@tty1.service", "systemd-remount-fs.service", "console-getty.service"]:
            (rootfs / "etc/systemd/system" / unit).unlink(missing_ok=True)
            os.symlink("/dev/null", rootfs / "etc/systemd/system" / unit)
        sshd_conf = rootfs / "etc/ssh/sshd_config.d/gpuaas-testhost.conf"
        sshd_conf.write_text("PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n")
        # Host keys are made at first boot so that every host has its own.
        for key in (rootfs / "etc/ssh").glob("ssh_host_*"):
            key.unlink()
        keygen_unit = rootfs / "etc/systemd/system/ssh-keygen-once.service"
        keygen_unit.write_text(
            "[Unit]\nDescription=Generate SSH host keys\nBefore=ssh.service\n"
            "ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key\n"
            "[Service]\nType=oneshot\nExecStart=/usr/bin/ssh-keygen -A\n"
            "[Install]\nWantedBy=multi-user.target\n"
        )
        wants = rootfs / "etc/systemd/system/multi-user.target.wants"
        wants.mkdir(parents=True, exist_ok=True)
        (wants / "ssh-keygen-once.service").unlink(missing_ok=True)
        os.symlink("/etc/systemd/system/ssh-keygen-once.service", wants / "ssh-keygen-once.service")
        (rootfs / "root/.ssh").mkdir(mode=0o700, exist_ok=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        run(
            ["podman", "import", "--change", 'CMD ["/sbin/init"]', "-", ref],
            stdin=tar.stdout,
            stdout=subprocess.DEVNULL,
        )
        tar.wait()
    return ref


def build_slurm(rebuild: bool, suite: str = "bookworm") -> str:
    ref = IMAGES["slurm" if suite == "bookworm" else f"slurm-{suite}"]
    if image_exists(ref) and not rebuild:
        return ref
    base = build_base(False, suite)
    containerfile = (
        f"FROM {base}\n"
        "RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
        + " ".join(SLURM_PACKAGES)
        + " >/dev/null && apt-get clean"
        # Installed, not configured: the roles decide what is enabled, as on a fresh production host.
        + " && systemctl disable "
        + " ".join(SLURM_UNITS)
        + " && rm -f /etc/munge/munge.key\n"
    )
    with tempfile.TemporaryDirectory(prefix="gpuaas-build-") as tmp:
        Path(tmp, "Containerfile").write_text(containerfile)
        print("testhosts: installing Slurm packages into the image (about a minute)", file=sys.stderr)
        run(["podman", "build", "--network", "host", "-t", ref, tmp], stdout=subprocess.DEVNULL)
    return ref


RECIPE_LABEL = "io.gpuaas.testhost.recipe"


def build_layer(ref: str, base: str, packages: list[str], files: dict[str, str], rebuild: bool,
                commands: str = "") -> str:
    """An image FROM base with Debian packages installed, then ``commands`` run (a shell line), and files
    (path in the image -> text) added.

    The image carries a hash of its recipe: a changed package list or file rebuilds it on next use.
    """
    containerfile = (
        f"FROM {base}\n"
        "RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
        + " ".join(packages)
        + " >/dev/null && apt-get clean\n"
        + (f"RUN {commands}\n" if commands else "")
        + ("COPY files/ /\n" if files else "")
    )
    recipe = hashlib.sha256(json.dumps([containerfile, files], sort_keys=True).encode()).hexdigest()[:16]
    if image_exists(ref) and not rebuild and image_label(ref, RECIPE_LABEL) == recipe:
        return ref
    with tempfile.TemporaryDirectory(prefix="gpuaas-build-") as tmp:
        for path, text in files.items():
            target = Path(tmp, "files", path.lstrip("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        Path(tmp, "Containerfile").write_text(containerfile + f"LABEL {RECIPE_LABEL}={recipe}\n")
        print(f"testhosts: installing {' '.join(packages)} into {ref} (under a minute)", file=sys.stderr)
        fresh = ["--no-cache"] if rebuild else []  # --rebuild: packages from the mirror again, not a cached layer
        run(["podman", "build", "--network", "host", *fresh, "-t", ref, tmp], stdout=subprocess.DEVNULL)
    return ref


def build_oci(rebuild: bool, suite: str = "bookworm") -> str:
    files = {"/etc/containers/containers.conf.d/50-gpuaas-testhost.conf": OCI_CONTAINERS_CONF}
    if suite != "bookworm":
        files["/etc/environment"] = PODMAN5_QUIET + "\n"
        files["/etc/systemd/system.conf.d/50-gpuaas-testhost.conf"] = f"[Manager]\nDefaultEnvironment={PODMAN5_QUIET}\n"
    flavor = "oci" if suite == "bookworm" else f"oci-{suite}"
    return build_layer(IMAGES[flavor], build_base(False, suite), OCI_PACKAGES, files, rebuild)


def build_registry(rebuild: bool) -> str:
    # Debian 13: its skopeo signs with sigstore keys (Debian 12's has sigstore patched out).
    files = {"/etc/docker/registry/config.yml": REGISTRY_CONFIG}
    return build_layer(
        IMAGES["registry"], build_base(False, "trixie"), ["docker-registry", "skopeo", "apache2-utils"], files, rebuild
    )


# The RKE2 test double's hosts. Debian starts etcd.service on install: disabled here, since the double's
# `rke2 server` runs each server's etcd member itself, as RKE2 runs it.
RKE2_PACKAGES = ["etcd-server", "kubernetes-client", "python3-yaml", "openssl"]


def build_rke2(rebuild: bool) -> str:
    return build_layer(IMAGES["rke2"], build_base(False, "trixie"), RKE2_PACKAGES, {}, rebuild,
                       commands="systemctl disable etcd.service && rm -rf /var/lib/etcd/*")


# The database hosts of the multi-host tests. Debian starts the cluster on install: disabled here, since the tests
# configure each host as a primary or a standby before they start it.
def build_postgres(rebuild: bool) -> str:
    return build_layer(IMAGES["postgres"], build_base(False), ["postgresql"], {}, rebuild,
                       commands="systemctl disable postgresql.service")


BUILDERS = {
    "base": build_base,
    "slurm": build_slurm,
    "slurm-trixie": lambda rebuild: build_slurm(rebuild, "trixie"),
    "oci": build_oci,
    "oci-trixie": lambda rebuild: build_oci(rebuild, "trixie"),
    "registry": build_registry,
    "rke2": build_rke2,
    "postgres": build_postgres,
}


@contextlib.contextmanager
def _machine_lock():
    """Held while an image, the SSH key or the network is made: several processes on this machine (the test
    command's workers, a developer's second run) may ask for the same one at once, and one makes it."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / "testhosts.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build(flavor: str, rebuild: bool = False) -> str:
    """The image of a flavor (built on first use, then reused); its name is IMAGES[flavor]."""
    with _machine_lock():
        return BUILDERS[flavor](rebuild)


def ensure_ssh_key() -> Path:
    with _machine_lock():
        if not SSH_KEY.exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpuaas-testhosts", "-f", str(SSH_KEY)])
    return SSH_KEY


def ensure_network() -> None:
    with _machine_lock():
        if run(["podman", "network", "exists", NETWORK], check=False).returncode != 0:
            run(["podman", "network", "create", NETWORK], stdout=subprocess.DEVNULL)


def container_name(prefix: str, host: str) -> str:
    return f"{prefix}-{host}"


def host_address(container: str) -> str:
    out = run(["podman", "inspect", "--format", "{{json .NetworkSettings.Networks}}", container], capture=True).stdout
    return json.loads(out)[NETWORK]["IPAddress"]


def wait_for_ssh(address: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        probe = run(ssh_command(address) + ["true"], check=False, capture=True)
        if probe.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"testhosts: {address} did not answer SSH within {timeout:.0f}s: {probe.stderr.strip()}")
        time.sleep(0.5)


def start_again(host: dict) -> None:
    """Start a stopped or killed test host again at the address it had, as a real host comes back after a
    power cut: podman may give a restarted container another address, so it is put back on the network
    with its old one."""
    run(["podman", "start", host["container"]], stdout=subprocess.DEVNULL)
    if host_address(host["container"]) != host["address"]:
        run(["podman", "network", "disconnect", NETWORK, host["container"]])
        run(["podman", "network", "connect", "--ip", host["address"], "--alias", host["name"], NETWORK,
             host["container"]])
    wait_for_ssh(host["address"])


def ssh_command(address: str) -> list[str]:
    return [
        "ssh",
        "-i",
        str(SSH_KEY),
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "LogLevel=ERROR",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=3",
        f"root@{address}",
    ]


def up(prefix: str, hosts: list[str], flavor: str, run_args: list[str] | None = None) -> list[dict]:
    """Start the hosts (a host that exists is kept) and return them. `run_args`: more `podman run` arguments
    for every host started, e.g. ["-v", "/src:/dst:ro"] to mount a directory of this machine."""
    image = build(flavor)
    key = ensure_ssh_key()
    ensure_network()
    started = []
    for host in hosts:
        name = container_name(prefix, host)
        if run(["podman", "container", "exists", name], check=False).returncode != 0:
            run(
                [
                    "podman",
                    "run",
                    "-d",
                    "--name",
                    name,
                    "--hostname",
                    host,
                    "--network",
                    NETWORK,
                    "--network-alias",
                    host,
                    "--systemd=always",
                    "--label",
                    f"{LABEL}={prefix}",
                    "--tmpfs",
                    "/tmp",  # noqa: S108 (a fresh tmpfs for the host, not a shared temp file)
                    *FLAVOR_RUN_ARGS.get(flavor, []),
                    *(run_args or []),
                    image,
                    "/sbin/init",
                ],
                stdout=subprocess.DEVNULL,
            )  # noqa: S108 (a tmpfs mount)
            run(["podman", "cp", f"{key}.pub", f"{name}:/root/.ssh/authorized_keys"])
            run(["podman", "exec", name, "chown", "root:root", "/root/.ssh/authorized_keys"])
        started.append(name)
    result = []
    for host, name in zip(hosts, started, strict=True):
        address = host_address(name)
        wait_for_ssh(address)
        result.append(
            {
                "name": host,
                "container": name,
                "address": address,
                "ssh_user": "root",
                "ssh_port": 22,
                "ssh_private_key_file": str(key),
            }
        )
    return result


def running(prefix: str | None) -> list[dict]:
    label = f"{LABEL}={prefix}" if prefix else LABEL
    out = run(["podman", "ps", "-a", "--filter", f"label={label}", "--format", "json"], capture=True).stdout
    hosts = []
    for entry in json.loads(out or "[]"):
        name = entry["Names"][0]
        host_prefix = entry["Labels"][LABEL]
        hosts.append({"name": name[len(host_prefix) + 1 :], "container": name, "prefix": host_prefix})
    return hosts


def down(prefix: str | None) -> None:
    names = [h["container"] for h in running(prefix)]
    if names:
        remove_containers(names)


def remove_containers(names: list[str]) -> None:
    """Remove containers, running or not. A container whose systemd is halting while podman kills it answers
    "container state improper: stopped" to the first try; the second try removes the stopped container."""
    if run(["podman", "rm", "-f", "-t", "2", *names], check=False, stdout=subprocess.DEVNULL).returncode:
        run(["podman", "rm", "-f", "--ignore", "-t", "2", *names], stdout=subprocess.DEVNULL)


def inventory(hosts: list[dict]) -> str:
    lines = ["[all]"]
    for h in hosts:
        lines.append(
            f"{h['name']} ansible_host={h['address']} ansible_user={h['ssh_user']} "
            f"ansible_ssh_private_key_file={h['ssh_private_key_file']}"
        )
    lines += [
        "",
        "[all:vars]",
        "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'",
        "ansible_python_interpreter=/usr/bin/python3",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuaas testhosts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run_command(parser.parse_args(argv))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="testhosts_command", required=True)
    p_image = sub.add_parser("image", help="build the test host image if it is missing")
    p_image.add_argument("--flavor", choices=sorted(IMAGES), default="slurm")
    p_image.add_argument("--rebuild", action="store_true")
    p_up = sub.add_parser("up", help="start hosts (idempotent) and print them as JSON")
    p_up.add_argument("--prefix", required=True)
    p_up.add_argument("--flavor", choices=sorted(IMAGES), default="slurm")
    p_up.add_argument("hosts", nargs="+")
    p_down = sub.add_parser("down", help="remove hosts")
    group = p_down.add_mutually_exclusive_group(required=True)
    group.add_argument("--prefix")
    group.add_argument("--all", action="store_true")
    p_inv = sub.add_parser("inventory", help="print an ini inventory of running hosts")
    p_inv.add_argument("--prefix", required=True)


def run_command(args: argparse.Namespace) -> int:
    if not shutil.which("podman"):
        raise SystemExit("testhosts: podman is not installed; run scripts/setup.sh first")
    if args.testhosts_command == "image":
        print(build(args.flavor, args.rebuild))
    elif args.testhosts_command == "up":
        print(json.dumps(up(args.prefix, args.hosts, args.flavor), indent=2))
    elif args.testhosts_command == "down":
        down(None if args.all else args.prefix)
    elif args.testhosts_command == "inventory":
        hosts = [
            dict(h, address=host_address(h["container"]), ssh_user="root", ssh_private_key_file=str(SSH_KEY))
            for h in running(args.prefix)
        ]
        print(inventory(hosts), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
