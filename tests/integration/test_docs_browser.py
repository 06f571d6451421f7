"""Swagger UI and ReDoc render in a real headless Chromium that cannot resolve any host but the
API's (no internet): every asset they need is served by the app."""

from __future__ import annotations

import asyncio
import re
import shutil

import pytest

from tests.integration.conftest import running_api

CHROMEDRIVER = shutil.which("chromedriver")


def render(url: str) -> dict[str, int | str]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     # Offline: every host but the API's fails to resolve.
                     "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # CSP violations are console errors
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        driver.get(f"{url}/docs")
        WebDriverWait(driver, 90).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".opblock")) >= 10)
        swagger = driver.find_element(By.ID, "swagger-ui").text
        operations = len(driver.find_elements(By.CSS_SELECTOR, ".opblock"))
        driver.get(f"{url}/redoc")
        WebDriverWait(driver, 90).until(lambda d: "/v1/search" in d.find_element(By.TAG_NAME, "body").text)
        redoc = driver.find_element(By.TAG_NAME, "body").text
        blocked = [e["message"] for e in driver.get_log("browser") if "Content Security Policy" in e["message"]]
        return {"swagger": swagger, "operations": operations, "redoc": redoc, "csp_violations": blocked}
    finally:
        driver.quit()


@pytest.mark.skipif(CHROMEDRIVER is None, reason="needs Debian's chromium and chromium-driver packages")
async def test_swagger_ui_and_redoc_render_without_internet(settings):
    async with running_api(settings) as url:
        page = await asyncio.to_thread(render, url)
    assert page["operations"] >= 20  # every endpoint rendered from /openapi.json by the local bundle
    assert "/v1/search" in page["swagger"] and "/v1/memories" in page["swagger"]
    assert "Memory Agent" in page["redoc"] and "/v1/export" in page["redoc"]
    # Both pages render under their Content-Security-Policy (api/docs_offline.py): nothing of this
    # origin is refused (inline script by its hash, styles, the blob: worker); what it refuses is
    # third-party (ReDoc's logo from its CDN), which is the point.
    ours = [m for m in page["csp_violations"] if not re.search(r"'https?://(?!127\.0\.0\.1)", m.split(" violates")[0])]
    assert ours == [], page["csp_violations"]
