"""The dashboard: static HTML, CSS and JS served from this package at /ui (no CDN).

The page holds no data of its own: it calls the JSON API with the key typed into its login
form (kept in sessionStorage), so the server enforces every rule (docs/dashboard.md).
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, HTTPException
from fastapi.responses import RedirectResponse, Response

router = APIRouter(include_in_schema=False)
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
# Everything from this origin only; no inline scripts, no frames, no third parties.
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
                               " connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def asset(name: str) -> bytes | None:
    """A file of api/ui/static, or None (no paths outside it: names are plain file names)."""
    if "/" in name or "\\" in name or name.startswith("."):
        return None
    path = resources.files(__package__).joinpath("static", name)
    return path.read_bytes() if path.is_file() else None


def _serve(name: str) -> Response:
    body = asset(name)
    suffix = name[name.rfind("."):] if "." in name else ""
    if body is None or suffix not in _TYPES:
        raise HTTPException(404, detail=f"no dashboard asset {name!r}")
    return Response(body, media_type=_TYPES[suffix], headers=_HEADERS)


@router.get("/ui")
def index() -> Response:
    return _serve("index.html")


@router.get("/ui/")
def index_slash() -> RedirectResponse:
    return RedirectResponse("/ui", status_code=308)


@router.get("/ui/static/{name}")
def static(name: str) -> Response:
    return _serve(name)
