"""`Location` on 201 and 202 answers: where the created resource (201) or the queued operation (202)
can be read. Routers use LocatedRoute; LOCATIONS maps an operationId to the URL template, filled from
the answer's JSON fields and the request's path parameters. The header is documented in the OpenAPI
document on that operation's success response."""

from __future__ import annotations

import json
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request

OPERATION = "/v1/operations/{id}"

LOCATIONS: dict[str, str] = {
    "tenants_create": "/v1/tenants/{id}",
    "projects_create": "/v1/projects/{id}",
    "users_create": "/v1/users/{id}",
    "service_accounts_create": "/v1/projects/{project_id}/service-accounts/{id}",
    "catalog_apps_create": "/v1/catalog/apps/{slug}",
    "catalog_artifacts_create": "/v1/catalog/artifacts/{id}",
    "catalog_versions_create": "/v1/catalog/apps/{app_slug}/versions/{version}",
    "allocations_create": "/v1/allocations/{id}",
    "instances_create": "/v1/instances/{id}",
    "content_put": "/v1/content/{digest}",
    "jobs_submit": "/v1/instances/{instance_id}/jobs/{id}",
    "attachments_create": "/v1/instances/{instance_id}/attachments/{project_id}",
    "submit_grants_create": "/v1/instances/{instance_id}/submit-grants/{id}",
    "registry_allowlist_add": "/v1/registries/allowlist/{host}",
    "tenant_registries_create": "/v1/tenants/{tenant_id}/registries/{id}",
    "catalog_versions_gates_start": "/v1/catalog/gates/{id}",
    "catalog_artifacts_gates_start": "/v1/catalog/gates/{id}",
    **{op: OPERATION for op in (
        "instances_deploy", "instances_reconfigure", "instances_upgrade", "instances_rollback",
        "instances_decommission", "instances_refresh", "members_add", "members_drain", "members_resume",
        "members_remove", "members_replace", "operations_cancel", "instances_access_sync")},
}


def location(template: str, body: Any, path_params: dict[str, Any]) -> str | None:
    fields = {**path_params, **(body if isinstance(body, dict) else {})}
    try:
        return template.format(**{k: v for k, v in fields.items() if isinstance(v, str | int)})
    except (KeyError, IndexError):
        return None


class LocatedRoute(APIRoute):
    def __init__(self, path: str, endpoint, **kwargs: Any):
        template = LOCATIONS.get(kwargs.get("operation_id") or "")
        status = kwargs.get("status_code")
        if template and status in (201, 202):
            what = "the queued operation" if status == 202 else "the created resource"
            responses = dict(kwargs.get("responses") or {})
            success = dict(responses.get(status, {}))
            success.setdefault("description", "Accepted" if status == 202 else "Created")
            success["headers"] = {"Location": {"description": f"URL of {what}: {template}",
                                               "schema": {"type": "string"}}}
            kwargs["responses"] = {**responses, status: success}
        super().__init__(path, endpoint, **kwargs)

    def get_route_handler(self):
        handler = super().get_route_handler()
        template = LOCATIONS.get(self.operation_id or "")
        if not template or self.status_code not in (201, 202):
            return handler

        async def located(request: Request):
            response = await handler(request)
            if response.status_code in (201, 202) and "location" not in response.headers:
                try:
                    body = json.loads(response.body)
                except (AttributeError, ValueError):
                    return response
                url = location(template, body, request.path_params)
                if url:
                    response.headers["Location"] = url
            return response

        return located
