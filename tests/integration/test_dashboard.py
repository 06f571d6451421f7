"""The dashboard (/ui) in a real headless Chromium against the real stack: API over HTTP,
PostgreSQL, Kafka and a worker with the scripted OpenAI-compatible model.

Selenium drives Debian's `chromium` and `chromium-driver` (.ci/run installs them); nothing is
downloaded at run time. A failing step leaves a screenshot whose path the failure names.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from runtime.client import MemoryClient
from core.settings import DEV_ADMIN_KEY, ApiSettings, WorkerSettings
from projections.migrate import migrate
from schemas import facts_events as fe
from schemas.codec import new_event
from tests.integration.conftest import API_KEYS, free_port, running_api, running_projectors, wait_until
from tests.integration.test_fact_management import ALICE, BOB, Model, generation, wait_for_dead_letter
from tests.integration.test_facts_capture import say_session, wait_for_chunks
from tests.support.fake_openai import FakeOpenAI

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (the dev extra) is not installed")
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

WAIT_S = 60  # generous: the machine is shared


@contextlib.contextmanager
def chromium(shots: Path):
    """Headless Chromium through the system chromedriver (Selenium Manager never asked)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        pytest.skip(f"{' and '.join(missing)} missing: apt-get install chromium chromium-driver (.ci/run does it)")
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager, if ever consulted, must not download
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox",  # no sandbox: CI runs as root "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1100", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    driver.shots = shots
    try:
        yield driver
    finally:
        driver.quit()


class Browser:
    """Steps with a screenshot on failure (path printed and put in the assertion)."""

    def __init__(self, driver, base: str, shots: Path) -> None:
        self.d, self.base, self.shots = driver, base, shots

    def step(self, name: str, action: Callable[[], object]) -> object:
        try:
            return action()
        except Exception as exc:
            path = self.shots / f"dashboard-{name}.png"
            self.d.save_screenshot(str(path))
            print(f"dashboard step {name!r} failed; screenshot: {path}")
            raise AssertionError(f"step {name!r} failed ({type(exc).__name__}: {exc}); screenshot {path}") from exc

    def wait(self, condition: Callable[[object], object], what: str) -> object:
        try:
            return WebDriverWait(self.d, WAIT_S, poll_frequency=0.2).until(condition)
        except TimeoutException:
            raise AssertionError(f"timed out after {WAIT_S}s waiting for {what}") from None

    def text_appears(self, text: str, css: str = "main") -> None:
        self.wait(lambda d: text in d.find_element(By.CSS_SELECTOR, css).text, f"{text!r} in {css}")

    def go(self, hash_: str) -> None:
        self.d.get(f"{self.base}/ui#{hash_}")

    def active(self):
        return self.d.switch_to.active_element

    def keys(self, *keys: str) -> None:
        self.active().send_keys(*keys)

    def shot(self, name: str) -> None:
        self.d.save_screenshot(str(self.shots / f"dashboard-{name}.png"))

    def assert_labelled(self) -> None:
        """Every visible form field has a <label for> (or sits in a <label>)."""
        unlabelled = self.d.execute_script("""
            return [...document.querySelectorAll('input, select, textarea')]
              .filter(e => e.type !== 'hidden' && e.offsetParent !== null)
              .filter(e => !(e.labels && e.labels.length && e.labels[0].textContent.trim()))
              .map(e => e.outerHTML);""")
        assert unlabelled == [], f"form fields without a label: {unlabelled}"

    def login(self, key: str) -> None:
        """Keyboard only: the key field has focus, Tab reaches the button, Enter submits."""
        self.d.delete_all_cookies()
        self.go("/conversations")
        self.d.execute_script("sessionStorage.clear()")
        self.d.refresh()
        self.wait(lambda d: self.active().get_attribute("id") == "login-key", "focus in the key field")
        self.assert_labelled()
        label = self.d.find_element(By.CSS_SELECTOR, "label[for=login-key]").text
        assert label == "API key or admin key"
        self.keys(key, Keys.TAB)
        assert self.active().tag_name == "button" and self.active().text == "Sign in"
        self.keys(Keys.ENTER)
        self.wait(lambda d: d.find_element(By.ID, "who").is_displayed(), "signed in")


