"""The OpenAPI document as client generators read it: stable operationIds (tests/openapi/operation_ids.txt
is the committed list, so a rename shows in review), a description for every operation and a valid
example for every JSON request body, the error codes each route lists (all of them in the one
enumeration, which itself covers every code the source raises), Location on 201/202, and /docs with
assets the service serves itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import get_args

import jsonschema
import pytest
from fastapi.testclient import TestClient
from gpuaas_api import errors
from gpuaas_api.app import create_app
from gpuaas_api.config import Settings
from gpuaas_api.location import LOCATIONS
from referencing import Registry, Resource

HERE = Path(__file__).parent
SOURCE = Path(errors.__file__).parent
METHODS = {"get", "put", "post", "patch", "delete", "head"}


@pytest.fixture(scope="module")
def app():
    # The document and /docs need no database: nothing here reaches one.
    return create_app(database=object(), settings=Settings())


@pytest.fixture(scope="module")
def spec(app) -> dict:
    return app.openapi()


def operations(spec: dict):
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method in METHODS:
                yield method.upper(), path, op


def test_operation_ids_are_unique_readable_and_committed(spec):
    rows = sorted(f"{op['operationId']} {method} {path}" for method, path, op in operations(spec))
    ids = [r.split()[0] for r in rows]
    assert len(ids) == len(set(ids)), "operationIds are unique"
    assert all(re.fullmatch(r"[a-z][a-z_]{2,39}", i) for i in ids), [i for i in ids if len(i) > 40]
    committed = (HERE / "operation_ids.txt").read_text().splitlines()
    assert rows == committed, ("an operationId, method or path changed: generated clients' method names change "
                               "with it; update tests/openapi/operation_ids.txt if that is intended")


def test_every_operation_has_a_description_and_every_body_a_valid_example(spec):
    registry = Registry().with_resource("urn:openapi", Resource.from_contents(
        {"components": spec["components"]}, default_specification=jsonschema.Draft202012Validator.META_SCHEMA and
        __import__("referencing.jsonschema").jsonschema.DRAFT202012))
    bodies = 0
    for method, path, op in operations(spec):
        assert op.get("description", "").strip(), f"{method} {path} has no description"
        assert op.get("summary"), f"{method} {path} has no summary"
        content = op.get("requestBody", {}).get("content", {})
        if "application/json" not in content:
            continue
        bodies += 1
        media = content["application/json"]
        assert "example" in media, f"{method} {path}: no request body example"
        schema = json_refs(media["schema"])
        jsonschema.Draft202012Validator(schema, registry=registry).validate(media["example"])
    assert bodies >= 20


def json_refs(node):
    """#/components/... references, made absolute against the registry's document."""
    if isinstance(node, dict):
        return {k: ("urn:openapi" + v if k == "$ref" else json_refs(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [json_refs(v) for v in node]
    return node


def test_error_codes_per_route_are_in_the_enumeration(spec):
    enumeration = set(get_args(errors.ErrorCode))
    schema_enum = spec["components"]["schemas"]["ErrorBody"]["properties"]["code"]["enum"]
    assert set(schema_enum) == enumeration
    listed = set()
    for method, path, op in operations(spec):
        if op["tags"] == ["health"]:
            continue  # no token, no input: only readyz's 503 not_ready
        errors_documented = {s: r for s, r in op["responses"].items() if s[0] in "45"}
        assert {"401", "403", "422"} <= set(errors_documented), f"{method} {path}"
        for status, response in errors_documented.items():
            examples = response.get("content", {}).get("application/json", {}).get("examples", {})
            assert examples, f"{method} {path} {status}: no codes listed"
            for code, example in examples.items():
                assert code in enumeration, f"{method} {path} lists {code}, which is not an ErrorCode"
                assert errors.ERROR_CODES[code] == int(status), f"{method} {path}: {code} listed under {status}"
                assert example["value"]["error"]["code"] == code
                assert f"`{code}`" in response["description"]
                listed.add(code)
    create = spec["paths"]["/v1/projects/{project_id}/instances"]["post"]["responses"]
    assert {"not_entitled", "policy_denied"} <= set(create["403"]["content"]["application/json"]["examples"])
    assert "compatibility_refused" in create["422"]["content"]["application/json"]["examples"]
    assert "idempotency_key_reused" in listed and "operation_finished" in listed


def raised_codes() -> dict[str, set[str]]:
    """Every error code literal the service's source raises or answers with, and where."""
    found: dict[str, set[str]] = {}
    for file in SOURCE.rglob("*.py"):
        if "client" in file.relative_to(SOURCE).parts or file.name == "demo.py":
            continue  # the client and the demo raise their own ApiError (no code), not the service's
        for node in ast.walk(ast.parse(file.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            args = node.args
            code = None
            if name in ("ApiError", "envelope") and len(args) >= 2:
                code = args[1]
            elif name in ("conflict", "unprocessable") and args:
                code = args[0]
            if isinstance(code, ast.Constant) and isinstance(code.value, str):
                found.setdefault(code.value, set()).add(str(file.relative_to(SOURCE)))
            elif isinstance(code, ast.IfExp):
                for branch in (code.body, code.orelse):
                    found.setdefault(branch.value, set()).add(str(file.relative_to(SOURCE)))
    return found


def test_every_code_the_source_answers_is_enumerated():
    from gpuaas_api.operations.kinds import KINDS

    codes = set(raised_codes()) | set(errors._HTTP_CODES.values()) | {c for _, _, c, _ in errors._DB_ERRORS}
    codes |= {k.state_conflict for k in KINDS.values()} | {"http_error", "database_unavailable"}
    assert len(codes) > 50
    missing = codes - set(get_args(errors.ErrorCode))
    assert not missing, f"codes answered but not in errors.ErrorCode: {sorted(missing)}"


def test_location_documented_on_201_and_202(spec):
    documented = set()
    for method, path, op in operations(spec):
        for status in ("201", "202"):
            if status in op["responses"]:
                headers = op["responses"][status].get("headers", {})
                if status == "202":
                    assert "Location" in headers, f"{method} {path}"
                if "Location" in headers:
                    documented.add(op["operationId"])
    assert documented == set(LOCATIONS)


def test_docs_load_only_local_assets(app):
    with TestClient(app) as client:
        for page in ("/docs", "/redoc"):
            html = client.get(page)
            assert html.status_code == 200 and "text/html" in html.headers["content-type"]
            urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url:\s*['"]([^'"]+)['"]""", html.text)
            urls = [a or b for a, b in urls]
            assert len(urls) >= 2, html.text
            for url in urls:
                assert url.startswith("/") and not url.startswith("//"), f"{page} loads {url} from elsewhere"
                answer = client.get(url)
                assert answer.status_code == 200, url
                assert len(answer.content) > 100, url
            assert not re.search(r"https?://(?!127\.0\.0\.1)", re.sub(r"<!--.*?-->", "", html.text, flags=re.S)), page
        assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
