"""Fixtures for the AWX-shaped runs (test_awx_runs.py): the operations tests' world (embedded PostgreSQL, tenants,
projects, tokens, the test app of tests/apps/opsapp registered through the API, in-process workers)."""

from __future__ import annotations

from operations import conftest as ops_fixtures

pg_uri, db_url, database, client = ops_fixtures.pg_uri, ops_fixtures.db_url, ops_fixtures.database, ops_fixtures.client
op_settings, app, ops, _no_stray_env = (ops_fixtures.op_settings, ops_fixtures.app, ops_fixtures.ops,
                                        ops_fixtures._no_stray_env)
