"""Fixtures for the observability tests: the operations tests' (embedded PostgreSQL, a fresh
database per test, the API app, the test app registered, in-process workers), reused."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from operations import conftest as ops_fixtures

pg_uri, db_url, database, client = ops_fixtures.pg_uri, ops_fixtures.db_url, ops_fixtures.database, ops_fixtures.client
op_settings, app, ops, _no_stray_env = (ops_fixtures.op_settings, ops_fixtures.app, ops_fixtures.ops,
                                        ops_fixtures._no_stray_env)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def json_lines(path: Path) -> list[dict]:
    """Every line of a log file, parsed; a line that is not one JSON object fails the test."""
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    parsed = []
    for line in lines:
        record = json.loads(line)
        assert isinstance(record, dict), line
        parsed.append(record)
    return parsed
