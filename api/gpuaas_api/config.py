"""Settings read from the environment; one place so the CLI, the app and workers agree."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from .operations.kinds import KINDS as OPERATION_KINDS


def _state_dir() -> Path:
    """Everything the service keeps on disk lives here (GPUAAS_STATE_DIR, default the user's state dir)."""
    return _env_path("GPUAAS_STATE_DIR") or platformdirs.user_state_path("gpuaas", appauthor=False)


def _default_data_dir() -> Path:
    return _state_dir() / "postgres"


@dataclass(frozen=True)
class Settings:
    # Unset means: run an embedded PostgreSQL (pgserver) in data_dir.
    database_url: str | None = field(default_factory=lambda: os.environ.get("DATABASE_URL") or None)
    data_dir: Path = field(
        default_factory=lambda: Path(os.environ["GPUAAS_DATA_DIR"])
        if os.environ.get("GPUAAS_DATA_DIR")
        else _default_data_dir()
    )
    pool_min: int = field(default_factory=lambda: int(os.environ.get("GPUAAS_POOL_MIN", "2")))
    pool_max: int = field(default_factory=lambda: int(os.environ.get("GPUAAS_POOL_MAX", "10")))
    # Seconds a request waits for a connection before it gets 503 database_unavailable.
    pool_timeout: float = field(default_factory=lambda: float(os.environ.get("GPUAAS_POOL_TIMEOUT", "5")))
    # Per-project quota on instances that are not deleted (0: none).
    max_instances_per_project: int = field(
        default_factory=lambda: int(os.environ.get("GPUAAS_MAX_INSTANCES_PER_PROJECT", "100"))
    )
    default_token_ttl_days: int = field(
        default_factory=lambda: int(os.environ.get("GPUAAS_TOKEN_TTL_DAYS", "30"))
    )
    # Longest token lifetime per kind of principal; a token also never outlives the token that minted it.
    token_max_days_user: int = field(
        default_factory=lambda: int(os.environ.get("GPUAAS_TOKEN_MAX_DAYS_USER", "90")))
    token_max_days_service_account: int = field(
        default_factory=lambda: int(os.environ.get("GPUAAS_TOKEN_MAX_DAYS_SERVICE_ACCOUNT", "365")))
    # How often an open event stream re-checks its token and permission (revocation ends it).
    stream_recheck_seconds: float = field(
        default_factory=lambda: float(os.environ.get("GPUAAS_STREAM_RECHECK_SECONDS", "30")))
    max_body_bytes: int = field(default_factory=lambda: int(os.environ.get("GPUAAS_MAX_BODY_BYTES", str(1 << 20))))
    # Largest artifact upload (PUT /v1/content/{digest}, streamed, outside max_body_bytes).
    max_content_bytes: int = field(
        default_factory=lambda: int(os.environ.get("GPUAAS_MAX_CONTENT_BYTES", str(256 << 20))))
    # The registry token service (GET /v1/registry/token): the `service` and `issuer` a registry with
    # `auth: token` is configured with.
    registry_token_service: str = field(
        default_factory=lambda: os.environ.get("GPUAAS_REGISTRY_TOKEN_SERVICE", "gpuaas-registry"))
    registry_token_issuer: str = field(
        default_factory=lambda: os.environ.get("GPUAAS_REGISTRY_TOKEN_ISSUER", "gpuaas"))


# Operations (issue 4) ----------------------------------------------------------------------------

DEFAULT_OPERATION_TIMEOUTS = {k.name: k.timeout_s for k in OPERATION_KINDS.values()}


def _timeouts() -> dict[str, int]:
    """GPUAAS_OPERATION_TIMEOUTS="deploy=7200,refresh=60" overrides single kinds."""
    out = dict(DEFAULT_OPERATION_TIMEOUTS)
    for item in filter(None, os.environ.get("GPUAAS_OPERATION_TIMEOUTS", "").split(",")):
        kind, _, seconds = item.partition("=")
        if kind.strip() not in out:
            raise ValueError(f"GPUAAS_OPERATION_TIMEOUTS: unknown operation kind {kind!r}")
        out[kind.strip()] = int(seconds)
    return out


def _env_path(name: str) -> Path | None:
    return Path(os.environ[name]) if os.environ.get(name) else None


@dataclass(frozen=True)
class OperationSettings:
    state_dir: Path = field(default_factory=_state_dir)
    ssh_private_key_file: Path | None = field(default_factory=lambda: _env_path("GPUAAS_SSH_PRIVATE_KEY_FILE"))
    ssh_host_key_checking: bool = field(default_factory=lambda: os.environ.get(
        "GPUAAS_SSH_HOST_KEY_CHECKING", "true").lower() not in ("0", "false", "no"))
    # Fernet key (urlsafe base64, 32 bytes); unset: a dev key generated into state_dir (with a warning).
    secret_key: str | None = field(default_factory=lambda: os.environ.get("GPUAAS_SECRET_KEY") or None)
    lease_seconds: float = field(default_factory=lambda: float(os.environ.get("GPUAAS_LEASE_SECONDS", "30")))
    max_attempts: int = field(default_factory=lambda: int(os.environ.get("GPUAAS_MAX_ATTEMPTS", "3")))
    poll_seconds: float = field(default_factory=lambda: float(os.environ.get("GPUAAS_WORKER_POLL_SECONDS", "1")))
    # Per-project quota on queued + running operations (0: none); more is refused with 429.
    max_open_operations_per_project: int = field(
        default_factory=lambda: int(os.environ.get("GPUAAS_MAX_OPEN_OPERATIONS_PER_PROJECT", "50")))
    timeouts: dict[str, int] = field(default_factory=_timeouts)
    # Registries (host[:port]) whose pulls this service authorizes (their token realm is
    # /v1/registry/token): a run of a workload from one of them gets a pull credential of its own.
    pull_credential_registries: frozenset[str] = field(default_factory=lambda: frozenset(
        r.strip() for r in os.environ.get("GPUAAS_PULL_CREDENTIAL_REGISTRIES", "").split(",") if r.strip()))