async def in_thread(fn: Callable[[], object]) -> object:
    """Selenium blocks: run it off the loop that serves the API."""
    return await asyncio.to_thread(fn)


@pytest.mark.asyncio
async def test_dashboard_in_a_real_browser(settings, tmp_path, monkeypatch):
    shots = Path(os.environ.get("MEMORY_TEST_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    # The worker serves its metrics on a free port (its child process reads the environment),
    # and the API fetches them from there for the admin's stats page.
    metrics_port = free_port()
    monkeypatch.setenv("MEMORY_WORKER__METRICS_PORT", str(metrics_port))
    settings = settings.model_copy(update={"worker": WorkerSettings(metrics_port=metrics_port)})
    model = Model()
    with FakeOpenAI(json_responder=model) as fake, chromium(shots) as driver:
        async with generation(settings, fake) as (worker, http):
            async with MemoryClient(settings) as client:
                await say_session(client, "alice-1", user="alice", lines=ALICE)
                await say_session(client, "bob-1", user="bob", lines=BOB)
            await wait_for_chunks(settings, 2, worker.log_path)
            # A forged decision (bob deleting alice's fact): the projector dead-letters it.
            async with MemoryClient(settings) as client:
                facts = (await http.get("/v1/facts", headers={"X-User-Id": "alice"})).json()["facts"]
                carpenter = next(f["fact_id"] for f in facts if f["content"] == "Grandpa worked as a carpenter.")
                forged = new_event(fe.FACT_DELETED, fe.FactDeleted(fact_id=carpenter, owner_user_id="alice",
                                                                   content_snapshot="x"),
                                   tenant_id="tenant-a", conversation_id="alice-1", user_id="bob")
                await client.append(forged)
            await wait_for_dead_letter(settings, forged.event_id)
            # A second generation beside the serving one (registered, not replayed yet): the
            # generations page shows its progress at 0 and diffs the two.
            replay = settings.model_copy(update={"generation": settings.generation[:20] + "r"})
            await asyncio.to_thread(migrate, replay)
            base = str(http.base_url).rstrip("/")
            b = Browser(driver, base, shots)
            await in_thread(lambda: b.step("tenant", lambda: tenant_pages(b, base)))
            await in_thread(lambda: b.step("admin", lambda: admin_pages(b, settings.generation, replay.generation)))


def tenant_pages(b: Browser, base: str) -> None:
    d = b.d
    b.login("key-a")
    assert "Tenant tenant-a" in d.find_element(By.ID, "who").text
    nav = [a.text for a in d.find_elements(By.CSS_SELECTOR, "#nav a") if a.is_displayed()]
    assert "Facts" in nav and "Memory search" in nav and "Generations" not in nav  # admin pages hidden

    # Conversations: the search form by keyboard (focus, type, Enter), then open one from the list.
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "table[aria-label=Conversations] tbody a"), "the list")
    assert {a.text for a in d.find_elements(By.CSS_SELECTOR, "table[aria-label=Conversations] tbody a")} == \
        {"alice-1", "bob-1"}
    b.assert_labelled()
    d.find_element(By.ID, "f-search-conversations").send_keys("alic", Keys.ENTER)
    b.wait(lambda d: [a.text for a in d.find_elements(By.CSS_SELECTOR, "table[aria-label=Conversations] tbody a")]
           == ["alice-1"], "only alice-1 listed")
    listed = d.find_element(By.XPATH, "//table[@aria-label='Conversations']//tr[td/a[text()='alice-1']]").text
    assert "7" in listed and "ago" in listed  # messages, last activity
    b.shot("conversations")
    d.find_element(By.LINK_TEXT, "alice-1").click()

    # A conversation: messages, the summary chain, chunks, facts and topics.
    b.text_appears("He loved fishing, and he was born in Braga.")
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "ol.timeline li.completed"), "a completed summary")
    version = d.find_element(By.CSS_SELECTOR, "ol.timeline li.completed").text
    assert version.startswith("Messages 0–") and "generated in" in version and "Grandpa was a carpenter." in version
    for heading in ("Summary chain", "Topics", "Facts from this conversation", "Chunks", "Messages"):
        assert d.find_element(By.XPATH, f"//h2[text()='{heading}']")
    b.text_appears("Grandpa worked as a carpenter.")
    b.shot("conversation")
    b.go("/conversation/tenant-a/nobody-1")  # unknown: the server's 404, shown as such
    b.wait(lambda d: "Not found (404)" in d.find_element(By.CSS_SELECTOR, "[role=alert]").text, "the 404 shown")

    # Memory search with the keyboard only: type, Tab to the user field, type, Enter.
    b.go("/search")
    b.wait(lambda d: b.active().get_attribute("id") == "f-search-memory", "focus in the search field")
    b.assert_labelled()
    b.keys("Where was grandpa born?", Keys.TAB)
    assert b.active().get_attribute("id") == "f-user-id"
    b.keys("alice", Keys.ENTER)
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "table[aria-label='Search results'] tbody tr td.num"), "results")
    results = d.find_element(By.CSS_SELECTOR, "table[aria-label='Search results']")
    headers = [th.text for th in results.find_elements(By.TAG_NAME, "th")]
    assert headers[:2] == ["Kind", "Content"] and {"Final", "Cosine", "Keyword", "Found by"} <= set(headers)
    first = results.find_element(By.CSS_SELECTOR, "tbody tr")
    assert "Grandpa was born in Braga." in results.text
    assert float(first.find_elements(By.CSS_SELECTOR, "td.num")[0].text) > 0  # the final score
    assert d.find_element(By.CSS_SELECTOR, "table[aria-label='Excluded items']")
    b.shot("search")

    # Stats of the tenant: counts, LLM calls, lag, throughput.
    b.go("/stats")
    b.text_appears("Throughput")
    for heading in ("Memory", "LLM calls and cache hits", "Lag", "Dead letters", "Last hour"):
        assert d.find_element(By.XPATH, f"//h2[text()='{heading}']")
    # Two small charts of the last hour, a bar per minute: every message of the tenant (all sent within
    # the hour) is in the messages chart.
    messages = d.find_element(By.CSS_SELECTOR, "#chart-messages svg")
    bars = messages.find_elements(By.TAG_NAME, "rect")
    total = int(d.find_element(By.XPATH, "//tr[th='messages']/td").text)
    assert bars and total > 0 and sum(float(r.get_attribute("data-value")) for r in bars) == total
    assert 0 < messages.size["height"] < 200  # small: a chart, not a page-long dump
    assert d.find_elements(By.CSS_SELECTOR, "#chart-lag svg title")
    assert d.find_element(By.TAG_NAME, "body").size["height"] < 4000
    b.shot("stats")
    # Facts: edit and delete as the owner (alice), with a refusal shown when the API says no.
    b.go("/facts?user_id=alice")
    b.text_appears("Grandpa loved fishing.")
    b.assert_labelled()
    row = lambda text: d.find_element(By.XPATH, f"//tr[td[1][starts-with(normalize-space(.), '{text}')]]")  # noqa: E731
    row("Grandpa loved fishing.").find_element(By.XPATH, ".//button[text()='Edit']").click()
    editor = b.active()
    assert editor.tag_name == "textarea" and editor.get_attribute("id").startswith("edit-")
    b.assert_labelled()
    editor.clear()
    editor.send_keys("Grandpa loved fly fishing.")
    d.find_element(By.XPATH, "//form[.//textarea]//button[text()='Save']").click()
    b.text_appears("Edit: done.")
    b.text_appears("Grandpa loved fly fishing.")
    row("Grandpa was born in Braga.").find_element(By.XPATH, ".//button[text()='Delete']").click()
    d.switch_to.alert.accept()
    b.text_appears("Delete: done.")
    b.wait(lambda d: "Grandpa was born in Braga." not in d.find_element(By.TAG_NAME, "main").text, "the deleted fact gone")
    b.go("/conversation/tenant-a/alice-1")  # the deleted fact is gone from its conversation too
    b.text_appears("Grandpa worked as a carpenter.")
    assert "Grandpa was born in Braga." not in d.find_element(By.XPATH, "//table[preceding-sibling::h2[1]"
                                                                       "[text()='Facts from this conversation']]").text
    b.go("/facts?user_id=alice")
    b.text_appears("Grandpa worked as a carpenter.")
    # bob's own fact is not visible to alice (private), and nothing of another owner is editable.
    assert "Grandpa taught Bob to swim." not in d.find_element(By.TAG_NAME, "main").text
    # Refusal: the fact vanishes (deleted elsewhere) while its edit form is open: the API says 404.
    row("Grandpa worked as a carpenter.").find_element(By.XPATH, ".//button[text()='Edit']").click()
    fact_id = d.find_element(By.CSS_SELECTOR, "textarea[id^=edit-]").get_attribute("id").removeprefix("edit-")
    gone = httpx.delete(f"{base}/v1/facts/{fact_id}", params={"wait": "true", "wait_ms": 20000},
                        headers={"X-API-Key": "key-a", "X-User-Id": "alice"})
    assert gone.status_code == 202, gone.text
    b.active().send_keys(" (edited)")
    d.find_element(By.XPATH, "//form[.//textarea]//button[text()='Save']").click()
    b.wait(lambda d: "Not found (404)" in d.find_element(By.CSS_SELECTOR, "[role=alert]").text, "the refusal shown")
    b.wait(lambda d: "Grandpa worked as a carpenter." not in d.find_element(By.TAG_NAME, "tbody").text,
           "the list refreshed without the vanished fact")
    b.shot("facts")

    # Share the edited fact: bob then sees it, read only (seed 003: only the owner changes it).
    b.go("/facts?user_id=alice")
    b.text_appears("Grandpa loved fly fishing.")
    row("Grandpa loved fly fishing.").find_element(By.XPATH, ".//button[text()='Share']").click()
    b.text_appears("Share: done.")
    assert row("Grandpa loved fly fishing.").find_element(By.XPATH, ".//button[text()='Unshare']")
    b.go("/facts?user_id=bob")
    b.text_appears("Grandpa taught Bob to swim.")
    assert row("Grandpa taught Bob to swim.").find_elements(By.XPATH, ".//button[text()='Edit']")  # his own
    shared = row("Grandpa loved fly fishing.")
    assert "shared by alice: read only" in shared.text and not shared.find_elements(By.TAG_NAME, "button")


