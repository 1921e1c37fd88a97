"""The `gpuaas` command. Subcommands live in gpuaas_api.commands.<name> modules, each exposing
`register(subparsers)` that adds its parser and sets `func`; new modules (worker, demo, ...) are
picked up without editing this file. A module that sets `DEVELOPMENT = True` (demo, testhosts) adds
its parsers without `help=` and with a `description=`: `--help` lists them apart, under
"development and testing".

Every command reads the one settings model (gpuaas_api.config) before it runs: a bad setting ends the
command with one line on stderr that names it (exit status 2), not a traceback."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
import textwrap
from pathlib import Path

from . import __version__, commands, observability
from .config import CONFIG_ENV, LOG_LEVELS, ConfigError, load

# The status of a command whose reader went away (`gpuaas ... | head`): what a shell reports for a
# command killed by SIGPIPE (128 + 13), as `cat`, `yes` or `git log` end there. The output was cut, so
# 0 would claim a success; a pipeline without `set -o pipefail` ignores it anyway.
EXIT_BROKEN_PIPE = 141


def log_level(value: str) -> str:
    """argparse type for --log-level (global, or after `serve` / `worker`)."""
    level = value.strip().upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{value!r} is not one of {', '.join(LOG_LEVELS)}")
    return level


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuaas", description="gpuaas.apps control service",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"gpuaas {__version__}")
    parser.add_argument("--log-level", type=log_level, default=None,
                        help=f"{', '.join(LOG_LEVELS)} (default: setting log_level, GPUAAS_LOG_LEVEL, INFO)")
    parser.add_argument("--config", type=Path, default=None, metavar="FILE",
                        help=f"a TOML file of settings, keys as in docs/operator-guide.md (env {CONFIG_ENV}); "
                             "environment variables override it")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    development = []
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            before = set(sub.choices)
            register(sub)
            if getattr(module, "DEVELOPMENT", False):
                development += [(name, sub.choices[name].description) for name in sub.choices if name not in before]
    parser.epilog = _section("development and testing", development)
    return parser


def _section(title: str, commands: list[tuple[str, str]]) -> str:
    """A titled list of commands laid out as argparse lays out the COMMAND list (argparse lists the
    commands of one subparsers action in one section only)."""
    lines = [f"{title}:"]
    for name, text in commands:
        lines += textwrap.wrap(text, 78, initial_indent=f"    {name:<20}", subsequent_indent=" " * 24)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()  # what is still buffered (--help's text too) may meet the closed pipe
    except BrokenPipeError:
        # The reader is gone: nothing more to say, and nothing to say it to. Python flushes stdout once
        # more at exit; pointed at /dev/null that flush cannot fail and print its own complaint.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _run(argv: list[str] | None) -> int:
    from .client.cli import quiet_http_log
    from .embedded_db import EmbeddedError

    args = build_parser().parse_args(argv)
    if args.config is not None:
        # In the environment, so the processes this one starts read the same file.
        os.environ[CONFIG_ENV] = str(args.config.absolute())
    try:
        args.settings = load()
        args.log_level = args.log_level or args.settings.log_level
        # JSON lines for serve and worker (uvicorn's loggers included), tracing when configured.
        observability.setup(args.settings, args.command, args.log_level)
        if args.command not in observability.SERVICES:
            quiet_http_log()
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"gpuaas: {exc}", file=sys.stderr)
        return 2
    except EmbeddedError as exc:
        print(f"gpuaas: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
