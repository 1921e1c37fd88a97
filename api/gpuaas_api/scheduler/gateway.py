"""The platform's side of the scheduler protocol (docs/scheduler.md): one HTTP call to an instance's
gateway, signed with the instance's scheduler key (an HS256 JWT made with PyJWT, the library the registry's
token service already uses), and the gateway's answer or its refusal turned into the API's error envelope.
The gateway runs on the first serving host of the adapter's scheduler role."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

import httpx
import jwt
import psycopg

from ..catalog.adapter import SchedulerSpec, stored_spec
from ..catalog.service import get_version_by_id
from ..config import OperationSettings
from ..errors import ApiError, conflict
from ..executor.plan import SERVING, live_members
from ..secrets import service as secrets

TOKEN_SECONDS = 60
# One pool of keep-alive connections for every gateway: a call costs its round trip, not a TCP handshake.
_client = httpx.Client(timeout=httpx.Timeout(30.0, connect=3.0), limits=httpx.Limits(max_keepalive_connections=32))


def unavailable(message: str, **details) -> ApiError:
    return ApiError(502, "scheduler_unavailable", message, details)


@dataclass(frozen=True)
class Gateway:
    instance_id: str
    url: str
    key: str = field(repr=False)
    spec: SchedulerSpec

    def call(self, method: str, path: str, claims: dict, *, json: dict | None = None,
             params: dict | None = None) -> dict:
        now = int(time.time())
        token = jwt.encode({"iss": "gpuaas", "aud": self.instance_id, "iat": now, "exp": now + TOKEN_SECONDS,
                            "jti": uuid.uuid4().hex} | claims, self.key, algorithm="HS256")
        try:
            answer = _client.request(method, self.url + path, json=json, params=params,
                                     headers={"Authorization": f"Bearer {token}"})
        except httpx.HTTPError as exc:
            raise unavailable(f"the scheduler gateway at {self.url} did not answer: {type(exc).__name__}",
                              url=self.url) from None
        try:
            body = answer.json()
        except ValueError:
            body = {}
        if answer.is_success:
            return body
        error = body.get("error") if isinstance(body, dict) else None
        error = error if isinstance(error, dict) else {}
        message, code = str(error.get("message") or answer.reason_phrase)[:2000], error.get("code")
        if answer.status_code == 404:
            raise ApiError(404, "not_found", message, {"gateway_code": code})
        if answer.status_code == 403 and code == "unknown_identity":
            raise conflict("identity_not_synced", "your runtime identity is not on the cluster yet: the access sync "
                           "that adds it is queued or running (see the instance's operations); retry when it ends")
        if answer.status_code == 403:
            raise ApiError(403, "scheduler_refused", message, {"gateway_code": code})
        if answer.status_code == 409:
            raise conflict("conflict", message, gateway_code=code)
        if answer.status_code == 400:
            raise ApiError(422, "validation_error", message, {"gateway_code": code})
        raise unavailable(f"the scheduler gateway answered {answer.status_code}: {message}",
                          status=answer.status_code, gateway_code=code)


def for_instance(conn: psycopg.Connection, settings: OperationSettings, instance: dict) -> Gateway:
    """The gateway of a running instance whose app declares a scheduler (409 otherwise)."""
    spec = stored_spec(get_version_by_id(conn, instance["app_version_id"]))
    if spec.scheduler is None:
        raise conflict("no_scheduler", "this instance's app serves no jobs or nodes (its adapter declares no "
                       "scheduler)")
    if instance["status"] not in ("running", "degraded"):
        raise conflict("instance_not_operable", f"the instance is {instance['status']}; jobs and nodes are served "
                       "by a running or degraded instance", status=instance["status"])
    serving = sorted((m for m in live_members(conn, instance["id"])
                      if m["role"] == spec.scheduler.role and m["status"] in SERVING),
                     key=lambda m: SERVING.index(m["status"]))
    if not serving:
        raise unavailable(f"no serving member of role {spec.scheduler.role} runs the scheduler gateway")
    address = (serving[0]["host"] or {}).get("address", serving[0]["host_name"])
    host = f"[{address}]" if ":" in address else address
    key = secrets.load(conn, settings, instance["id"]).get(spec.scheduler.key)
    if key is None:
        raise unavailable("the instance has no scheduler key yet: deploy it first")
    return Gateway(str(instance["id"]), f"http://{host}:{spec.scheduler.port}", key, spec.scheduler)
