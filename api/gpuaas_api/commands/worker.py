from __future__ import annotations

import argparse
import signal


def register(sub: argparse._SubParsersAction) -> None:
    from ..cli import log_level

    p = sub.add_parser("worker", help="run operations from the queue (any number of workers may share the database)")
    p.add_argument("--concurrency", type=int, default=None,
                   help="operations this process runs at once (default: setting worker_concurrency, 1)")
    p.add_argument("--name", default=None, help="worker name in leases and events (default host:pid:random)")
    p.add_argument("--log-level", type=log_level, default=argparse.SUPPRESS,
                   help="DEBUG, INFO, WARNING, ERROR or CRITICAL")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import logging

    from .. import db
    from ..config import OperationSettings, Settings
    from ..executor.worker import Worker
    from ..secrets.service import warn_development_key

    model = args.settings
    concurrency = args.concurrency or model.worker_concurrency
    operation_settings = OperationSettings.from_model(model)
    warn_development_key(operation_settings)
    with db.database_url(Settings.from_model(model)) as url:
        db.upgrade(url)
        database = db.Database(url, min_size=1, max_size=2 + 3 * concurrency)
        database.open()
        worker = Worker(database, operation_settings, name=args.name, concurrency=concurrency)

        def stop(signum, _frame):
            # First signal: finish the runs in flight, claim nothing new. Second: leave now; the leases
            # expire and another worker re-queues the operations.
            if worker.stop.is_set():
                raise SystemExit(128 + signum)
            logging.getLogger(__name__).info("stopping after the runs in flight (signal again to leave now)")
            worker.stop.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        logging.getLogger(__name__).info("worker %s started (concurrency %d)", worker.name, concurrency)
        try:
            worker.serve()
        finally:
            database.close()
    return 0
