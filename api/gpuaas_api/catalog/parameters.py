"""Tenant parameters: the only values a tenant may put into a run, declared per app version as a JSON
Schema (validated with the `jsonschema` library) and checked on every path that stores or runs them.

Whatever a version declares, no variable the platform or Ansible gives a meaning may be set through
parameters or the catalog's extra vars: names starting with `ansible_` (connection, interpreter,
become, host), Ansible's reserved and special variable names, and the adapter's own operation and
secret variables. Values are data: the executor hands every one of them to Ansible marked unsafe, so
Jinja in a value is never evaluated."""

from __future__ import annotations

import json
import re
from functools import cache, lru_cache
from typing import Any

from jsonschema import Draft202012Validator, SchemaError
from jsonschema.exceptions import best_match

from ..errors import unprocessable

# A version that declares nothing accepts no parameters.
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
# Ansible's special variables (docs: "Special Variables"), which are not in get_reserved_names().
SPECIAL_VARIABLES = frozenset({
    "hostvars", "groups", "group_names", "inventory_hostname", "inventory_hostname_short", "inventory_dir",
    "inventory_file", "omit", "play_hosts", "ansible_play_batch", "playbook_dir", "role_name", "role_names",
    "role_path", "environment", "vars", "item", "module_defaults", "lookup", "query", "q", "undef",
})


@cache
def ansible_reserved() -> frozenset[str]:
    from ansible.vars.reserved import get_reserved_names  # imports Ansible's playbook classes: ~0.7 s, once

    return frozenset(get_reserved_names()) | SPECIAL_VARIABLES


def name_problem(name: str, platform_vars: set[str]) -> str | None:
    """Why `name` may not be set by a tenant or the catalog's extra vars; None when it may."""
    if not isinstance(name, str) or not NAME.match(name):
        return "is not a plain variable name (lowercase letters, digits and _, starting with a letter)"
    if name.startswith("ansible_"):
        return "starts with ansible_: connection, host and interpreter variables are set by the platform only"
    if name in platform_vars:
        return "is set by the platform for every run (operation target or secret)"
    if name in ansible_reserved():
        return "is a name Ansible reserves"
    return None


def _check_schema(schema: dict) -> str | None:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return exc.message
    return None


@lru_cache(maxsize=256)
def _metaschema_error(schema_json: str) -> str | None:
    return _check_schema(json.loads(schema_json))


def _schema_error(schema: dict) -> str | None:
    """Why `schema` is not a valid JSON Schema, or None. The check against the metaschema takes
    10-15 ms and every run's plan repeats it for the same few schemas: remembered by content."""
    try:
        return _metaschema_error(json.dumps(schema, sort_keys=True))
    except TypeError:  # a value JSON cannot hold (a YAML date): checked as it is, not remembered
        return _check_schema(schema)


def schema_problems(schema: dict, platform_vars: set[str]) -> list[str]:
    """Problems of a declared parameter schema: it must be a valid JSON Schema for an object that
    names every parameter under `properties`, refuses any other name, and declares no forbidden name."""
    error = _schema_error(schema)
    if error is not None:
        return [f"is not a valid JSON Schema: {error}"]
    problems = []
    if schema.get("type") != "object":
        problems.append('must have "type": "object"')
    if schema.get("additionalProperties") is not False:
        problems.append('must have "additionalProperties": false (tenants set declared parameters only)')
    if "patternProperties" in schema:
        problems.append("must name every parameter under properties (no patternProperties)")
    for name in schema.get("properties") or {}:
        why = name_problem(name, platform_vars)
        if why:
            problems.append(f"declares parameter {name!r}, which {why}")
    return problems


def validate(schema: dict | None, values: dict, platform_vars: set[str]) -> None:
    """Refuse (422 invalid_parameters, naming the parameter) anything the version does not declare,
    and any forbidden name whatever the schema says."""
    for name in values:
        why = name_problem(name, platform_vars)
        if why:
            raise unprocessable("invalid_parameters", f"parameter {name!r} {why}", parameter=name)
    error = best_match(Draft202012Validator(schema or NO_PARAMETERS).iter_errors(values))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path)
        if error.validator == "additionalProperties":
            extra = sorted(set(values) - set((schema or NO_PARAMETERS).get("properties") or {}))
            where = extra[0] if extra else where
            message = f"parameter {where!r} is not declared by this app version"
        else:
            message = f"parameter {where!r}: {error.message}" if where else error.message
        raise unprocessable("invalid_parameters", message, parameter=where or None)


def validate_for_version(version: dict, values: dict) -> None:
    """`validate` against an app_versions row (its adapter spec's schema and platform variables)."""
    from .adapter import AdapterSpec

    spec = AdapterSpec.model_validate(version["adapter"])
    validate(spec.parameters, values, spec.platform_variables())
