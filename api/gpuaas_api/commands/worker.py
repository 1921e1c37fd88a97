from __future__ import annotations

import argparse
import signal


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("worker", help="run operations from the queue (any number of workers may share the database)")
    p.add_argument("--concurrency", type=int, default=1, help="operations this process runs at once (default 1)")
    p.add_argument("--name", default=None, help="worker name in leases and events (default host:pid:random)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import logging

    from .. import db
    from ..config import OperationSettings, Settings
    from ..executor.worker import Worker

    settings = Settings()
    url = db.resolve_database_url(settings)
    db.upgrade(url)
    database = db.Database(url, min_size=1, max_size=2 + 3 * args.concurrency)
    database.open()
    worker = Worker(database, OperationSettings(), name=args.name, concurrency=args.concurrency)

    def stop(signum, _frame):
        # First signal: finish the runs in flight, claim nothing new. Second: leave now; the leases
        # expire and another worker re-queues the operations.
        if worker.stop.is_set():
            raise SystemExit(128 + signum)
        logging.getLogger(__name__).info("stopping after the runs in flight (signal again to leave now)")
        worker.stop.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logging.getLogger(__name__).info("worker %s started (concurrency %d)", worker.name, args.concurrency)
    try:
        worker.serve()
    finally:
        database.close()
    return 0
