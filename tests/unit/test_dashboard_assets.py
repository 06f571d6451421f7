"""The dashboard's assets: served from the package with a strict CSP, nothing from elsewhere."""

from __future__ import annotations

import re

from fastapi import FastAPI
from fastapi.testclient import TestClient

from api import ui

client = TestClient(FastAPI(routes=ui.router.routes))


def test_the_page_and_its_assets_are_served_from_the_package():
    page = client.get("/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assets = re.findall(r'(?:src|href)="(/ui/static/[^"]+)"', page.text)
    assert sorted(assets) == ["/ui/static/app.css", "/ui/static/app.js", "/ui/static/judge.js"]
    for path, kind in (("/ui/static/app.js", "text/javascript"), ("/ui/static/judge.js", "text/javascript"),
                       ("/ui/static/app.css", "text/css")):
        response = client.get(path)
        assert response.status_code == 200 and response.headers["content-type"].startswith(kind), path
        assert response.headers["x-content-type-options"] == "nosniff"
    assert client.get("/ui/", follow_redirects=False).headers["location"] == "/ui"


def test_no_asset_loads_anything_from_another_origin():
    for name in ("index.html", "app.js", "judge.js", "app.css"):
        text = ui.asset(name).decode()
        # The SVG namespace (the stats page's charts) is a name, not an address: nothing is loaded.
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg\b)", text), f"{name} refers to another origin"
        assert "@import" not in text and "innerHTML" not in text, name  # DOM built node by node


def test_only_plain_file_names_of_the_static_folder():
    for name in ("..%2F__init__.py", "../__init__.py", ".hidden", "nothing.js", "__init__.py"):
        assert client.get(f"/ui/static/{name}").status_code == 404, name
    assert ui.asset("../__init__.py") is None
