"""Swagger UI and ReDoc served from the app: their assets come from the fastapi-offline package
(no CDN, no web fonts), so /docs and /redoc work on a machine without internet."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

STATIC_URL = "/static/docs"
# As the dashboard's (api/ui): this origin only, no frames. The pages' one inline script is
# allowed by its hash; Swagger UI and ReDoc style their elements inline, and ReDoc's search runs
# in a blob: worker.
_CSP = ("default-src 'self'; script-src 'self'{hashes}; style-src 'self' 'unsafe-inline'; img-src 'self' data:;"
        " font-src 'self'; connect-src 'self'; worker-src 'self' blob:; frame-ancestors 'none'; base-uri 'none';"
        " form-action 'self'; object-src 'none'")
_INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.S)


def secured(page: HTMLResponse) -> HTMLResponse:
    """The page with the app's security headers; its inline scripts allowed by their SHA-256."""
    hashes = "".join(f" 'sha256-{base64.b64encode(hashlib.sha256(body).digest()).decode()}'"
                     for body in _INLINE_SCRIPT.findall(page.body))
    page.headers.update({"Content-Security-Policy": _CSP.format(hashes=hashes), "X-Frame-Options": "DENY",
                         "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})
    return page


def assets_dir() -> Path:
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


def install(app: FastAPI) -> None:
    """Call on an app made with docs_url=None, redoc_url=None."""
    app.mount(STATIC_URL, StaticFiles(directory=assets_dir()), name="docs-assets")
    redirect = app.swagger_ui_oauth2_redirect_url or "/docs/oauth2-redirect"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return secured(get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - Swagger UI", oauth2_redirect_url=redirect,
            swagger_js_url=f"{root}{STATIC_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{STATIC_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{STATIC_URL}/favicon.png",
            # No validator badge: Swagger UI would fetch it from validator.swagger.io.
            swagger_ui_parameters={**(app.swagger_ui_parameters or {}), "validatorUrl": None}))

    @app.get(redirect, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return secured(get_swagger_ui_oauth2_redirect_html())

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return secured(get_redoc_html(openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - ReDoc",
                                      redoc_js_url=f"{root}{STATIC_URL}/redoc.standalone.js",
                                      redoc_favicon_url=f"{root}{STATIC_URL}/favicon.png", with_google_fonts=False))
