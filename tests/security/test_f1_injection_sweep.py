"""Finding 1, swept: every string field a tenant (project admin or service account) sets, times a set
of injection payloads (Jinja, YAML tags, shell, SQL, format strings, path traversal, newlines, NUL,
oversize). Each request must end in a 4xx with the error envelope or store the value verbatim; no
request may produce a 5xx; and a real run given every payload at once writes them down as text,
evaluating none."""

from __future__ import annotations

from collections.abc import Callable

from operations.helpers import TEST_APP, make_instance, wait_op

SA, ADMIN = "service_account", "project_admin"


def payloads(mark: str) -> list[str]:
    return [
        "{{ lookup('pipe', 'touch %s/jinja') }}" % mark,  # noqa: UP031 - the braces are the payload
        "{%% for x in [1] %%}{{ lookup('pipe', 'touch %s/block') }}{%% endfor %%}" % mark,  # noqa: UP031
        "{{ lookup('env', 'GPUAAS_SECRET_KEY') }}",
        "{{ 7 * 7 }}",
        "!!python/object/apply:os.system ['touch %s/yaml']" % mark,  # noqa: UP031
        "!unsafe x",
        "$(touch %s/subshell)" % mark,  # noqa: UP031
        "`touch %s/backtick`; touch %s/semicolon #" % (mark, mark),  # noqa: UP031
        "../../../../etc/shadow",
        "x\nansible_connection: local",
        '{"ansible_host": "192.0.2.1"}',
        "' OR '1'='1'; DROP TABLE app_instances; --",
        "%s %(x)s {0} %n",
        "\u202egnp.exe\u0000",
        "A" * 70000,
    ]


def as_header(payload: str) -> str:
    """What an HTTP client can put in a header: ASCII on one line."""
    return payload.encode("ascii", "backslashreplace").decode().replace("\n", "\\n")[:200]


def fields(ops, iid: str) -> list[tuple[str, str, str, Callable[[str], dict]]]:
    """(who, method, url, request builder) for every string field a tenant sets."""
    project, alloc = ops.ids["project_a1"], ops.ids["alloc_ops"]
    create = f"/v1/projects/{project}/instances"
    base = {"name": "sweep", "app_slug": TEST_APP, "allocation_ids": [alloc],
            "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}],
            "parameters": {"marker_dir": str(ops.marker_root)}}

    def instance(change: Callable[[str], dict]) -> Callable[[str], dict]:
        return lambda p: {"json": base | change(p)}

    return [
        (SA, "POST", create, instance(lambda p: {"name": p})),
        (SA, "POST", create, instance(lambda p: {"labels": {p: "v"}})),
        (SA, "POST", create, instance(lambda p: {"labels": {"k": p}})),
        (SA, "POST", create, instance(lambda p: {"version": p})),
        (SA, "POST", create, instance(lambda p: {"app_slug": p})),
        (SA, "POST", create, instance(lambda p: {"parameters": base["parameters"] | {"message": p}})),
        (SA, "POST", create, instance(lambda p: {"parameters": base["parameters"] | {p: "x"}})),
        (SA, "PATCH", f"/v1/instances/{iid}", lambda p: {"json": {"labels": {"k": p}}}),
        (SA, "POST", f"/v1/instances/{iid}/members", lambda p: {"json": {"role": "worker", "allocation_id": alloc,
                                                                        "host_name": p}}),
        (SA, "POST", f"/v1/instances/{iid}/members", lambda p: {"json": {"role": p, "allocation_id": alloc}}),
        (SA, "POST", f"/v1/instances/{iid}/reconfigure", lambda p: {"json": {"parameters": {"round": p}}}),
        (SA, "POST", f"/v1/instances/{iid}/deploy", lambda p: {"headers": {"Idempotency-Key": as_header(p)}}),
        (SA, "GET", f"/v1/instances/{iid}", lambda p: {"headers": {"X-Correlation-ID": as_header(p)}}),
        (SA, "GET", create, lambda p: {"params": {"status": p[:4000]}}),
        (SA, "GET", create, lambda p: {"params": {"cursor": p[:4000]}}),
        (SA, "GET", f"/v1/instances/{iid}/events", lambda p: {"params": {"type": p[:4000]}}),
        (ADMIN, "POST", f"/v1/projects/{project}/service-accounts", lambda p: {"json": {"name": p}}),
        (ADMIN, "POST", f"/v1/projects/{project}/service-accounts", lambda p: {"json": {"name": "sa",
                                                                                        "description": p}}),
        (SA, "POST", "/v1/me/tokens", lambda p: {"json": {"name": p}}),
    ]


def test_every_tenant_string_field_takes_every_payload_as_data(ops):
    held, _ = make_instance(ops, "held")
    rows = fields(ops, held["id"])
    marks = payloads(str(ops.marker_root))
    tried = accepted = 0
    for who, method, url, build in rows:
        for payload in marks:
            tried += 1
            r = ops.w.call(who, method, url, **build(payload))
            assert r.status_code < 500, (method, url, payload[:80], r.status_code, r.text[:300])
            if r.status_code >= 400:
                assert r.json()["error"]["correlation_id"], r.text
                continue
            accepted += 1
            if r.status_code == 201 and url.endswith("/instances"):
                # stored verbatim (the one free-text parameter), then deleted so the hosts are free again
                assert r.json()["parameters"].get("message", payload) == payload
                ops.w.call(who, "DELETE", f"/v1/instances/{r.json()['id']}", 204)
    assert not [p.name for p in ops.marker_root.iterdir() if p.is_file()], "a payload ran"
    print(f"\ninjection sweep: {len(rows)} tenant string fields x {len(marks)} payloads = {tried} requests; "
          f"{accepted} accepted as data, {tried - accepted} refused with a 4xx, 0 server errors, 0 evaluated")
    assert tried >= len(rows) * 10


def test_a_run_writes_every_payload_down_as_text(ops):
    text = "\n".join(p for p in payloads(str(ops.marker_root)) if "\u0000" not in p and len(p) < 2000)
    ops.start_worker()
    instance, marker = make_instance(ops, "sweep-run", message=text)
    op = ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()
    assert wait_op(ops, op["id"])["status"] == "succeeded"
    assert (marker / "message").read_text() == text
    assert sorted(p.name for p in ops.marker_root.iterdir()) == ["sweep-run"], "a payload ran"
