"""The FastAPI application: routers per domain, the error envelope, correlation ids, health."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from pydantic import BaseModel

from . import __version__, errors
from . import db as dbmod
from .admin_routes import api as admin_api
from .allocations.routes import api as allocations_api
from .audit.routes import api as audit_api
from .catalog.routes import api as catalog_api
from .config import Settings
from .correlation import CorrelationMiddleware
from .iam.routes import api as iam_api
from .instances.routes import api as instances_api
from .operations.routes import api as operations_api
from .policy.routes import api as policy_api

ROUTERS = [iam_api, catalog_api, policy_api, allocations_api, instances_api, operations_api, audit_api, admin_api]


class Health(BaseModel):
    status: str


def create_app(database: dbmod.Database | None = None, settings: Settings | None = None) -> FastAPI:
    """With `database`, the caller owns the pool (tests, benchmarks, workers embedding the API).
    Without, startup resolves DATABASE_URL or the embedded server, migrates, and opens a pool."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        owned = None
        if database is None:
            cfg = settings or Settings()
            url = dbmod.resolve_database_url(cfg)
            dbmod.upgrade(url)
            owned = dbmod.Database(url, min_size=cfg.pool_min, max_size=cfg.pool_max)
            owned.open()
            app.state.db = owned
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
    )
    if database is not None:
        app.state.db = database
    errors.install(app)
    app.add_middleware(CorrelationMiddleware)
    for r in ROUTERS:
        app.include_router(r)

    @app.get("/healthz", response_model=Health, tags=["health"])
    def healthz():
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", response_model=Health, tags=["health"],
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

    return app
