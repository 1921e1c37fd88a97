"""Tenant parameters: the only values a tenant may put into a run, declared per app version as a JSON
Schema (validated with the `jsonschema` library) and checked on every path that stores or runs them.

A parameter schema is one self-contained document whose checks cost time linear in what a tenant
sends: a `$ref` points within it (`#/...`, at a subschema), nothing is fetched, and every `pattern`
runs on RE2. Whatever a stored schema does anyway, checking a tenant's values answers a 4xx, never a
500 (`validate_for_version`).

Whatever a version declares, no variable the platform or Ansible gives a meaning may be set through
parameters or the catalog's extra vars: names starting with `ansible_` (connection, interpreter,
become, host), Ansible's reserved and special variable names, and the adapter's own operation and
secret variables. Values are data: the executor hands every one of them to Ansible marked unsafe, so
Jinja in a value is never evaluated."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from functools import cache, lru_cache
from typing import Any

import re2
from jsonschema import Draft202012Validator, SchemaError, ValidationError, validators
from jsonschema.exceptions import best_match
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from ..errors import conflict, unprocessable

log = logging.getLogger(__name__)

# A version that declares nothing accepts no parameters.
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
# Ansible's special variables (docs: "Special Variables"), which are not in get_reserved_names().
SPECIAL_VARIABLES = frozenset({
    "hostvars", "groups", "group_names", "inventory_hostname", "inventory_hostname_short", "inventory_dir",
    "inventory_file", "omit", "play_hosts", "ansible_play_batch", "playbook_dir", "role_name", "role_names",
    "role_path", "environment", "vars", "item", "module_defaults", "lookup", "query", "q", "undef",
})
# Cheap bounds: the metaschema check recurses once per level (300 levels exhaust Python's stack), and
# no parameter needs a longer pattern.
MAX_DEPTH = 32
MAX_PATTERN = 1024
# Keywords that name or reach other documents: a parameter schema is one document, refs are "#/...".
FOREIGN = ("$id", "$anchor", "$dynamicRef", "$dynamicAnchor")
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is reported to the caller, not logged by RE2


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


@lru_cache(maxsize=512)
def _regex(pattern: str) -> Any:  # an RE2 pattern object
    return re2.compile(pattern, _RE2_OPTIONS)


def _pattern(validator, pattern, instance, schema) -> Iterator[ValidationError]:
    """The `pattern` keyword on RE2: linear in the value, so no pattern can stall a request (Python's re
    takes 2 s on `^(a+)+$` and 24 characters, doubling with each)."""
    if validator.is_type(instance, "string") and not _regex(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


# Draft 2020-12 with `pattern` on RE2. patternProperties (which jsonschema also matches in
# additionalProperties with Python's re) is refused by schema_problems, so no other keyword runs a regex.
ParameterValidator = validators.extend(Draft202012Validator, {"pattern": _pattern})
# Refs resolve within the schema only: jsonschema's default registry fetches remote ones over HTTP.
_NO_RETRIEVAL = Registry()


def _deeper_than(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children)
    return False


def _subschemas(resource: Resource) -> Iterator[Any]:
    yield resource.contents
    for sub in resource.subresources():
        yield from _subschemas(sub)


def _document_problems(schema: dict) -> list[str]:
    """What makes a valid JSON Schema unfit for tenants: refs out of the document or at data rather
    than a subschema, keywords that name other documents, and patterns RE2 cannot run or that are long."""
    root = DRAFT202012.create_resource(schema)
    resolver = _NO_RETRIEVAL.resolver_with_root(root)
    subschemas = [s for s in _subschemas(root) if isinstance(s, dict)]
    positions = {id(s) for s in subschemas}
    problems = []
    for sub in subschemas:
        problems += [f"uses {key}: a parameter schema is one document (refs are #/...)" for key in FOREIGN
                     if key in sub]
        if "patternProperties" in sub and sub is not schema:  # the root's is refused with its own words
            problems.append("uses patternProperties: name every property under properties")
        if isinstance(ref := sub.get("$ref"), str):
            if ref != "#" and not ref.startswith("#/"):
                problems.append(f"$ref {ref!r} points outside the schema: only refs within it (#/...) are allowed")
            else:
                try:
                    target = resolver.lookup(ref).contents
                except Unresolvable:
                    problems.append(f"$ref {ref!r} does not resolve within the schema")
                else:
                    if id(target) not in positions:
                        problems.append(f"$ref {ref!r} points at data, not at a subschema")
        if isinstance(pattern := sub.get("pattern"), str):
            if len(pattern) > MAX_PATTERN:
                problems.append(f"pattern {pattern[:40]!r}... is longer than {MAX_PATTERN} characters")
            else:
                try:
                    _regex(pattern)
                except re2.error as exc:
                    problems.append(f"pattern {pattern!r} is not one RE2 runs (linear time, no backreferences or "
                                    f"lookaround): {exc}")
    return problems


def schema_problems(schema: dict, platform_vars: set[str]) -> list[str]:
    """Problems of a declared parameter schema: it must be a valid JSON Schema for an object that
    names every parameter under `properties`, refuses any other name, declares no forbidden name,
    and is one document that tenants' values check against in linear time."""
    if _deeper_than(schema, MAX_DEPTH):
        return [f"nests deeper than {MAX_DEPTH} levels"]
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
    return problems + _document_problems(schema)


def validate(schema: dict | None, values: dict, platform_vars: set[str]) -> None:
    """Refuse (422 invalid_parameters, naming the parameter) anything the version does not declare,
    and any forbidden name whatever the schema says."""
    for name in values:
        why = name_problem(name, platform_vars)
        if why:
            raise unprocessable("invalid_parameters", f"parameter {name!r} {why}", parameter=name)
    try:
        error = best_match(ParameterValidator(schema or NO_PARAMETERS, registry=_NO_RETRIEVAL).iter_errors(values))
    except RecursionError:  # values nested deeper than a recursive schema can follow
        raise unprocessable("invalid_parameters", "parameters are nested too deeply to check") from None
    except Exception as exc:  # a stored schema that breaks validation is the version's fault: 409, not a 500
        log.warning("parameter schema failed while checking values: %r", exc)
        raise conflict("version_not_usable", "this app version's parameter schema cannot check parameters; "
                       "the catalog must publish a corrected version") from None
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path)
        if error.validator == "additionalProperties" and not where:
            extra = sorted(set(values) - set((schema or NO_PARAMETERS).get("properties") or {}))
            where = extra[0] if extra else where
            message = f"parameter {where!r} is not declared by this app version"
        else:
            message = f"parameter {where!r}: {error.message}" if where else error.message
        raise unprocessable("invalid_parameters", message, parameter=where or None)


def validate_for_version(version: dict, values: dict) -> None:
    """`validate` against an app_versions row (its adapter spec's schema and platform variables)."""
    from .adapter import stored_spec

    spec = stored_spec(version)
    validate(spec.parameters, values, spec.platform_variables())
