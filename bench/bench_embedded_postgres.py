"""Start time of the embedded PostgreSQL candidates (issue 11, item 3).

    .venv/bin/python bench/bench_embedded_postgres.py [--rounds 5] [--bin-dir NAME=DIR ...]

For each candidate, `--rounds` times: a cold start (an empty data directory: initdb, start, first
query) and a warm start (the same cluster again: start, first query), timed until `SELECT 1` answers
on a new connection. Candidates:

- `debian`: Debian's `postgresql` package started by the service as its child (gpuaas_api.embedded_db,
  the default), when /usr/lib/postgresql/<major>/bin exists;
- `pgserver`: the pgserver wheel through its own Python layer (`pgserver.get_server`), when installed;
- any `--bin-dir NAME=DIR`: another server's binaries (e.g. a wheel's `pginstall/bin`) run by
  gpuaas_api.embedded_db, so the figure is the binaries' and not a Python layer's.

Prints one table row per candidate (median and min of each kind) and exits 0.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from gpuaas_api import embedded_db  # noqa: E402


def first_query(uri: str) -> None:
    with psycopg.connect(uri) as conn:
        conn.execute("SELECT 1").fetchone()


def time_supervised(bin_dir: Path, root: Path) -> tuple[float, float]:
    data = root / "data"
    started = time.perf_counter()
    server = embedded_db.EmbeddedPostgres(data, bin_dir)
    first_query(server.start())
    cold = time.perf_counter() - started
    server.stop()
    started = time.perf_counter()
    first_query(server.start())
    warm = time.perf_counter() - started
    server.stop()
    return cold, warm


def time_pgserver(root: Path) -> tuple[float, float]:
    import pgserver

    data = root / "data"
    started = time.perf_counter()
    server = pgserver.get_server(data, cleanup_mode="stop")
    first_query(server.get_uri())
    cold = time.perf_counter() - started
    server.cleanup()
    started = time.perf_counter()
    server = pgserver.get_server(data, cleanup_mode="stop")
    first_query(server.get_uri())
    warm = time.perf_counter() - started
    server.cleanup()
    return cold, warm


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bin-dir", action="append", default=[], metavar="NAME=DIR")
    args = parser.parse_args()

    candidates: dict[str, object] = {}
    debian = embedded_db.debian_bin_dirs()
    if debian:
        candidates[f"debian postgresql-{debian[0].parent.name} (child of the service)"] = debian[0]
    try:
        import pgserver  # noqa: F401

        candidates["pgserver 0.1.4 (its own Python layer)"] = "pgserver"
    except ImportError:
        pass
    for item in args.bin_dir:
        name, _, path = item.partition("=")
        candidates[f"{name} (binaries run as the service's child)"] = Path(path)

    print("| candidate | PostgreSQL | cold start median s (min) | warm start median s (min) |")
    print("|---|---|---|---|")
    for name, how in candidates.items():
        colds, warms = [], []
        for _ in range(args.rounds):
            root = Path(tempfile.mkdtemp(prefix="gpuaas-bench-pg-"))
            try:
                cold, warm = time_pgserver(root) if how == "pgserver" else time_supervised(how, root)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            colds.append(cold)
            warms.append(warm)
        if how == "pgserver":
            import pgserver

            version = embedded_db.server_major(Path(pgserver.__file__).parent / "pginstall" / "bin")
        else:
            version = embedded_db.server_major(how)
        print(f"| {name} | {version} | {statistics.median(colds):.2f} ({min(colds):.2f}) "
              f"| {statistics.median(warms):.2f} ({min(warms):.2f}) |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
