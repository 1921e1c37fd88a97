from __future__ import annotations

import argparse
import signal


def register(sub: argparse._SubParsersAction) -> None:
    from ..cli import log_level

    p = sub.add_parser("serve", help="run the API (migrates on start; embedded PostgreSQL without DATABASE_URL)")
    p.add_argument("--host", default=None, help="address to listen on (default: setting host, GPUAAS_HOST, 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default: setting port, GPUAAS_PORT, 8000)")
    p.add_argument("--log-level", type=log_level, default=argparse.SUPPRESS,
                   help="DEBUG, INFO, WARNING, ERROR or CRITICAL, for the service and uvicorn alike")
    p.set_defaults(func=run)


class _Stopped(Exception):
    pass


def _stop(signum, _frame):
    # uvicorn shuts down gracefully on SIGTERM and then raises the signal again: leaving through an
    # exception (not the default handler) lets the embedded PostgreSQL this process started stop in
    # order, and a stop that was asked for ends with status 0 (systemd and podman read it as success).
    raise _Stopped()


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from .. import db
    from ..app import SERVER_OPTIONS, create_app
    from ..config import OperationSettings, Settings
    from ..secrets.service import warn_development_key

    model = args.settings
    operation_settings = OperationSettings.from_model(model)
    warn_development_key(operation_settings)
    signal.signal(signal.SIGTERM, _stop)
    try:
        with db.database_url(Settings.from_model(model)) as url:
            app = create_app(settings=Settings.from_model(model, database_url=url))
            app.state.operation_settings = operation_settings
            uvicorn.run(app, host=args.host or model.host, port=args.port or model.port,
                        log_level=args.log_level.lower(), **SERVER_OPTIONS)
    except _Stopped:
        pass
    return 0
