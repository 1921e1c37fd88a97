"""The embedded PostgreSQL: a server of the service's own, run as a child process in a directory of its own.

Without DATABASE_URL, the `gpuaas` commands run PostgreSQL from `postgres_bin_dir` (default: the
newest server Debian's `postgresql` package installed, /usr/lib/postgresql/<major>/bin) in `data_dir`:

    data_dir/          0700, created if missing
      pgdata/          the cluster (initdb on first start; PG_VERSION names its major version)
      run/             the Unix socket, mode 0700: the server listens on no TCP port
      lock             serializes start-up between processes
      server.log       the server's own log

What it promises (issue 11):
- it changes no permission outside data_dir, and adds no user: as root, where PostgreSQL refuses to
  run, the server runs in a user namespace of its own that maps root to an unprivileged id, so inside
  it is not root while outside its files belong to root like every other file of the service;
- it stops with the process that started it (its owner): the owner stops it on exit (fast shutdown),
  and the kernel sends it SIGINT (fast shutdown) if the owner dies without doing so (PR_SET_PDEATHSIG);
- processes that find it running (a worker beside `serve`, `gpuaas admin bootstrap`) attach to it and
  leave it running.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import hashlib
import logging
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

log = logging.getLogger(__name__)

PORT = 5432  # names the socket file only: the server listens on no TCP port
SUPERUSER = "postgres"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
_SUN_PATH_MAX = 100  # sockaddr_un.sun_path is 108 bytes; leave room for the ".s.PGSQL.NNNN" name and NUL


class EmbeddedError(RuntimeError):
    """The embedded server cannot start; the message says why and what to do."""


def debian_bin_dirs() -> list[Path]:
    """Server binaries Debian's postgresql-<major> packages installed, newest first."""
    root = Path("/usr/lib/postgresql")
    found = [d / "bin" for d in root.glob("*") if (d / "bin" / "postgres").is_file() and d.name.isdigit()]
    return sorted(found, key=lambda p: int(p.parent.name), reverse=True)


def find_bin_dir(configured: Path | None = None) -> Path:
    if configured is not None:
        if not (Path(configured) / "postgres").is_file() or not (Path(configured) / "initdb").is_file():
            raise EmbeddedError(f"GPUAAS_POSTGRES_BIN_DIR={configured} has no postgres and initdb")
        return Path(configured)
    found = debian_bin_dirs()
    if found:
        return found[0]
    on_path = shutil.which("postgres")
    if on_path and shutil.which("initdb", path=str(Path(on_path).parent)):
        return Path(on_path).parent
    raise EmbeddedError(
        "no PostgreSQL server binaries for the embedded database: install Debian's `postgresql` package "
        "(apt-get install postgresql), set GPUAAS_POSTGRES_BIN_DIR to a directory holding postgres and "
        "initdb, or set DATABASE_URL to use your own server")


def server_major(bin_dir: Path) -> int:
    out = subprocess.run([str(bin_dir / "postgres"), "--version"], check=True, capture_output=True,
                         text=True).stdout
    match = re.search(r"(\d+)(?:\.\d+)?", out)
    if not match:
        raise EmbeddedError(f"cannot read the version of {bin_dir / 'postgres'}: {out.strip()!r}")
    return int(match.group(1))


def _needs_userns() -> bool:
    return os.geteuid() == 0


def _inner_id() -> tuple[int, int]:
    """The unprivileged ids root is mapped to inside the server's user namespace (no user is added:
    only the kernel's mapping changes, and only for that process)."""
    try:
        entry = pwd.getpwnam("nobody")
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return 65534, 65534


