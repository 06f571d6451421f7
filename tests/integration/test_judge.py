"""Issue 26: judge a generation on the turns the live one served, on the real stack.

A live deployment (worker + API over HTTP) serves a context at the start of every turn of three
conversations while they are written, and records them (`context.served`). Two replays are built
from the same log: one weakened (80-character summaries, no verbatim gap, nothing retrieved) and
one with the defaults (the live API serves with a 2-message gap and nothing retrieved). The
judge, the gate and the dashboard page (real Chromium) must say the first is worse and the
second better, with numbers; and reading B must write nothing into B.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
from pathlib import Path

import httpx
import psycopg
import pytest

from memory_agent import replay as replays
from memory_agent.client import MemoryClient
from core.settings import DEV_ADMIN_KEY
from tests.integration.conftest import running_api, settings_env, wait_until, worker_process

WINDOW_ONLY = {"MEMORY_SYSTEMS": '["window"]'}  # the offline (extractive) summarizer, as shipped
ROUNDS = 22
PEOPLE = [("Marta", "Lisbon"), ("Kenji", "Osaka"), ("Ingrid", "Bergen"), ("Tomas", "Brno"), ("Amara", "Lagos"),
          ("Dmitri", "Tbilisi"), ("Lucia", "Cordoba"), ("Farid", "Isfahan"), ("Noor", "Muscat"), ("Pavel", "Plzen")]
THINGS = ["violin", "sourdough", "kayak", "greenhouse", "telescope", "pottery", "chess", "orchard", "sailboat",
          "harmonica", "beekeeping", "lanterns"]


def conversation(c: int) -> list[tuple[str, str]]:
    """Rounds about a few people and their things, revisited over the conversation (so what
    comes next often names what was said long before)."""
    rng = random.Random(c)
    people = rng.sample(PEOPLE, 5)
    things = rng.sample(THINGS, 6)
    rounds = []
    for r in range(ROUNDS):
        (name, city), thing = people[rng.randrange(5)], things[rng.randrange(6)]
        rounds.append((f"Did {name} ever get back to {city} with the {thing}?",
                       f"{name} took the {thing} to {city} in week {r}; {name} said the {thing} club there meets"
                       f" on Thursdays near the {city} harbour."))
    return rounds


async def cli(settings, *args: str, ok: bool = True) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memory_agent.cli", *args, env=settings_env(settings) | WINDOW_ONLY,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(process.communicate(), 300)
    assert (process.returncode == 0) == ok, f"memory-agent {' '.join(args)} (rc {process.returncode}):\n{out.decode()}"
    return out.decode()


async def rows(settings, query: str, params=()) -> list[tuple]:
    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True) as conn:
        return await (await conn.execute(query, params)).fetchall()


async def serve_while_talking(settings, http: httpx.AsyncClient, conversations: int) -> int:
    """Each round: the context at its start (what a chat service asks), then its two messages.
    The conversations talk side by side (each in its own order), as a chat service's would: the
    wait for one conversation's projection overlaps the others'."""
    async with MemoryClient(settings) as client:
        served = await asyncio.gather(*(talk(settings, http, client, c) for c in range(conversations)))
    return sum(served)


async def talk(settings, http: httpx.AsyncClient, client: MemoryClient, c: int) -> int:
    served = 0
    for r in range(ROUNDS):
        question, answer = conversation(c)[r]
        if r >= 3:
            params = {"before_seq": 2 * r, "min_seq": 2 * r - 1, "wait_ms": 5000, "query": question}
            response = None

            async def answered() -> bool:  # 404 until the conversation's first messages are projected
                nonlocal response
                response = await http.get(f"/v1/conversations/conv-{c}/context", params=params)
                return response.status_code != 404

            await wait_until(answered, 240, f"the context of conv-{c} at {2 * r}")
            assert response.status_code == 200, response.text
            served += 1
        for seq, role, text in ((2 * r, "user", question), (2 * r + 1, "assistant", answer)):
            await client.append_message(tenant_id="tenant-a", conversation_id=f"conv-{c}",
                                        user_id=f"user-{c}", seq=seq, role=role, content=text,
                                        event_id=f"{settings.kafka.topic_prefix}-{c}-{seq}")
    return served


async def settled(settings, name: str, replay: bool = True) -> None:
    async def check() -> bool:
        try:
            # A replay records its systems; the live worker runs the window system only, which
            # this process's settings do not say, so its progress would wait for the others.
            p = await replays.progress(settings, name) if replay else None
            if p is not None and not (p.caught_up and p.total > 0):
                return False
            # Nothing in flight (a chained summary whose base took longer than the stage's wait
            # fails on a loaded machine; the judge compares whatever each generation holds).
            (open_, total), = await rows(settings, f"SELECT count(*) FILTER (WHERE status = 'processing'),"
                                                   f" count(*) FILTER (WHERE status = 'completed')"
                                                   f" FROM gen_{name}.memory")
        except psycopg.OperationalError:  # the shared server out of connection slots for a moment
            return False
        return open_ == 0 and total > 0

    await wait_until(check, 600, f"generation {name} caught up with its summaries settled")


@pytest.mark.asyncio
async def test_a_weakened_generation_is_judged_worse_and_a_stronger_one_better(settings, tmp_path):
    live = settings.generation
    weak, strong = f"{live}_w", f"{live}_s"
    served_by = settings.model_copy(update={
        "systems": ("window",),  # the worker's (WINDOW_ONLY): no topic section to wait for
        "window": settings.window.model_copy(update={"context_max_gap_messages": 2}),
        "retrieval": settings.retrieval.model_copy(update={"threshold": 5.0})})
    async with worker_process(settings, extra_env=WINDOW_ONLY), running_api(served_by) as base:
        async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": "key-a"}, timeout=30) as http:
            served = await serve_while_talking(settings, http, conversations=3)
        await settled(settings, live, replay=False)

        async def recorded() -> bool:
            return (await rows(settings, f"SELECT count(*) FROM gen_{live}.served_contexts"))[0][0] == served

        await wait_until(recorded, 60, "the served contexts recorded")
        try:
            # Independent commands run side by side (each is a process start, mostly imports).
            await asyncio.gather(
                cli(settings, "replay", "start", "--generation", weak, "--detach",
                    "--set", "llm.extractive_max_chars=80", "--set", "window.context_max_gap_messages=0",
                    "--set", "retrieval.threshold=5"),
                cli(settings, "replay", "start", "--generation", strong, "--detach"))
            for name in (weak, strong):
                await settled(settings, name)

                async def copied(name=name) -> bool:  # a replay projects the log's served records too
                    return (await rows(settings, f"SELECT count(*) FROM gen_{name}.served_contexts"))[0][0] == served

                await wait_until(copied, 120, f"the served records projected into {name}")
            before_b = await rows(settings, f"SELECT (SELECT count(*) FROM gen_{strong}.surfaced_items),"
                                            f" (SELECT count(*) FROM gen_{strong}.served_contexts)")

            # (live, weak) then (live, strong), side by side: the pairs' judgements are apart. The
            # sample is paced as shipped (half a core); the whole-log judgements use a whole core
            # (--cpu-share 1: no pauses between turns; the pacing is tests/unit/test_judge.py's).
            text, better = await asyncio.gather(
                cli(settings, "generations", "judge", live, weak, "--sample", "10"),
                cli(settings, "generations", "judge", live, strong, "--json", "--cpu-share", "1"))
            assert "WORSE" in text and "10 recorded turns" in text and "paced to 0.5 of a core" in text, text
            # Every recorded turn; the last judgement of each pair is what the gate reads.
            worse = json.loads(await cli(settings, "generations", "judge", live, weak, "--json", "--cpu-share", "1"))
            better = json.loads(better)
            for report in (worse, better):
                o = report["overall"]
                assert o["turns"] == served and o["errors"] == 0, o
                assert o["cpu_share"] == 1 and o["paced_seconds"] == 0, o
                assert o["scored_turns"] == served, o  # every turn has a continuation here
            w, s = worse["overall"], better["overall"]
            print("weak:", w, "\nstrong:", s)
            assert w["verdict"] == "worse" and w["delta"] < -0.05 and w["foresight_b"] < w["foresight_a"], w
            assert s["verdict"] == "better" and s["delta"] > 0.05 and s["items_gained"] > 0, s
            assert s["items_lost"] == 0 and s["tokens_b"] > s["tokens_a"] == 0, s
            # Reading B wrote nothing into B: no surfaced items, no served records of its own (the
            # ones it holds are the log's, projected by its replay before `before_b`).
            assert await rows(settings, f"SELECT (SELECT count(*) FROM gen_{strong}.surfaced_items),"
                                        f" (SELECT count(*) FROM gen_{strong}.served_contexts)") == before_b

            refused, nope = await asyncio.gather(  # both refused: neither changes anything
                cli(settings, "generations", "activate", weak, "--if-better-than", live, ok=False),
                cli(settings, "generations", "activate", "nope", ok=False))
            assert "worse, beyond the margin" in refused and f"{-w['delta']:.3f}" in refused, refused
            assert "no generation 'nope'" in nope and "processed" not in nope, nope

            # The admin route judges a sample in the API process (the API's settings plus B's overrides).
            async with httpx.AsyncClient(base_url=base, headers={"X-Admin-Key": DEV_ADMIN_KEY}, timeout=300) as admin:
                response = await admin.post(f"/v1/admin/generations/{weak}/judge",
                                            params={"against": live, "sample": 8, "cpu_share": 1})
                assert response.status_code == 200, response.text
                assert response.json()["overall"]["turns"] == 8
                assert response.json()["overall"]["verdict"] == "worse", response.json()["overall"]
                missing = await admin.post("/v1/admin/generations/nope/judge", params={"against": live})
                assert missing.status_code == 404 and "no generation 'nope'" in missing.text

            await dashboard(settings, base, live, weak, strong, tmp_path)

            switched = await cli(settings, "generations", "activate", strong, "--if-better-than", live)
            assert "reads now come from" in switched and f"{s['delta']:+.3f}" in switched, switched
        finally:
            for name in (weak, strong):
                replays.stop_worker(settings.model_copy(update={"state_dir": Path(settings_env(settings)["MEMORY_STATE_DIR"])}), name)


async def dashboard(settings, base: str, live: str, weak: str, strong: str, tmp_path: Path) -> None:
    """The generations page shows the last judgement beside the gated activate button."""
    from tests.integration.test_dashboard import Browser, chromium, in_thread
    from selenium.webdriver.common.by import By

    shots = Path(os.environ.get("MEMORY_TEST_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)

    def steps(b: Browser) -> None:
        b.login(DEV_ADMIN_KEY)
        b.go(f"/generations?a={live}&b={weak}")
        panel = b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#judgement .judgement"), "the last judgement")[0]
        assert panel.get_attribute("data-verdict") == "worse", panel.text
        assert f"{weak} is worse than {live}" in panel.text and "Foresight" in panel.text
        b.assert_labelled()
        b.d.find_element(By.ID, "activate-if-better").click()
        b.text_appears("worse, beyond the margin")
        assert "Conflict (409)" in b.d.find_element(By.CSS_SELECTOR, "[role=alert]").text
        b.shot("judge-worse")
        b.go(f"/generations?a={live}&b={strong}")
        b.d.refresh()
        b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#judgement .judgement[data-verdict=better]"),
               "the judgement of the stronger generation")
        assert f"{strong} is better than {live}" in b.d.find_element(By.ID, "judgement").text
        b.shot("judge-better")

    with chromium(shots) as driver:
        b = Browser(driver, base, shots)
        await in_thread(lambda: b.step("judge", lambda: steps(b)))
