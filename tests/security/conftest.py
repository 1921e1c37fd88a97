"""Regression tests for the security and integrity findings of issue 7, one file per finding
(test_f<N>_*.py). They reuse the API tests' embedded PostgreSQL and the operations tests' world,
workers and test app (real ansible-runner runs of small real playbooks on localhost)."""

from __future__ import annotations

from operations import conftest as ops_fixtures

pg_uri, db_url, database, client = (ops_fixtures.pg_uri, ops_fixtures.db_url, ops_fixtures.database,
                                    ops_fixtures.client)
op_settings, app, ops = ops_fixtures.op_settings, ops_fixtures.app, ops_fixtures.ops
_no_stray_env = ops_fixtures._no_stray_env
