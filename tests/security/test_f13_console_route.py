"""Issue 22, finding 6: the web console builds API paths from the id in a link's fragment
(#/instances/ID, #/projects/ID), URL-decoded. Checked in real Chromium: the finding's links
(`..%2F..%2Fv1%2Fme%2Ftokens`, `x%2F..%2F..%2Fsomething%3F`) stay under their instance path, since
the console already encoded the id with encodeURIComponent, which escapes `/`, `?`, `#` and `%`. But
encodeURIComponent leaves `.` and `..` as they are, and the URL parser resolves such a segment (`%2E%2E`
in a link decodes to `..` too): `#/instances/..` made the page send GET /v1/ with the viewer's token,
outside any instance. The console now builds every API path with one helper (api.js `path`) that
encodes each value as one segment and refuses `.` and `..`. This loads crafted links and checks, from
the requests the browser sent, that none went outside `/v1/me` and the named resource's own path."""

from __future__ import annotations

from urllib.parse import quote, unquote, urlsplit

import pytest
from api.world import build_world
from console import conftest as console_fixtures
from playwright.sync_api import expect

browser, served, console = console_fixtures.browser, console_fixtures.served, console_fixtures.console

CRAFTED = [
    ("instances", ".."), ("instances", "%2E%2E"), ("instances", "."), ("projects", ".."),
    ("instances", "..%2F..%2Fv1%2Fme%2Ftokens"), ("instances", "x%2F..%2F..%2Fsomething%3F"),
]


@pytest.fixture
def sent(console) -> list[str]:
    """The path of every API request the page sends."""
    paths: list[str] = []
    console.page.on("request", lambda r: urlsplit(r.url).path.startswith("/v1") and paths.append(urlsplit(r.url).path))
    return paths


def test_a_crafted_link_calls_no_route_outside_the_resource_it_names(client, database, console, sent):
    world = build_world(client, database)
    page = console.page
    console.open(world.tokens["service_account"])
    for kind, crafted in CRAFTED:
        page.goto("about:blank")  # a fresh document: the refusal waited for below is this link's
        sent.clear()
        page.goto(f"{console.url}/console/#/{kind}/{crafted}")
        expect(page.locator(".refusal")).to_be_visible()
        own = f"/v1/{kind}/{quote(unquote(crafted), safe='')}"
        outside = [p for p in sent if p != "/v1/me" and p != own and not p.startswith(own + "/")]
        assert outside == [], (crafted, sent)
        if unquote(crafted) in (".", ".."):  # no such id: refused in the page, nothing asked
            assert sent == ["/v1/me"], (crafted, sent)
            expect(page.locator(".refusal")).to_contain_text("is not an id")
        else:  # asked, under its own path, and refused by the service
            assert sent == ["/v1/me", own], (crafted, sent)
    assert console.errors == []
