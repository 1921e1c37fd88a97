"""The toy scheduler's (toy_scheduler.py, the test app's gateway double) reads of accounting: the same claim check
and shapes as Slurm's gateway (docs/scheduler.md), and 100,000 ended jobs seeded and answered fast enough for
benches. No database: the toy alone, called over loopback HTTP with tokens signed here."""

from __future__ import annotations

import http.client
import json
import time
import uuid

import jwt
import pytest

from .toy_scheduler import ToyScheduler

KEY, INSTANCE = "toy-key-" + "0123456789abcdef" * 2, "toy-instance"
START = 1_795_000_000
DAY = 86400


def token(**claims) -> str:
    now = int(time.time())
    return jwt.encode({"iss": "gpuaas", "aud": INSTANCE, "iat": now, "exp": now + 60, "jti": uuid.uuid4().hex,
                       **claims}, KEY, algorithm="HS256")


def call(toy: ToyScheduler, method: str, path: str, bearer: str) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", toy.port, timeout=30)
    try:
        conn.request(method, path, headers={"Authorization": f"Bearer {bearer}"},
                     body=json.dumps({"name": "t", "script": "#!/bin/sh\n", "account": "research"})
                     if method == "POST" else None)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


@pytest.fixture
def toy():
    with ToyScheduler(KEY, INSTANCE, nodes=["n1"]) as started:
        yield started


def test_accounting_answers_what_it_was_told_sorted_and_only_with_the_claim(toy):
    toy.accounts = [{"name": "vision", "description": "gpuaas project 2", "parent": "root"},
                    {"name": "research", "description": "gpuaas project 1", "parent": "root"}]
    toy.associations = [{"account": "vision", "user": "bo-1"}, {"account": "research", "user": "bo-1"},
                        {"account": "research", "user": "ada-2"}]
    for refused in (token(), token(accounts=["research"], node_operate=True, accounting="yes")):
        for path in ("/v1/accounting", f"/v1/usage?start={START}&end={START + DAY}"):
            status, document = call(toy, "GET", path, refused)
            assert status == 403 and document["error"]["code"] == "forbidden", (path, document)
    status, accounting = call(toy, "GET", "/v1/accounting", token(accounting=True))
    assert status == 200
    assert [a["name"] for a in accounting["accounts"]] == ["research", "vision"]
    assert [(a["account"], a["user"]) for a in accounting["associations"]] == [
        ("research", "ada-2"), ("research", "bo-1"), ("vision", "bo-1")]


def test_usage_is_the_jobs_that_ended_in_the_window_and_bad_windows_are_refused(toy):
    ids = toy.seed_ended_jobs(10, ["research", "vision"], ["ada-2"], START, START + 10 * 3600, cpus=4, gpus=2,
                              memory_mb=8000)
    reader = token(accounting=True)
    status, usage = call(toy, "GET", f"/v1/usage?start={START}&end={START + 3 * 3600}", reader)
    assert status == 200 and (usage["start"], usage["end"]) == (START, START + 3 * 3600)
    assert [item["id"] for item in usage["items"]] == ids[:3]  # [start, end): the one ending at 3 h is not in
    first = usage["items"][0]
    assert first == {"id": ids[0], "account": "research", "user": "ada-2", "submit_time": START - 65,
                     "start_time": START - 60, "end_time": START, "elapsed_seconds": 60, "state": "COMPLETED",
                     "cpus": 4, "gpus": 2, "memory_mb": 8000, "nodes": 1}
    assert usage["items"][1]["account"] == "vision" and usage["items"][1]["end_time"] == START + 3600
    for query in ("", f"start={START}", f"start={START}&end={START}", f"start=x&end={START}",
                  f"start={START}&end={START + 31 * DAY + 1}"):
        status, document = call(toy, "GET", f"/v1/usage?{query}", token(accounting=True))
        assert status == 400 and document["error"]["code"] == "bad_request", query

    # a job cancelled through it ends now, in its own account, costing nothing (it never ran)
    status, job = call(toy, "POST", "/v1/jobs", token(sub="ada-2", accounts=["research"]))
    assert status == 201
    assert call(toy, "DELETE", f"/v1/jobs/{job['id']}", token(sub="ada-2", accounts=["research"]))[0] == 202
    now = int(time.time())
    status, usage = call(toy, "GET", f"/v1/usage?start={now - 60}&end={now + 60}", token(accounting=True))
    (cancelled,) = usage["items"]
    assert (cancelled["id"], cancelled["state"], cancelled["account"], cancelled["elapsed_seconds"]) == (
        job["id"], "CANCELLED", "research", 0)
    assert cancelled["start_time"] is None and now - 60 <= cancelled["end_time"] <= now


def test_a_hundred_thousand_ended_jobs_are_seeded_and_answered_in_one_response_fast(toy):
    began = time.perf_counter()
    ids = toy.seed_ended_jobs(100_000, ["research", "vision"], ["ada-2", "bo-1", "cy-3"], START, START + 30 * DAY,
                              gpus=1, memory_mb=4096)
    seeded = time.perf_counter() - began
    conn = http.client.HTTPConnection("127.0.0.1", toy.port, timeout=30)
    try:
        began = time.perf_counter()
        conn.request("GET", f"/v1/usage?start={START}&end={START + 30 * DAY}",
                     headers={"Authorization": f"Bearer {token(accounting=True)}"})
        response = conn.getresponse()
        body = response.read()
        answered = time.perf_counter() - began
    finally:
        conn.close()
    usage = json.loads(body)
    assert response.status == 200 and [item["id"] for item in usage["items"]] == ids
    assert [item["end_time"] for item in usage["items"]] == sorted(item["end_time"] for item in usage["items"])
    assert {item["user"] for item in usage["items"]} == {"ada-2", "bo-1", "cy-3"}
    print(f"seeded 100,000 in {seeded:.2f} s; answered {len(body) / 1e6:.1f} MB in {answered:.2f} s")
    assert seeded < 2.0 and answered < 1.5, (seeded, answered)
