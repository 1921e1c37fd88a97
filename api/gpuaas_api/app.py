"""The FastAPI application: routers per domain, the error envelope, correlation ids, health."""

from __future__ import annotations

import json
import logging
from contextlib import asynccontextmanager

import h11
from fastapi import FastAPI, Request, Response
from pydantic import BaseModel
from uvicorn.protocols.http.h11_impl import H11Protocol

from . import __version__, correlation, docs, errors
from . import db as dbmod
from .access.routes import api as access_api
from .admin_routes import api as admin_api
from .allocations.routes import api as allocations_api
from .audit.routes import api as audit_api
from .catalog.routes import api as catalog_api
from .config import Settings
from .console import api as console_api
from .content.routes import STREAMED_PREFIX, content_store
from .content.routes import api as content_api
from .correlation import CorrelationMiddleware
from .executor import runner
from .iam.routes import api as iam_api
from .instances.routes import api as instances_api
from .metering.routes import api as usage_api
from .observability import metrics
from .observability.middleware import ObservabilityMiddleware
from .operations.routes import api as operations_api
from .policy.routes import api as policy_api
from .registry.routes import api as registry_api
from .registry.tenant_routes import api as tenant_registries_api
from .scheduler.routes import api as scheduler_api
from .sharing.routes import api as sharing_api

log = logging.getLogger(__name__)

ROUTERS = [iam_api, catalog_api, policy_api, allocations_api, instances_api, operations_api, audit_api, admin_api,
           content_api, registry_api, scheduler_api, access_api, sharing_api, usage_api, tenant_registries_api]


class Health(BaseModel):
    status: str


class BodyLimitMiddleware:
    """Refuses a request body over max_bytes with 413 in the envelope, whether or not it declares a
    Content-Length: the body is read (up to the limit) before the app sees any of it. Paths under
    `streamed_prefixes` pass untouched: their routes stream the body and enforce their own limit."""

    def __init__(self, app, max_bytes: int, streamed_prefixes: tuple[str, ...] = ()):
        self.app = app
        self.max_bytes = max_bytes
        self.streamed_prefixes = streamed_prefixes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"].startswith(self.streamed_prefixes):
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), b"")
        too_large = declared.isdigit() and int(declared) > self.max_bytes
        chunks, size, last = [], 0, None
        while not too_large:
            last = await receive()
            if last["type"] != "http.request":
                break  # a disconnect: handed to the app as it is
            chunks.append(last.get("body", b""))
            size += len(chunks[-1])
            too_large = size > self.max_bytes
            if not last.get("more_body"):
                last = None
                break
        if too_large:
            response = errors.envelope(413, "payload_too_large", f"request body exceeds {self.max_bytes} bytes",
                                       {"max_bytes": self.max_bytes}, {"Connection": "close"})
            await response(scope, receive, send)
            return
        pending = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]
        if last is not None:
            pending.append(last)

        async def replay():
            return pending.pop(0) if pending else await receive()

        await self.app(scope, replay, send)


class EnvelopeH11Protocol(H11Protocol):
    """uvicorn answers a request it cannot parse (a raw invalid byte in the query string) itself, in
    plain text, before the app sees it. This answers it in the error envelope instead."""

    def send_400_response(self, msg: str) -> None:
        cid = correlation.new_id()
        body = json.dumps({"error": {"code": "bad_request", "message": "malformed HTTP request",
                                     "details": {}, "correlation_id": cid}}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (correlation.HEADER.lower().encode(), cid.encode()), (b"connection", b"close")]
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                      h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()


# What `gpuaas serve` passes to uvicorn. Logging is the service's (gpuaas_api.observability.logs):
# uvicorn's loggers go through its handler and format, and the app writes the access line itself
# (with the route template, duration and the request's ids, which uvicorn's own line cannot carry).
SERVER_OPTIONS = {"http": EnvelopeH11Protocol, "log_config": None, "access_log": False}


def create_app(database: dbmod.Database | None = None, settings: Settings | None = None) -> FastAPI:
    """With `database`, the caller owns the pool (tests, benchmarks, workers embedding the API).
    Without, startup resolves DATABASE_URL or the embedded server, migrates, and opens a pool."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # The credential route reads runtime access material in run directories of this process: one that a killed
        # serve left behind goes now (a worker sweeps its own kinds the same way as it starts).
        runner.sweep_scratch()
        owned = None
        if database is None:
            cfg = app.state.settings
            url = dbmod.resolve_database_url(cfg)
            dbmod.upgrade(url)
            owned = dbmod.Database(url, min_size=cfg.pool_min, max_size=cfg.pool_max, timeout=cfg.pool_timeout)
            owned.open()
            app.state.db = owned
            # Content this machine kept on disk before the database held it: every replica needs it.
            saved = content_store(app).publish_local()
            if saved:
                log.info("saved %d blob(s) of this machine's content store into the database", len(saved))
        try:
            yield
        finally:
            if owned is not None:
                owned.close()

    app = FastAPI(
        title="gpuaas.apps control service",
        version=__version__,
        description="IAM, catalog with artifact trust, entitlements and policy, allocations, and "
                    "project-owned clustered app instances. Every error uses one envelope; every "
                    "response carries X-Correlation-ID.",
        lifespan=lifespan,
        docs_url=None, redoc_url=None,  # served below from local assets: no CDN on an air-gapped host
    )
    if database is not None:
        app.state.db = database
    app.state.settings = settings or Settings()
    errors.install(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=app.state.settings.max_body_bytes,
                       streamed_prefixes=(STREAMED_PREFIX,))
    app.add_middleware(ObservabilityMiddleware, metrics_enabled=app.state.settings.metrics_enabled)
    app.add_middleware(CorrelationMiddleware)  # outermost: every answer above carries the correlation id
    for r in ROUTERS:
        app.include_router(r)

    docs.install(app)
    app.include_router(console_api)  # the web console at /console/ (gpuaas_api.console, not in the schema)

    @app.get("/healthz", operation_id="health_live", response_model=Health, tags=["health"])
    def healthz():
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", operation_id="health_ready", response_model=Health, tags=["health"],
             responses={503: {"model": errors.ErrorEnvelope, "description": "Not ready"}})
    def readyz(request: Request):
        """Readiness: the database answers and every migration is applied."""
        try:
            with request.app.state.db.transaction() as conn:
                pending = dbmod.pending_migrations(conn)
        except Exception as exc:  # noqa: BLE001 - any database failure means not ready
            raise errors.ApiError(503, "not_ready", "database unavailable", {"error": type(exc).__name__}) from exc
        if pending:
            raise errors.ApiError(503, "not_ready", "migrations pending", {"pending": pending})
        return {"status": "ready"}

    if app.state.settings.metrics_enabled:
        networks = metrics.parse_networks(app.state.settings.metrics_allowed_networks)

        @app.get("/metrics", include_in_schema=False)
        def prometheus_metrics(request: Request):
            """Prometheus text format: this process's metrics and the queue's (docs/observability.md).
            Only peers in metrics_allowed_networks (loopback by default) may read it."""
            if not metrics.allowed(request.client.host if request.client else None, networks):
                raise errors.forbidden("/metrics is open to the networks in metrics_allowed_networks only")
            return Response(metrics.exposition(request.app.state.db), media_type=metrics.CONTENT_TYPE)

    return app
