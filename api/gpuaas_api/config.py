"""Settings read from the environment; one place so the CLI, the app and workers agree."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs


def _default_data_dir() -> Path:
    return platformdirs.user_state_path("gpuaas", appauthor=False) / "postgres"


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
    default_token_ttl_days: int = field(
        default_factory=lambda: int(os.environ.get("GPUAAS_TOKEN_TTL_DAYS", "30"))
    )
