"""The HTTP client: one error envelope turned into ApiError, keyset pages, Idempotency-Key on every
operation request, retries where repeating is safe, and the instance event stream (SSE)."""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx

from .. import __version__
from .errors import ApiError, ClientError, StreamEnded, unreachable

# Statuses that say "try again": the proxy or the service is restarting, or the database is away.
RETRY_STATUSES = frozenset({502, 503, 504})
RETRY_DELAYS = (0.5, 1.0, 2.0)
PAGE_LIMIT = 500
# The service reads a credential from the instance's hosts, one after the other, while the request waits.
CREDENTIAL_TIMEOUT = 300.0


def api_error(response: httpx.Response) -> ApiError:
    """The service's error envelope of a response, as an ApiError."""
    try:
        error = response.json()["error"]
        return ApiError(response.status_code, str(error["code"]), str(error["message"]), error.get("details") or {},
                        error.get("correlation_id"))
    except (ValueError, KeyError, TypeError):
        # Not the service's envelope (a proxy's page, say): keep it short.
        text = " ".join(response.text.split())[:200] or response.reason_phrase
        return ApiError(response.status_code, f"http_{response.status_code}", text, {},
                        response.headers.get("X-Correlation-ID"))


def new_idempotency_key() -> str:
    return f"cli-{secrets.token_hex(12)}"


class Client:
    def __init__(self, url: str, token: str | None, *, timeout: float = 30,
                 transport: httpx.BaseTransport | None = None):
        self.url = url.rstrip("/")
        headers = {"User-Agent": f"gpuaas-cli/{__version__}", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- requests --------------------------------------------------------------------------------------

    def request(self, method: str, path: str, *, json_body: Any = None, params: dict | None = None,
                headers: dict | None = None, retry: bool, timeout: float | None = None) -> Any:
        """The decoded JSON answer (None for 204). `retry`: repeat on a lost connection or a 502/503/504,
        for requests that are safe to repeat (reads, and posts carrying an Idempotency-Key); `timeout`:
        seconds, instead of the client's."""
        attempts = len(RETRY_DELAYS) + 1 if retry else 1
        for attempt in range(attempts):
            try:
                response = self.http.request(method, path, json=json_body, params=params, headers=headers,
                                             timeout=timeout or self.http.timeout)
            except httpx.TransportError as exc:
                if attempt + 1 < attempts:
                    time.sleep(RETRY_DELAYS[attempt])
                    continue
                raise unreachable(self.url, exc) from None
            if response.status_code in RETRY_STATUSES and attempt + 1 < attempts:
                time.sleep(RETRY_DELAYS[attempt])
                continue
            if response.status_code >= 400:
                raise api_error(response)
            return response.json() if response.content else None
        raise AssertionError("unreachable")

    def get(self, path: str, headers: dict | None = None, **params) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None}, headers=headers,
                            retry=True)

    def post(self, path: str, body: dict | None = None, *, idempotency_key: str | None = None) -> Any:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self.request("POST", path, json_body=body, headers=headers, retry=idempotency_key is not None)

    def patch(self, path: str, body: dict) -> Any:
        return self.request("PATCH", path, json_body=body, retry=False)

    def delete(self, path: str) -> Any:
        # Not retried: a delete repeated after a lost answer would be refused as not found.
        return self.request("DELETE", path, retry=False)

    def pages(self, path: str, **params) -> Iterator[dict]:
        """Every item of a keyset-paginated list, page after page."""
        cursor, limit = None, params.pop("limit", PAGE_LIMIT)
        while True:
            page = self.get(path, **params, limit=limit, cursor=cursor)
            if isinstance(page, list):  # a route that answers with the whole list (the roles)
                yield from page
                return
            yield from page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def operate(self, path: str, body: dict | None = None, idempotency_key: str | None = None) -> dict:
        """POST a lifecycle or member action; the same key (per caller and instance) returns the same
        operation, so a retry after a lost answer never runs it twice."""
        return self.post(path, body, idempotency_key=idempotency_key or new_idempotency_key())

    def issue_credential(self, instance_id: str, name: str) -> dict:
        """A runtime access credential of the instance ({name, media_type, filename, content, node_name,
        issued_at}); never retried: every issuance is one the service audits."""
        return self.request("POST", f"/v1/instances/{instance_id}/credentials/{name}", retry=False,
                            timeout=CREDENTIAL_TIMEOUT)

    # -- the event stream ------------------------------------------------------------------------------

    def event_stream(self, instance_id: str, after: int = 0) -> EventStream:
        return EventStream(self, instance_id, after)


class EventStream:
    """The instance's events after `after`, as they are appended (GET .../events/stream). It reconnects
    with Last-Event-ID when the service ends a stream (max_seconds) or the connection drops; close()
    from another thread ends the iteration."""

    RECONNECT_DELAYS = (0.5, 1.0, 2.0, 4.0, 8.0)

    def __init__(self, client: Client, instance_id: str, after: int):
        self.client, self.instance_id, self.last = client, instance_id, after
        self.closed = threading.Event()
        self._response: httpx.Response | None = None

    def close(self) -> None:
        """Ends the iteration now, also while it waits for the next event: shutting the socket down
        wakes the blocked read (closing the response alone waits for the next bytes to arrive)."""
        self.closed.set()
        response = self._response
        if response is None:
            return
        network = response.extensions.get("network_stream")
        sock = network.get_extra_info("socket") if network is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        else:
            response.close()

    def __iter__(self) -> Iterator[dict]:
        failures = 0
        while not self.closed.is_set():
            try:
                for event in self._one_connection():
                    failures = 0
                    yield event
                failures = 0  # the service ended the stream (max_seconds): resume at once
            except (httpx.TransportError, httpx.StreamError) as exc:
                if self.closed.is_set():
                    return
                if failures >= len(self.RECONNECT_DELAYS):
                    raise ClientError(f"lost the event stream of {self.instance_id} "
                                      f"({type(exc).__name__}: {exc})") from None
                time.sleep(self.RECONNECT_DELAYS[failures])
                failures += 1

    def _one_connection(self) -> Iterator[dict]:
        path = f"/v1/instances/{self.instance_id}/events/stream"
        with self.client.http.stream("GET", path, headers={"Last-Event-ID": str(self.last),
                                                           "Accept": "text/event-stream"},
                                     timeout=httpx.Timeout(30, read=None)) as response:
            self._response = response
            if self.closed.is_set():
                return
            if response.status_code >= 400:
                response.read()
                raise api_error(response)
            kind, data = None, []
            for line in response.iter_lines():
                if self.closed.is_set():
                    return
                if line:
                    field, _, value = line.partition(":")
                    value = value.removeprefix(" ")
                    if field == "event":
                        kind = value
                    elif field == "data":
                        data.append(value)
                    continue
                if kind == "end":
                    reason = json.loads("\n".join(data) or "{}").get("reason", "ended")
                    raise StreamEnded(f"the service ended the event stream: {reason}")
                if data:
                    event = json.loads("\n".join(data))
                    self.last = max(self.last, int(event["id"]))
                    yield event
                kind, data = None, []
