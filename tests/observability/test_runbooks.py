"""The runbooks (docs/runbooks/) and docs/observability.md as operators will run them: one runbook per
incident class of seed 002, each starting from the correlation id; every SQL query they give runs
against the current schema, every jq filter compiles, and every metric they name is one the service
exposes. A renamed column or metric fails here, not during an incident."""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

import httpx
import psycopg
from gpuaas_api.app import create_app
from operations.helpers import serving
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / "docs" / "runbooks"
# Seed 002, "Runbooks": the incident classes and the runbook of each.
CLASSES = {"App Artifact Lifecycle Incident": "artifact-lifecycle.md", "App Catalog Incident": "catalog.md",
           "App Platform Operator Incident": "platform-operator.md",
           "App Runtime Billing Incident": "runtime-billing.md",
           "App Runtime Lifecycle Incident": "runtime-lifecycle.md"}
PLACEHOLDERS = {"$IID": str(uuid.uuid4()), "$OP": str(uuid.uuid4()), "'AID'": f"'{uuid.uuid4()}'",
                "$CID": "cid", "'CID'": "'cid'", "$FROM": "2026-11-01", "$TO": "2026-12-01"}


def documents() -> dict[str, str]:
    paths = sorted(RUNBOOKS.glob("*.md")) + [ROOT / "docs" / "observability.md"]
    return {p.name: p.read_text() for p in paths}


def test_one_correlation_first_runbook_per_incident_class():
    index = (RUNBOOKS / "README.md").read_text()
    for incident, name in CLASSES.items():
        text = (RUNBOOKS / name).read_text()
        assert text.splitlines()[0].lower() == f"# runbook: {incident.lower()}", name
        assert f"]({name})" in index, f"the runbook index does not link {name}"
        first_step = text.split("\n## ", 2)[1]
        assert first_step.startswith("1. Correlation id"), f"{name} does not start from the correlation id"
        for part in ("logs |", "metrics ", "correlation_id"):
            assert part in text, f"{name} has no {part.strip()} step"


def test_every_sql_query_runs_on_the_current_schema(database):
    queries = []
    for name, text in documents().items():
        found = re.findall(r'sql "((?:[^"\\]|\\.)*)"', text, re.S) + re.findall(r'psql "\$DATABASE_URL" -Atc "([^"]*)"',
                                                                               text)
        queries += [(name, q) for q in found if not q.startswith("$")]
    assert len(queries) >= 12
    with database.transaction() as conn:
        for name, query in queries:
            for key, value in PLACEHOLDERS.items():
                query = query.replace(key, value)
            try:
                with conn.transaction():
                    conn.execute(f"EXPLAIN {query}")  # plans it: every table, column and function must exist
            except psycopg.Error as exc:
                raise AssertionError(f"{name}: {query}\n{exc}") from None


def test_every_jq_filter_compiles():
    filters = []
    for name, text in documents().items():
        for options, program in re.findall(r"jq((?: -[a-zA-Z]+| --arg \w+ \"[^\"]*\")*) '([^']*)'", text):
            args = re.findall(r"--arg (\w+) ", options)
            filters.append((name, program.replace("\\|", "|"), args))  # a pipe in a table cell is escaped
    assert len(filters) >= 20
    for name, program, args in filters:
        argv = ["jq", *[x for a in args for x in ("--arg", a, "x")], program]
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10)
        assert done.returncode == 0, f"{name}: jq '{program}': {done.stderr}"


def test_every_metric_named_is_exposed(database):
    with serving(create_app(database)) as url:
        exposition = httpx.get(f"{url}/metrics").text
    names = set()
    for family in text_string_to_metric_families(exposition):
        names |= {family.name} | {s.name for s in family.samples}
    # Families with labels and no sample yet (no run in this process) still have their TYPE line.
    names |= set(re.findall(r"^# TYPE (\S+)", exposition, re.M))
    suffixes = ("_total", "_count", "_sum", "_bucket")
    names |= {n + s for n in names for s in suffixes}
    for name, text in documents().items():
        named = set(re.findall(r"\bgpuaas_[a-z_]+[a-z]\b", text)) - {"gpuaas_api", "gpuaas_operations"}
        unknown = {n for n in named if n not in names and not n.startswith("gpuaas_api")}
        assert not unknown, f"{name} names metrics the service does not expose: {sorted(unknown)}"
