"""Runs inside a test host (`python3 - '<json>'`): rebuilds installed Debian packages under new versions
into a flat apt repository, so tests can pin, upgrade and downgrade without any mirror.

Argument (JSON): {"repo": dir, "suffixes": ["gpuaas1", ...], "groups": [["munge", "libmunge2"], ...]}.
The packages of one group share a version (one source package): each suffix makes "<version>+<suffix>"
of every one of them, with their exact dependencies on each other ("(= <version>)") moved along. The
files, owners, modes and maintainer scripts are those of the installed package. Prints
{"<package>": "<installed version>", ...}.
"""

import email.utils
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

INFO = Path("/var/lib/dpkg/info")
SCRIPTS = ("preinst", "postinst", "prerm", "postrm", "config", "templates", "conffiles", "triggers", "shlibs")
DROPPED = {"Status", "Conffiles", "Config-Version"}
RELATIONS = ("Depends", "Pre-Depends", "Recommends", "Breaks", "Replaces", "Conflicts")


def query(*args):
    return subprocess.run(["dpkg-query", *args], capture_output=True, text=True, check=True).stdout


def control(package):
    fields, key = {}, None
    for line in query("-s", package).splitlines():
        if line[:1] in (" ", "\t") and key:
            fields[key] += "\n" + line
        elif ":" in line:
            key, value = line.split(":", 1)
            fields[key] = value.strip()
    return fields


def copy_entry(path, root):
    target = root / path.lstrip("/")
    info = os.lstat(path)
    # A directory first: on a merged-/usr host /lib is a link to a directory the package ships as one.
    if os.path.isdir(path):
        info = os.stat(path)
        target.mkdir(parents=True, exist_ok=True)
        os.chmod(target, info.st_mode & 0o7777)
    elif os.path.islink(path):
        target.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.readlink(path), target)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    os.lchown(target, info.st_uid, info.st_gid)


def build(package, version, new_version, repo):
    fields = {k: v for k, v in control(package).items() if k not in DROPPED}
    fields["Version"] = new_version
    for relation in RELATIONS:
        if relation in fields:
            fields[relation] = fields[relation].replace(f"(= {version})", f"(= {new_version})")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        (root / "DEBIAN").mkdir(parents=True)
        for path in query("-L", package).splitlines():
            if path.startswith("/") and os.path.lexists(path) and path != "/.":
                copy_entry(path, root)
        arch_name = f"{package}:{fields.get('Architecture', '')}"
        for script in SCRIPTS:
            for name in (package, arch_name):
                if (INFO / f"{name}.{script}").exists():
                    shutil.copy2(INFO / f"{name}.{script}", root / "DEBIAN" / script)
        (root / "DEBIAN/control").write_text("".join(f"{k}: {v}\n" for k, v in fields.items()))
        deb = repo / f"{package}_{new_version}_{fields.get('Architecture', 'all')}.deb"
        subprocess.run(["dpkg-deb", "-Zgzip", "-z1", "--build", str(root), str(deb)], check=True,
                       capture_output=True)


def index(repo):
    entries = []
    for deb in sorted(repo.glob("*.deb")):
        data = deb.read_bytes()
        head = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True).stdout
        entries.append(head.rstrip("\n") + f"\nFilename: ./{deb.name}\nSize: {len(data)}\n"
                       f"SHA256: {hashlib.sha256(data).hexdigest()}\n")
    packages = "\n".join(entries).encode()
    (repo / "Packages").write_bytes(packages)
    date = email.utils.formatdate(usegmt=True)
    (repo / "Release").write_text(
        f"Date: {date}\nSHA256:\n {hashlib.sha256(packages).hexdigest()} {len(packages)} Packages\n")


def main():
    request = json.loads(sys.argv[1])
    repo = Path(request["repo"])
    repo.mkdir(parents=True, exist_ok=True)
    installed = {}
    for group in request["groups"]:
        version = query("-W", "-f=${Version}", group[0])
        for package in group:
            installed[package] = query("-W", "-f=${Version}", package)
            for suffix in request["suffixes"]:
                build(package, version, f"{version}+{suffix}", repo)
    index(repo)
    print(json.dumps(installed))


if __name__ == "__main__":
    main()
