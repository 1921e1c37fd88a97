"""Real containerized test hosts for gpuaas.apps: podman containers that boot systemd and run sshd.

Molecule scenarios use the images built here (podman driver); end-to-end tests and `make demo` start
SSH-reachable hosts with `up` and use them as allocations.

    gpuaas testhosts image [--flavor slurm|base] [--rebuild]   build the image once, then reuse it
    gpuaas testhosts up --prefix demo NAME...                   start hosts, print them as JSON
    gpuaas testhosts down --prefix demo | --all                 remove hosts started by this command
    gpuaas testhosts inventory --prefix demo                    print an ini inventory for running hosts

Images (built locally; no registry is reachable here):
    base   Debian bookworm with systemd, sshd and python3: packages get installed by the roles from the
           Debian mirror, as in production.
    slurm  base plus the Slurm, munge and MariaDB packages pre-installed (units disabled), so scenarios
           that are not about installation start fast.
"""

from __future__ import annotations

import argparse
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

IMAGES = {"base": "localhost/gpuaas-testhost:bookworm", "slurm": "localhost/gpuaas-testhost-slurm:bookworm"}


def run(cmd: list[str], check: bool = True, capture: bool = False, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, text=True, capture_output=capture, **kw)


def image_exists(ref: str) -> bool:
    return run(["podman", "image", "exists", ref], check=False).returncode == 0


def build_base(rebuild: bool) -> str:
    ref = IMAGES["base"]
    if image_exists(ref) and not rebuild:
        return ref
    with tempfile.TemporaryDirectory(prefix="gpuaas-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        print(f"testhosts: debootstrap bookworm into {rootfs} (about a minute)", file=sys.stderr)
        run(
            ["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", "bookworm", str(rootfs), MIRROR],
            stdout=subprocess.DEVNULL,
        )
        (rootfs / "etc/apt/sources.list").write_text(
            f"deb {MIRROR} bookworm main\ndeb {MIRROR} bookworm-updates main\n"
            "deb http://deb.debian.org/debian-security bookworm-security main\n"
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


def build_slurm(rebuild: bool) -> str:
    ref = IMAGES["slurm"]
    if image_exists(ref) and not rebuild:
        return ref
    base = build_base(rebuild=False)
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


def ensure_ssh_key() -> Path:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    if not SSH_KEY.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpuaas-testhosts", "-f", str(SSH_KEY)])
    return SSH_KEY


def ensure_network() -> None:
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


def up(prefix: str, hosts: list[str], flavor: str) -> list[dict]:
    image = build_slurm(False) if flavor == "slurm" else build_base(False)
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
        run(["podman", "rm", "-f", "-t", "2", *names], stdout=subprocess.DEVNULL)


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
        builder = build_slurm if args.flavor == "slurm" else build_base
        print(builder(args.rebuild))
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