class EmbeddedPostgres:
    def __init__(self, data_dir: Path, bin_dir: Path | None = None):
        self.data_dir = Path(data_dir).absolute()
        self._configured_bin_dir = bin_dir
        self.process: subprocess.Popen | None = None  # set while this process owns the server
        self._uri: str | None = None

    # -- layout ------------------------------------------------------------------------------------

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pgdata"

    @property
    def run_dir(self) -> Path:
        """Where the socket lives: data_dir/run, or (when that path is too long for a Unix socket) a
        directory of the server's own under the temp dir, named after data_dir."""
        own = self.data_dir / "run"
        if len(str(own)) + len(f"/.s.PGSQL.{PORT}") <= _SUN_PATH_MAX:
            return own
        digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"gpuaas-pg-{digest}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "server.log"

    @property
    def owned(self) -> bool:
        return self.process is not None

    @property
    def uri(self) -> str:
        if self._uri is None:
            raise EmbeddedError("the embedded PostgreSQL is not started")
        return self._uri

    # -- start -------------------------------------------------------------------------------------

    def start(self) -> str:
        """Start the server, or attach to the one already running in data_dir; returns its URI."""
        _own_dir(self.data_dir)
        with self._locked():
            running = self._running()
            if running is None:
                self._check_layout()
                bin_dir = find_bin_dir(self._configured_bin_dir)
                if not (self.pgdata / "PG_VERSION").is_file():
                    self._initdb(bin_dir)
                self._check_version(bin_dir)
                running = self._launch(bin_dir)
        return self._set_uri(*running)

    def attach(self) -> str | None:
        """The URI of the server running in data_dir, or None when none runs (nothing is started)."""
        if not self.pgdata.is_dir():
            return None
        running = self._running()
        return self._set_uri(*running) if running else None

    def _set_uri(self, socket_dir: Path, port: int) -> str:
        self._uri = f"postgresql://{SUPERUSER}@/postgres?host={quote(str(socket_dir), safe='')}&port={port}"
        return self._uri

    def _running(self) -> tuple[Path, int] | None:
        """(socket dir, port) of a live server in pgdata, waiting out one that is starting or stopping."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            info = self._pid_file()
            if info is None:
                return None
            pid, port, socket_dir, status = info
            if not _alive(pid) or not _is_postgres(pid):
                return None  # a stale pid file: postgres itself checks and replaces it
            if status == "ready" and (socket_dir / f".s.PGSQL.{port}").exists():
                return socket_dir, port
            time.sleep(0.05)  # starting, or stopping: see how it ends
        raise EmbeddedError(f"the PostgreSQL server in {self.pgdata} neither became ready nor stopped "
                            f"in {START_TIMEOUT:.0f} s (see {self.log_file})")

    def _pid_file(self) -> tuple[int, int, Path, str] | None:
        try:
            lines = (self.pgdata / "postmaster.pid").read_text().splitlines()
        except (FileNotFoundError, UnicodeDecodeError):
            return None
        if len(lines) < 8 or not lines[0].strip().isdigit():
            return None  # being written
        return int(lines[0]), int(lines[3]), Path(lines[4].strip()), lines[7].strip()

    def _check_layout(self) -> None:
        if (self.data_dir / "PG_VERSION").is_file():
            version = (self.data_dir / "PG_VERSION").read_text().strip()
            raise EmbeddedError(
                f"{self.data_dir} holds a PostgreSQL {version} cluster from an earlier release (pgserver): "
                "dump it with that release and restore it into the new embedded server, as "
                "docs/operator-guide.md describes ('Moving an embedded database from pgserver')")

    def _check_version(self, bin_dir: Path) -> None:
        have = (self.pgdata / "PG_VERSION").read_text().strip()
        major = server_major(bin_dir)
        if have != str(major):
            raise EmbeddedError(
                f"{self.pgdata} holds PostgreSQL {have} data and {bin_dir} is PostgreSQL {major}: back up with "
                f"PostgreSQL {have}'s pg_dump and restore into a new data_dir (docs/operator-guide.md, "
                "'Backup and restore'), or set GPUAAS_POSTGRES_BIN_DIR to PostgreSQL {have}'s binaries")

    def _initdb(self, bin_dir: Path) -> None:
        staging = self.data_dir / "pgdata.init"
        shutil.rmtree(staging, ignore_errors=True)
        started = time.monotonic()
        proc = subprocess.run(
            self._child([str(bin_dir / "initdb"), "-D", str(staging), "-U", SUPERUSER, "--auth=trust",
                         "-E", "UTF8", "--no-locale", "--no-instructions"]),
            stdin=subprocess.DEVNULL, capture_output=True, text=True, env=_server_env())
        if proc.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise EmbeddedError(f"initdb failed in {staging}: {_last_lines(proc.stderr or proc.stdout)}")
        staging.rename(self.pgdata)  # a half-made cluster never looks like one
        log.info("embedded PostgreSQL: new cluster in %s (%.1f s)", self.pgdata, time.monotonic() - started)

    def _launch(self, bin_dir: Path) -> tuple[Path, int]:
        run_dir = self.run_dir
        _own_dir(run_dir)
        started = time.monotonic()
        with self.log_file.open("ab") as out:
            os.chmod(self.log_file, 0o600)
            self.process = subprocess.Popen(
                self._child([str(bin_dir / "postgres"), "-D", str(self.pgdata), "-p", str(PORT),
                             "-c", "listen_addresses=", "-c", f"unix_socket_directories={run_dir}",
                             "-c", "unix_socket_permissions=0700"]),
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=_server_env(),
                # its own session: a Ctrl-C meant for the service reaches the server only through the owner
                start_new_session=True)
        _OWNED.append(self)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code, self.process = self.process.returncode, None
                raise EmbeddedError(f"the embedded PostgreSQL exited with {code} at start: "
                                    f"{_last_lines(_tail(self.log_file))} (log: {self.log_file})")
            info = self._pid_file()
            if info and info[0] == self.process.pid and info[3] == "ready":
                log.info("embedded PostgreSQL %s ready in %.2f s (pid %d)", self.pgdata,
                         time.monotonic() - started, self.process.pid)
                return info[2], info[1]
            time.sleep(0.02)
        self.stop()
        raise EmbeddedError(f"the embedded PostgreSQL did not become ready in {START_TIMEOUT:.0f} s "
                            f"(log: {self.log_file})")

    def _child(self, command: list[str]) -> list[str]:
        """`command` run through this module's child entry point: PR_SET_PDEATHSIG, and as root a user
        namespace of its own (see _child_main)."""
        flags = ["--parent", str(os.getpid())]
        if _needs_userns():
            flags.append("--userns")
        return [sys.executable, "-m", __name__, *flags, "--", *command]

    @contextlib.contextmanager
    def _locked(self):
        fd = os.open(self.data_dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # -- stop --------------------------------------------------------------------------------------

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop the server if this process started it (fast shutdown: clients are disconnected, the
        cluster is checkpointed); an attached process leaves it running."""
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(ValueError):
            _OWNED.remove(self)
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("embedded PostgreSQL did not stop in %.0f s: immediate shutdown", timeout)
                process.send_signal(signal.SIGQUIT)
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        log.info("embedded PostgreSQL %s stopped", self.pgdata)

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


