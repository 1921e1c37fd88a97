"""/docs (Swagger UI) and /redoc from assets this service serves itself, so they work on a control host
without internet access. The assets come from the fastapi-offline wheel (Swagger UI 5, which renders
OpenAPI 3.1, and ReDoc); nothing is fetched from a CDN, at install or at run time."""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.staticfiles import StaticFiles

ASSETS_PATH = "/docs/assets"
ASSETS = {"swagger_js": "swagger-ui-bundle.js", "swagger_css": "swagger-ui.css", "redoc_js": "redoc.standalone.js",
          "favicon": "favicon.png"}


def asset_url(name: str) -> str:
    return f"{ASSETS_PATH}/{ASSETS[name]}"


def install(app: FastAPI) -> None:
    app.mount(ASSETS_PATH, StaticFiles(directory=str(files("fastapi_offline") / "static")), name="docs-assets")
    title = app.title

    @app.get("/docs", include_in_schema=False)
    def swagger_ui():
        return get_swagger_ui_html(openapi_url=app.openapi_url, title=f"{title} - API",
                                   swagger_js_url=asset_url("swagger_js"), swagger_css_url=asset_url("swagger_css"),
                                   swagger_favicon_url=asset_url("favicon"))

    @app.get("/redoc", include_in_schema=False)
    def redoc():
        return get_redoc_html(openapi_url=app.openapi_url, title=f"{title} - API", redoc_js_url=asset_url("redoc_js"),
                              redoc_favicon_url=asset_url("favicon"), with_google_fonts=False)


def example(value: object) -> dict:
    """A route's `openapi_extra`: one example of its JSON request body (tests/openapi validates each
    against the body's schema)."""
    return {"requestBody": {"content": {"application/json": {"example": value}}}}
