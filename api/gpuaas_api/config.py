"""The service's settings: one typed model (pydantic-settings) that serve, worker and the CLI all read.

Sources, strongest first: values passed in code, environment variables (`GPUAAS_<FIELD>`, and
`DATABASE_URL`), a TOML file named by `GPUAAS_CONFIG` (or `gpuaas --config FILE`) whose keys are the
field names, then the defaults below. A bad value is a `ConfigError` whose message is one line naming
the setting, e.g. `invalid setting GPUAAS_POOL_MAX (pool_max): Input should be a valid integer ...`.

`Settings` (the API's view) and `OperationSettings` (the operations' and workers' view) are frozen
dataclasses cut from that one model: `Settings()` reads the current environment and file, keyword
arguments override single fields, and `dataclasses.replace` works on them.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import ipaddress
import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import AliasChoices, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from .operations.kinds import KINDS as OPERATION_KINDS

DEFAULT_OPERATION_TIMEOUTS = {k.name: k.timeout_s for k in OPERATION_KINDS.values()}
CONFIG_ENV = "GPUAAS_CONFIG"
ENV_PREFIX = "GPUAAS_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# Variables outside GPUAAS_* that settings are read from.
OTHER_ENV = frozenset({"DATABASE_URL", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_EXPORTER"})
# Values never echoed in an error message.
SECRET_FIELDS = frozenset({"secret_key", "database_url"})


# The default of metering_settle_seconds (metering/service.py reads it as SETTLE).
METERING_SETTLE_SECONDS = 60.0

class ConfigError(ValueError):
    """A setting is missing, malformed or out of range; str() is one line that names it."""


def default_state_dir() -> Path:
    return platformdirs.user_state_path("gpuaas", appauthor=False)


def _env(*names: str) -> AliasChoices:
    return AliasChoices(*names)


class GpuaasSettings(BaseSettings):
    """Every setting of the control service, its workers and its CLI."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, case_sensitive=False, frozen=True, extra="forbid",
                                      populate_by_name=True, validate_default=True)

    # -- where things live ---------------------------------------------------------------------------
    # Everything the service keeps on disk: content store, collection cache, dev secret key, and (by
    # default) the embedded PostgreSQL.
    state_dir: Path = Field(default_factory=default_state_dir)
    # Unset: the embedded PostgreSQL (gpuaas_api.embedded_db) in data_dir. Production: your own server.
    database_url: str | None = Field(None, validation_alias=_env("DATABASE_URL", "GPUAAS_DATABASE_URL",
                                                                 "database_url"))
    # The embedded server's directory; default <state_dir>/postgres.
    data_dir: Path | None = None
    # The embedded server's binaries (postgres, initdb); default Debian's newest /usr/lib/postgresql/*/bin.
    postgres_bin_dir: Path | None = None

    # -- serve -------------------------------------------------------------------------------------
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    pool_min: int = Field(2, ge=0)
    pool_max: int = Field(10, ge=1)
    # Seconds a request waits for a connection before it gets 503 database_unavailable.
    pool_timeout: float = Field(5.0, gt=0)
    # Per-project quota on instances that are not deleted (0: none).
    max_instances_per_project: int = Field(100, ge=0)
    default_token_ttl_days: int = Field(30, ge=1, validation_alias=_env("GPUAAS_TOKEN_TTL_DAYS",
                                                                        "default_token_ttl_days"))
    # Longest token lifetime per kind of principal; a token also never outlives the token that minted it.
    token_max_days_user: int = Field(90, ge=1)
    token_max_days_service_account: int = Field(365, ge=1)
    # Most live (not revoked, not expired) tokens one principal may hold, whoever mints them.
    token_max_live_per_principal: int = Field(50, ge=1)
    # How often an open event stream re-checks its token and permission (revocation ends it).
    stream_recheck_seconds: float = Field(30.0, gt=0)
    max_body_bytes: int = Field(1 << 20, ge=1024)
    # Largest artifact upload (PUT /v1/content/{digest}, streamed, outside max_body_bytes).
    max_content_bytes: int = Field(256 << 20, ge=1)
    # The registry token service (GET /v1/registry/token): the `service` and `issuer` a registry with
    # `auth: token` is configured with.
    registry_token_service: str = Field("gpuaas-registry", min_length=1)
    registry_token_issuer: str = Field("gpuaas", min_length=1)

    # -- observability (docs/observability.md) ------------------------------------------------------
    # json or text; unset: json for serve and worker, text for the other commands.
    log_format: Literal["json", "text"] | None = None
    # GET /metrics on the API and the request latency histogram; off: neither.
    metrics_enabled: bool = True
    # Peers (CIDRs, comma-separated) that may read the API's /metrics; others get 403. Loopback only by
    # default: a Prometheus on another host is named here, or scrapes through a local proxy.
    metrics_allowed_networks: Annotated[tuple[str, ...], NoDecode] = ("127.0.0.0/8", "::1/128")
    # A worker's own /metrics (its operations, heartbeats, run events): unset, none.
    worker_metrics_port: int | None = Field(None, ge=0, le=65535)
    worker_metrics_host: str = "127.0.0.1"
    # Tracing: otlp, console or none; unset: otlp when otlp_endpoint is set, else off.
    trace_exporter: Literal["otlp", "console", "none"] | None = Field(
        None, validation_alias=_env("OTEL_TRACES_EXPORTER", "GPUAAS_TRACE_EXPORTER", "trace_exporter"))
    # The OTLP/HTTP collector's base URL (spans go to <url>/v1/traces), e.g. http://127.0.0.1:4318.
    otlp_endpoint: str | None = Field(None, validation_alias=_env("OTEL_EXPORTER_OTLP_ENDPOINT",
                                                                  "GPUAAS_OTLP_ENDPOINT", "otlp_endpoint"))

    # -- operations and workers --------------------------------------------------------------------
    ssh_private_key_file: Path | None = None
    ssh_host_key_checking: bool = True
    # A run reaches every host of its inventory at once (forks = host count), up to this many at a time.
    run_forks_max: int = Field(50, ge=1)
    # Fernet key (urlsafe base64, 32 bytes); unset: a dev key generated into state_dir (with a warning).
    secret_key: str | None = None
    # A claim's lease; a run whose worker has not renewed it for fence_seconds(lease_seconds) is stopped
    # (executor/worker.py, docs/operations.md "Fencing"), so the lease must leave a second of margin.
    lease_seconds: float = Field(30.0, ge=2)
    max_attempts: int = Field(3, ge=1)
    poll_seconds: float = Field(1.0, gt=0, validation_alias=_env("GPUAAS_WORKER_POLL_SECONDS", "poll_seconds"))
    worker_concurrency: int = Field(1, ge=1)
    # Day-2 health (health/): every running instance's status read-back runs every health_interval_seconds,
    # (a dead host is failed within interval + 2 x timeout + confirm: 50 s with these defaults)
    # on health_concurrency threads of each worker apart from its operation slots (0: this worker runs no
    # checks); a check gets health_timeout_seconds, a host health_connect_timeout_seconds to answer SSH.
    health_interval_seconds: float = Field(15.0, gt=0)
    health_concurrency: int = Field(2, ge=0)
    health_timeout_seconds: float = Field(15.0, gt=0)
    health_connect_timeout_seconds: int = Field(5, ge=1)
    # A failure moves a status only when a second check reads it too; that check comes this much later.
    health_confirm_seconds: float = Field(5.0, gt=0)
    # Usage metering (metering/, docs/metering.md): each worker runs a metering pass this often (0: this worker
    # meters nothing); records and cursors make passes of several workers add up to one.
    metering_interval_seconds: float = Field(300.0, ge=0)
    # How far behind now a pass stops: a job reaches the runtime's accounting a moment after it ends.
    metering_settle_seconds: float = Field(METERING_SETTLE_SECONDS, ge=1)
    # Per-project quota on queued + running operations (0: none); more is refused with 429.
    max_open_operations_per_project: int = Field(50, ge=0)
    # Per-kind run timeouts in seconds; the environment overrides single kinds: "deploy=7200,refresh=60".
    timeouts: Annotated[dict[str, int], NoDecode] = Field(
        default_factory=lambda: dict(DEFAULT_OPERATION_TIMEOUTS),
        validation_alias=_env("GPUAAS_OPERATION_TIMEOUTS", "operation_timeouts", "timeouts"))
    # Registries (host[:port]) whose pulls this service authorizes (their token realm is
    # /v1/registry/token): a run of a workload from one of them gets a pull credential of its own.
    pull_credential_registries: Annotated[frozenset[str], NoDecode] = frozenset()
    # URL prefixes (http:// or https://, each ending in "/"; comma-separated in the environment) a file artifact
    # may name as its source instead of the content store: its hosts fetch it from there and verify its digest.
    file_artifact_sources: Annotated[tuple[str, ...], NoDecode] = ()
    # Promotion gates (catalog/gates.py, docs/control-service.md "Promotion gates"): the checks a collection
    # artifact's move to staged runs on its exact build (empty: staging checks nothing), whether a version's move
    # to canary needs a passed smoke run (a deploy and a decommission on allocations the publisher names), how many
    # successful canary instances a version needs before it may become active, and how long an artifact stays
    # deprecated before it may be retired. A version may skip canary (draft -> active) only where neither a smoke
    # run nor canary instances are required.
    promotion_staging_checks: Annotated[tuple[Literal["descriptor", "ansible_lint", "ansible_test_sanity"], ...],
                                        NoDecode] = ("descriptor", "ansible_lint", "ansible_test_sanity")
    promotion_canary_smoke: bool = True
    promotion_canary_instances: int = Field(1, ge=0, le=1000)
    promotion_retire_grace_seconds: int = Field(7 * 86400, ge=0)
    # The staging gate's check time limit, and the HOME its ansible-test sanity runs with (the per-test venvs it
    # installs from PyPI on first use are cached there); unset: <state_dir>/gates/ansible-test-home.
    promotion_check_timeout_seconds: int = Field(900, ge=10)
    promotion_sanity_home: Path | None = None
    # The sanity ignore entries ("test" or "test:code") a build may carry; the gate refuses every other one.
    promotion_sanity_allowed_ignores: Annotated[tuple[str, ...], NoDecode] = ("validate-modules:missing-gplv3-license",
                                                                             "symlinks")
    # The site's own variables, added to every playbook run below the catalog's (where a release is mirrored,
    # a proxy): a mapping (a [site_vars] table in the file), or in the environment a JSON object or the path
    # of a YAML file holding one. Values may be Jinja over the run's other variables ("{{ rke2_version }}"):
    # they are the operator's, trusted like the collection. Names are checked here and against each
    # adapter's own variables when a run is planned (executor/plan.py).
    site_vars: Annotated[dict[str, Any], NoDecode] = Field(default_factory=dict)

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("log_format", "trace_exporter", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.strip().lower() or None
        return value

    @field_validator("metrics_allowed_networks", mode="before")
    @classmethod
    def _networks(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [n.strip() for n in value.split(",") if n.strip()]
        if isinstance(value, list | tuple | frozenset | set):
            for network in value:
                try:
                    ipaddress.ip_network(str(network).strip(), strict=False)
                except ValueError:
                    raise ValueError(f"{network!r} is not an address or network (CIDR)") from None
            return tuple(str(n).strip() for n in value)
        return value

    @field_validator("database_url", "secret_key", "otlp_endpoint", "worker_metrics_port", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("data_dir", "postgres_bin_dir", "ssh_private_key_file", mode="before")
    @classmethod
    def _empty_path_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("secret_key")
    @classmethod
    def _fernet_key(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            ok = len(base64.urlsafe_b64decode(value.encode())) == 32
        except (binascii.Error, ValueError):
            ok = False
        if not ok:
            raise ValueError("must be a Fernet key, 32 bytes in urlsafe base64 (make one with: python3 -c "
                             "'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')")
        return value

    @field_validator("timeouts", mode="before")
    @classmethod
    def _timeouts(cls, value: Any) -> Any:
        if isinstance(value, str):
            pairs = {}
            for item in filter(None, (p.strip() for p in value.split(","))):
                kind, sep, seconds = item.partition("=")
                if not sep:
                    raise ValueError(f"{item!r} is not KIND=SECONDS")
                pairs[kind.strip()] = seconds.strip()
            value = pairs
        if not isinstance(value, dict):
            return value
        unknown = sorted(set(value) - set(DEFAULT_OPERATION_TIMEOUTS))
        if unknown:
            raise ValueError(f"unknown operation kind {unknown[0]!r} (known: {', '.join(DEFAULT_OPERATION_TIMEOUTS)})")
        return DEFAULT_OPERATION_TIMEOUTS | value

    @field_validator("timeouts")
    @classmethod
    def _positive_timeouts(cls, value: dict[str, int]) -> dict[str, int]:
        bad = [k for k, v in value.items() if v <= 0]
        if bad:
            raise ValueError(f"the timeout of {bad[0]} must be a positive number of seconds")
        return value

    @field_validator("promotion_staging_checks", "promotion_sanity_allowed_ignores", mode="before")
    @classmethod
    def _checks(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(c.strip() for c in value.split(",") if c.strip())
        return value

    @field_validator("pull_credential_registries", mode="before")
    @classmethod
    def _registries(cls, value: Any) -> Any:
        if isinstance(value, str):
            return frozenset(r.strip() for r in value.split(",") if r.strip())
        return value

    @field_validator("file_artifact_sources", mode="before")
    @classmethod
    def _file_sources(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = tuple(p.strip() for p in value.split(",") if p.strip())
        bad = [p for p in value if not isinstance(p, str) or not re.fullmatch(r"https?://[^\s/@?#]+/[^\s?#]*", p)
               or not p.endswith("/")]
        if bad:
            raise ValueError(f"each prefix must be an http:// or https:// URL ending in '/' (no user, query or "
                             f"fragment): {bad}")
        return value

    @field_validator("site_vars", mode="before")
    @classmethod
    def _site_vars(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = _site_vars_text(value)
        if not isinstance(value, dict):
            raise ValueError("must be a mapping of variable names to values (a JSON object, or a YAML file's path)")
        from .catalog.parameters import name_problem  # imports Ansible's reserved names, only when there are some

        problems = [f"{name!r} {why}" for name in value if (why := name_problem(name, set()))]
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @field_validator("pool_max")
    @classmethod
    def _pool_bounds(cls, value: int, info: ValidationInfo) -> int:
        if "pool_min" in info.data and value < info.data["pool_min"]:
            raise ValueError(f"must be at least pool_min ({info.data['pool_min']}), got {value}")
        return value

    @model_validator(mode="after")
    def _derived(self) -> GpuaasSettings:
        if self.data_dir is None:
            object.__setattr__(self, "data_dir", self.state_dir / "postgres")
        return self

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings],
                                   init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource):
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = os.environ.get(CONFIG_ENV)
        if path:
            sources.append(_TomlFile(settings_cls, Path(path)))
        return tuple(sources)


def _site_vars_text(text: str) -> Any:
    """GPUAAS_SITE_VARS: a JSON object, or the path of a YAML (or JSON) file holding a mapping."""
    import yaml

    text = text.strip()
    if not text:
        return {}
    if text.startswith(("{", "[")):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON ({exc})") from None
    try:
        return yaml.safe_load(Path(text).read_text()) or {}
    except OSError as exc:
        raise ValueError(f"cannot read {text} ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{text} is not valid YAML ({str(exc).splitlines()[0]})") from None


class _TomlFile(PydanticBaseSettingsSource):
    """The TOML file GPUAAS_CONFIG names: field names as keys, e.g. `pool_max = 20`, `[timeouts]`."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path):
        super().__init__(settings_cls)
        self.path = path
        try:
            self.data = tomllib.loads(path.read_text())
        except OSError as exc:
            raise ConfigError(f"{CONFIG_ENV}={path}: cannot read it ({exc.strerror})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{CONFIG_ENV}={path}: not valid TOML ({exc})") from None
        fields = set(settings_cls.model_fields) | {"operation_timeouts"}
        unknown = sorted(set(self.data) - fields)
        if unknown:
            raise ConfigError(f"{CONFIG_ENV}={path}: unknown setting {unknown[0]!r}")

    def get_field_value(self, field, field_name):  # noqa: ANN001 (pydantic-settings' signature)
        return self.data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self.data)


def env_name(field_name: str) -> str:
    """The environment variable a field is read from (the first one, where there are several)."""
    alias = GpuaasSettings.model_fields[field_name].validation_alias
    if isinstance(alias, AliasChoices):
        return str(alias.choices[0])
    return f"{ENV_PREFIX}{field_name.upper()}"


def _where(name: str) -> str:
    """How the operator set `name`: its environment variable, or its key in the GPUAAS_CONFIG file."""
    if name not in GpuaasSettings.model_fields:
        return "settings"
    alias = GpuaasSettings.model_fields[name].validation_alias
    names = [str(a) for a in alias.choices] if isinstance(alias, AliasChoices) else [f"{ENV_PREFIX}{name.upper()}"]
    if not any(n.upper() in (k.upper() for k in os.environ) for n in names if n.isupper()):
        path = os.environ.get(CONFIG_ENV)
        if path:
            return f"{name} in {path}"
    return f"{env_name(name)} ({name})"


def _explain(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = [str(x) for x in err["loc"]]
        name = loc[0] if loc else ""
        if name not in GpuaasSettings.model_fields:
            name = next((f for f in GpuaasSettings.model_fields if name.upper() == env_name(f)), name)
        message = err["msg"].removeprefix("Value error, ")
        where = _where(name)
        got = ""
        if name not in SECRET_FIELDS and err["type"] not in ("value_error", "missing") and "input" in err:
            got = f", got {err['input']!r}"
        parts.append(f"invalid setting {where}: {message}{got}")
    return "; ".join(parts)


_cache: dict[tuple, GpuaasSettings] = {}


def load(**overrides: Any) -> GpuaasSettings:
    """The settings from the environment and the file, with `overrides` on top; ConfigError if bad."""
    env_key = tuple(sorted((k, v) for k, v in os.environ.items()
                           if k.upper().startswith(ENV_PREFIX) or k.upper() in OTHER_ENV))
    path = os.environ.get(CONFIG_ENV)
    try:
        stamp = Path(path).stat().st_mtime_ns if path else None
    except OSError:
        stamp = None
    key = (env_key, path, stamp)
    if not overrides and key in _cache:
        return _cache[key]
    try:
        model = GpuaasSettings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_explain(exc)) from None
    if not overrides:
        _cache.clear()
        _cache[key] = model
    return model


def _from_model(name: str):
    return field(default_factory=lambda: getattr(load(), name))


@dataclass(frozen=True)
class Settings:
    """The API's view of the settings."""

    database_url: str | None = _from_model("database_url")
    data_dir: Path = _from_model("data_dir")
    postgres_bin_dir: Path | None = _from_model("postgres_bin_dir")
    pool_min: int = _from_model("pool_min")
    pool_max: int = _from_model("pool_max")
    pool_timeout: float = _from_model("pool_timeout")
    max_instances_per_project: int = _from_model("max_instances_per_project")
    default_token_ttl_days: int = _from_model("default_token_ttl_days")
    token_max_days_user: int = _from_model("token_max_days_user")
    token_max_days_service_account: int = _from_model("token_max_days_service_account")
    token_max_live_per_principal: int = _from_model("token_max_live_per_principal")
    stream_recheck_seconds: float = _from_model("stream_recheck_seconds")
    max_body_bytes: int = _from_model("max_body_bytes")
    max_content_bytes: int = _from_model("max_content_bytes")
    registry_token_service: str = _from_model("registry_token_service")
    registry_token_issuer: str = _from_model("registry_token_issuer")
    metrics_enabled: bool = _from_model("metrics_enabled")
    metrics_allowed_networks: tuple[str, ...] = _from_model("metrics_allowed_networks")
    promotion_staging_checks: tuple[str, ...] = _from_model("promotion_staging_checks")
    promotion_canary_smoke: bool = _from_model("promotion_canary_smoke")
    promotion_canary_instances: int = _from_model("promotion_canary_instances")
    promotion_retire_grace_seconds: int = _from_model("promotion_retire_grace_seconds")
    file_artifact_sources: tuple[str, ...] = _from_model("file_artifact_sources")

    @classmethod
    def from_model(cls, model: GpuaasSettings, **overrides: Any) -> Settings:
        return cls(**{f.name: getattr(model, f.name) for f in dataclasses.fields(cls)} | overrides)


@dataclass(frozen=True)
class OperationSettings:
    """The operations' and workers' view of the settings."""

    state_dir: Path = _from_model("state_dir")
    ssh_private_key_file: Path | None = _from_model("ssh_private_key_file")
    ssh_host_key_checking: bool = _from_model("ssh_host_key_checking")
    run_forks_max: int = _from_model("run_forks_max")
    secret_key: str | None = _from_model("secret_key")
    lease_seconds: float = _from_model("lease_seconds")
    max_attempts: int = _from_model("max_attempts")
    poll_seconds: float = _from_model("poll_seconds")
    max_open_operations_per_project: int = _from_model("max_open_operations_per_project")
    timeouts: dict[str, int] = _from_model("timeouts")
    pull_credential_registries: frozenset[str] = _from_model("pull_credential_registries")
    file_artifact_sources: tuple[str, ...] = _from_model("file_artifact_sources")
    worker_metrics_port: int | None = _from_model("worker_metrics_port")
    worker_metrics_host: str = _from_model("worker_metrics_host")
    health_interval_seconds: float = _from_model("health_interval_seconds")
    health_concurrency: int = _from_model("health_concurrency")
    health_timeout_seconds: float = _from_model("health_timeout_seconds")
    health_connect_timeout_seconds: int = _from_model("health_connect_timeout_seconds")
    health_confirm_seconds: float = _from_model("health_confirm_seconds")
    metering_interval_seconds: float = _from_model("metering_interval_seconds")
    metering_settle_seconds: float = _from_model("metering_settle_seconds")
    site_vars: dict[str, Any] = _from_model("site_vars")
    promotion_staging_checks: tuple[str, ...] = _from_model("promotion_staging_checks")
    promotion_canary_smoke: bool = _from_model("promotion_canary_smoke")
    promotion_canary_instances: int = _from_model("promotion_canary_instances")
    promotion_retire_grace_seconds: int = _from_model("promotion_retire_grace_seconds")
    promotion_check_timeout_seconds: int = _from_model("promotion_check_timeout_seconds")
    promotion_sanity_home: Path | None = _from_model("promotion_sanity_home")
    promotion_sanity_allowed_ignores: tuple[str, ...] = _from_model("promotion_sanity_allowed_ignores")

    @classmethod
    def from_model(cls, model: GpuaasSettings, **overrides: Any) -> OperationSettings:
        return cls(**{f.name: getattr(model, f.name) for f in dataclasses.fields(cls)} | overrides)