_OWNED: list[EmbeddedPostgres] = []


@atexit.register
def _stop_owned() -> None:
    for server in list(_OWNED):
        server.stop()


def _own_dir(path: Path) -> None:
    """Create `path` (0700) or check that it is ours: nothing outside it changes."""
    path.mkdir(parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.geteuid():
        raise EmbeddedError(f"{path} belongs to uid {st.st_uid}, not to this process's user ({os.geteuid()})")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)  # the directory is the server's own


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_postgres(pid: int) -> bool:
    """Whether pid runs a postgres binary (a stale pid file's pid may belong to another process now)."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return True  # cannot tell (no /proc): trust the pid file
    return Path(argv0.decode(errors="replace")).name.startswith("postgres")


def _server_env() -> dict[str, str]:
    keep = ("PATH", "TZ")
    return {k: v for k, v in os.environ.items() if k in keep} | {"LC_ALL": "C", "LANG": "C"}


def _tail(path: Path, size: int = 4000) -> str:
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - size))
            return f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def _last_lines(text: str, n: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-n:])


# -- the child entry point -------------------------------------------------------------------------

_CLONE_NEWUSER = 0x10000000
_PR_SET_PDEATHSIG = 1


def _child_main(argv: list[str]) -> None:
    """`python -m gpuaas_api.embedded_db [--parent PID] [--userns] -- COMMAND...`: exec COMMAND with
    PR_SET_PDEATHSIG=SIGINT (fast shutdown once the parent dies) and, with --userns, in a new user
    namespace where the caller's uid and gid are seen as nobody's (PostgreSQL refuses to run as root)."""
    split = argv.index("--")
    flags, command = argv[:split], argv[split + 1:]
    libc = ctypes.CDLL(None, use_errno=True)
    if "--userns" in flags:
        outer_uid, outer_gid = os.geteuid(), os.getegid()
        if libc.unshare(_CLONE_NEWUSER) != 0:
            err = ctypes.get_errno()
            sys.stderr.write(f"gpuaas embedded PostgreSQL: cannot create a user namespace ({os.strerror(err)}); "
                             "PostgreSQL does not run as root: run gpuaas as an unprivileged user, or set "
                             "DATABASE_URL\n")
            raise SystemExit(70)
        inner_uid, inner_gid = _inner_id()
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{inner_uid} {outer_uid} 1\n")
        Path("/proc/self/gid_map").write_text(f"{inner_gid} {outer_gid} 1\n")
    if "--parent" in flags:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGINT, 0, 0, 0)
        if os.getppid() != int(flags[flags.index("--parent") + 1]):
            raise SystemExit(0)  # the parent is already gone
    os.execv(command[0], command)  # noqa: S606 (the server's own binary, from our own argv)


if __name__ == "__main__":
    _child_main(sys.argv[1:])