def admin_pages(b: Browser, generation_name: str, replay_name: str) -> None:
    d = b.d
    d.find_element(By.ID, "logout").click()
    b.login(DEV_ADMIN_KEY)
    assert "Admin key" in d.find_element(By.ID, "who").text
    nav = [a.text for a in d.find_elements(By.CSS_SELECTOR, "#nav a") if a.is_displayed()]
    assert "Generations" in nav and "Dead letters" in nav and "Facts" not in nav

    # The page shows progress as of its loading (the stream agents commit their offsets every few
    # seconds): load it again, as a person would, until the generation is caught up.
    deadline = time.monotonic() + WAIT_S
    b.go("/generations")
    while True:
        b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, f"tr[data-generation='{generation_name}'] progress"),
               "the generation's progress bar")
        progress_row = d.find_element(By.CSS_SELECTOR, f"tr[data-generation='{generation_name}']")
        if "caught up" in progress_row.text:
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"the generation never showed caught up: {progress_row.text!r}")
        time.sleep(1.0)
        d.refresh()
    bar = progress_row.find_element(By.TAG_NAME, "progress")
    assert int(bar.get_attribute("max")) > 1 and bar.get_attribute("value") == bar.get_attribute("max")
    b.assert_labelled()
    replay_row = d.find_element(By.CSS_SELECTOR, f"tr[data-generation='{replay_name}']")
    assert "behind the log" in replay_row.text and replay_row.find_element(By.TAG_NAME, "progress").get_attribute("value") == "0"
    # generations diff: the serving generation's summaries, chunks and facts are not in the new one yet.
    Select(d.find_element(By.ID, "f-from-generation")).select_by_value(generation_name)
    Select(d.find_element(By.ID, "f-to-generation")).select_by_value(replay_name)
    d.find_element(By.XPATH, "//button[text()='Diff']").click()
    b.text_appears(f"Diff {generation_name} → {replay_name}")
    assert "facts removed" in d.find_element(By.TAG_NAME, "main").text
    assert d.find_element(By.XPATH, "//table[caption='Facts']//td[text()='removed']")
    b.shot("generations")

    # The dead-letter topic: the forged decision's reason, and its original bytes.
    b.go("/dead-letters")
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-reason=not_owner]"), "the not_owner letter")
    letter = d.find_element(By.CSS_SELECTOR, "tr[data-reason=not_owner]")
    letter.find_element(By.TAG_NAME, "summary").click()
    assert "fact.deleted" in letter.find_element(By.TAG_NAME, "pre").text  # the refused envelope, verbatim
    assert "not_owner" in d.find_element(By.XPATH, "//table[caption='Counts by reason']").text
    b.shot("dead-letters")

    # Conversations and stats of a tenant the admin picks.
    b.go("/conversations")
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#tenant-pick option[value=tenant-a]"), "the tenant picker")
    Select(d.find_element(By.ID, "tenant-pick")).select_by_value("tenant-a")
    d.find_element(By.XPATH, "//form[.//select[@id='tenant-pick']]//button").click()
    b.wait(lambda d: d.find_elements(By.LINK_TEXT, "bob-1"), "tenant-a's conversations")
    b.go("/stats?tenant=tenant-a")
    b.text_appears("Throughput")
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "table[aria-label='Worker metrics']"), "the worker's metrics")
    worker = d.find_element(By.CSS_SELECTOR, "table[aria-label='Worker metrics']").text
    assert "dead letters not_owner" in worker  # the forged decision, counted
    assert "memory_" not in worker  # the measures by name, not the raw series
    d.execute_script("arguments[0].scrollIntoView()", d.find_element(By.ID, "worker-metrics"))
    assert "Tenant tenant-a" in d.find_element(By.TAG_NAME, "main").text
    b.shot("admin-stats")
    # The admin reads any tenant's conversation (read only: no fact buttons).
    b.go("/conversation/tenant-a/bob-1")
    b.text_appears("I learned to swim with grandpa at the lake every summer.")
    assert not d.find_elements(By.XPATH, "//button[text()='Delete']")


