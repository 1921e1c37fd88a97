"""The web console at /console/: a small page that shows a project's instances, an instance's members and
operations, and its live timeline. Static files only (HTML, CSS and plain JavaScript modules in
static/, shipped in the wheel, no CDN, no build step); the page calls the public API with the bearer
token its user pastes in, so it shows exactly what that token may read (docs/console.md).

Tenant strings reach the page as data and are only ever set as text, never parsed as HTML; the
Content-Security-Policy below is the second wall: scripts and styles from this origin only, no inline
script, no framing, and the API as the only place the page may connect to."""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter, Response
from fastapi.responses import RedirectResponse

PREFIX = "/console"
CONTENT_TYPES = {"html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8",
                 "css": "text/css; charset=utf-8", "svg": "image/svg+xml"}
# 'self' for scripts, styles and connections; nothing else, not even inline styles or data: images.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY", "Cache-Control": "no-cache"}
STATIC = files(__name__) / "static"
FILES = sorted(p.name for p in STATIC.iterdir() if p.name.rpartition(".")[2] in CONTENT_TYPES)

api = APIRouter(include_in_schema=False)  # not part of the API: no OpenAPI entry


def _serve(name: str):
    body = (STATIC / name).read_bytes()
    content_type = CONTENT_TYPES[name.rpartition(".")[2]]

    def serve() -> Response:
        return Response(body, media_type=content_type, headers=HEADERS)

    serve.__name__ = f"console_{name.replace('.', '_')}"
    return serve


@api.get(PREFIX, include_in_schema=False)
def console_redirect() -> RedirectResponse:
    # Relative, so that the console also works behind a proxy that serves the API under a path prefix.
    return RedirectResponse("console/", status_code=308)


api.add_api_route(f"{PREFIX}/", _serve("index.html"), methods=["GET"], include_in_schema=False)
for _name in FILES:
    api.add_api_route(f"{PREFIX}/{_name}", _serve(_name), methods=["GET"], include_in_schema=False)
