"""The client's config file: the service's URL, a token and an optional default project.

It lives in the user's config directory ($XDG_CONFIG_HOME/gpuaas/config.toml, by default
~/.config/gpuaas/config.toml). The token is a credential: the file is created with mode 0600 before
anything is written to it (a temporary file in the same directory, renamed over the old one), and its
directory with 0700. The environment overrides the file: GPUAAS_API (URL), GPUAAS_TOKEN and
GPUAAS_PROJECT, so CI jobs need no file at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path

import platformdirs

URL_ENV, TOKEN_ENV, PROJECT_ENV = "GPUAAS_API", "GPUAAS_TOKEN", "GPUAAS_PROJECT"
KEYS = ("url", "token", "project")


class ConfigFileError(ValueError):
    """The config file cannot be read or written; str() is one line."""


def config_path() -> Path:
    return platformdirs.user_config_path("gpuaas", appauthor=False) / "config.toml"


@dataclass(frozen=True)
class ClientConfig:
    url: str | None = None
    token: str | None = None
    project: str | None = None
    # Where each value came from ("GPUAAS_API", the file's path, ...), for messages; never the value.
    origin: tuple[tuple[str, str], ...] = ()

    def source(self, key: str) -> str:
        return dict(self.origin).get(key, "nowhere")


def read_file(path: Path | None = None) -> dict[str, str]:
    path = path or config_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigFileError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(raw.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"{path} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - set(KEYS))
    if unknown or any(not isinstance(data[k], str) for k in data if k in KEYS):
        raise ConfigFileError(f"{path}: only string keys {', '.join(KEYS)} are allowed"
                              + (f" (found {', '.join(unknown)})" if unknown else ""))
    return data


def load(path: Path | None = None) -> ClientConfig:
    """The file's values with the environment's on top."""
    path = path or config_path()
    stored = read_file(path)
    values, origin = {}, []
    for key, env in (("url", URL_ENV), ("token", TOKEN_ENV), ("project", PROJECT_ENV)):
        if os.environ.get(env):
            values[key], where = os.environ[env], env
        elif stored.get(key):
            values[key], where = stored[key], str(path)
        else:
            continue
        origin.append((key, where))
    return ClientConfig(**values, origin=tuple(origin))


def _toml_string(value: str) -> str:
    # A JSON string with ASCII escapes is a valid TOML basic string.
    return json.dumps(value, ensure_ascii=True)


def write(values: dict[str, str | None], path: Path | None = None) -> Path:
    """Replaces the file with `values` (None or empty values left out); mode 0600 from the start."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = "".join(f"{k} = {_toml_string(values[k])}\n" for k in KEYS if values.get(k))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise ConfigFileError(f"cannot write {path}: {exc.strerror}") from None
    return path


def too_open(path: Path | None = None) -> bool:
    """True when others than the owner may read the file (someone widened it by hand)."""
    path = path or config_path()
    try:
        return bool(path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO))
    except FileNotFoundError:
        return False