@pytest.mark.asyncio
async def test_the_dashboard_endpoints_enforce_each_keys_scope(settings):
    """/v1/ui/*: a tenant key reads its tenant (as the conversation's owner), a user key its own
    conversations, an admin key any tenant it names; the rest is refused."""
    keys = {**API_KEYS, "key-alice": {"tenant": "tenant-a", "user": "alice"}, "key-owner": {"tenant": "tenant-a"}}
    # The worker-metrics address: a free port nothing listens on (no worker in this test).
    settings = settings.model_copy(update={"api": ApiSettings(api_keys=keys),
                                           "worker": WorkerSettings(metrics_port=free_port())})
    async with running_projectors(settings), running_api(settings) as base:
        async with MemoryClient(settings) as client:
            for conversation, user in (("alice-1", "alice"), ("bob-1", "bob")):
                for seq, text in enumerate(["hello", "hi", "bye"]):
                    await client.append_message(tenant_id="tenant-a", conversation_id=conversation, user_id=user,
                                                seq=seq, role="user" if seq % 2 == 0 else "assistant", content=text)
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            def get(path, key, admin=False, **params):
                return http.get(path, params=params, headers={"X-Admin-Key" if admin else "X-API-Key": key})

            async def projected() -> bool:
                response = await get("/v1/ui/conversations/bob-1", "key-a")
                return response.status_code == 200 and len(response.json()["messages"]) == 3
            await wait_until(projected, 60, "both conversations projected")

            sessions = {key: (await get("/v1/ui/session", key)).json() for key in ("key-a", "key-alice", "key-owner")}
            assert [(s["kind"], s["tenant"], s["user"], s["may_act_as_user"]) for s in sessions.values()] == [
                ("api", "tenant-a", None, True), ("api", "tenant-a", "alice", True), ("api", "tenant-a", None, False)]
            admin = (await get("/v1/ui/session", DEV_ADMIN_KEY, admin=True)).json()
            assert (admin["kind"], admin["tenant"]) == ("admin", None)
            assert (await get("/v1/ui/session", "nope")).status_code == 401
            assert (await get("/v1/ui/session", "nope", admin=True)).status_code == 401

            overview = (await get("/v1/ui/conversations/alice-1", "key-alice")).json()
            assert overview["conversation"]["user_id"] == "alice"
            assert [m["content"] for m in overview["messages"]] == ["hello", "hi", "bye"]
            assert (await get("/v1/ui/conversations/bob-1", "key-alice")).status_code == 404  # another user's
            assert (await get("/v1/ui/conversations/alice-1", "key-b")).status_code == 404  # another tenant's
            assert (await get("/v1/ui/conversations/alice-1", "key-a", tenant="tenant-b")).status_code == 403
            assert (await get("/v1/ui/conversations/alice-1", DEV_ADMIN_KEY, admin=True)).status_code == 400
            as_admin = await get("/v1/ui/conversations/bob-1", DEV_ADMIN_KEY, admin=True, tenant="tenant-a")
            assert as_admin.status_code == 200 and as_admin.json()["conversation"]["user_id"] == "bob"
            assert (await get("/v1/ui/conversations/bob-1", DEV_ADMIN_KEY, admin=True,
                              tenant="tenant-b")).status_code == 404

            listed = lambda r: sorted(c["conversation_id"] for c in r.json()["conversations"])  # noqa: E731
            assert listed(await get("/v1/ui/conversations", DEV_ADMIN_KEY, admin=True, tenant="tenant-a")) == [
                "alice-1", "bob-1"]
            assert listed(await get("/v1/ui/conversations", "key-alice")) == ["alice-1"]
            tenants = (await get("/v1/ui/admin/tenants", DEV_ADMIN_KEY, admin=True)).json()
            assert [(t["tenant_id"], t["conversations"], t["messages"]) for t in tenants] == [("tenant-a", 2, 6)]
            assert (await get("/v1/ui/admin/tenants", "key-a")).status_code == 401

            assert (await get("/v1/ui/throughput", "key-alice")).status_code == 403  # per tenant: not a user key
            throughput = (await get("/v1/ui/throughput", "key-a")).json()
            assert throughput["last_hour"]["messages"] == 6 and throughput["last_minute"]["messages"] <= 6
            stats = await get("/v1/ui/stats", DEV_ADMIN_KEY, admin=True, tenant="tenant-a")
            assert stats.status_code == 200 and stats.json()["messages"] == 6

            diff = await get("/v1/ui/admin/generations/diff", DEV_ADMIN_KEY, admin=True, a=settings.generation,
                             b="nosuchgen")
            assert diff.status_code == 404 and "nosuchgen" in diff.json()["detail"]
            same = await get("/v1/ui/admin/generations/diff", DEV_ADMIN_KEY, admin=True, a=settings.generation,
                             b=settings.generation)
            assert same.status_code == 200 and same.json()["empty"] is True
            metrics = (await get("/v1/ui/admin/worker-metrics", DEV_ADMIN_KEY, admin=True)).json()
            assert metrics["error"].startswith("ConnectError")  # no worker here: said so, not a 500
