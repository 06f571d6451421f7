"""The context route's transaction handling under failure (review of issue 25's read path,
api/routes/context.py): the conversation's row in autocommit, the first reads' own BEGIN, the
guessed round trip. Whatever a request ends in (a 404 or 403 after the BEGIN went, a failed
statement in the batch, a cancelled request), the pool's connection comes back idle and out of
autocommit, and the next request on it runs as it should. One pooled connection, so every
request reuses it."""

from __future__ import annotations

import asyncio

import httpx
import psycopg
import pytest

from api.app import create_app
from tests.integration.conftest import running_api
from tests.integration.test_retrieval import connect, conversation, context
from tests.support import labelled_set as L

KEYS = {"key-a": {"tenant": L.A, "act_as": "any_user"}, "key-b": {"tenant": "tenant-b", "act_as": "any_user"},
        "key-bob": {"tenant": L.A, "user": "bob"}}


def one_connection(settings, **api):
    return settings.model_copy(update={
        "postgres": settings.postgres.model_copy(update={"pool_min_size": 1, "pool_max_size": 1}),
        "api": type(settings.api).model_validate({**settings.api.model_dump(), "api_keys": KEYS, **api})})


async def pooled_is_clean(app) -> None:
    """The pool's one connection: idle, not in autocommit, and a write on it is transactional
    (rolled back, it is gone)."""
    conn = await app.state.pool.getconn(timeout=5)
    try:
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert not conn.autocommit
        await conn.execute("CREATE TEMP TABLE IF NOT EXISTS probe (x int)")
        await conn.commit()
        await conn.execute("INSERT INTO probe VALUES (1)")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS  # a transaction was opened
        await conn.rollback()
        assert await (await conn.execute("SELECT count(*) FROM probe")).fetchone() == (0,)
        await conn.rollback()
    finally:
        await app.state.pool.putconn(conn)


async def get(url: str, cid: str, key: str, **params) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}, timeout=60) as http:
        return await http.get(f"/v1/conversations/{cid}/context", params=params)


async def test_404_and_403_after_the_guessed_begin_leave_the_connection_clean(settings):
    settings = one_connection(settings)
    await conversation(settings, "c1", "maria", L.JOE, ["Hi!", "Hello", "About grandpa?"])
    await conversation(settings, "c1", "other", None, ["B's own"], tenant="tenant-b")
    app = create_app(settings)
    params = {"query": "grandpa", "before_seq": 2}
    async with running_api(settings, app) as url:
        await context(url, "c1", **params)  # remembered: the next requests guess
        assert app.state.conversation_owners[(L.A, "c1")] == ("maria", L.JOE)
        # A key bound to bob: the guess reads as bob after a BEGIN; the row says maria's: 404.
        assert (await get(url, "c1", "key-bob", **params)).status_code == 404
        await pooled_is_clean(app)
        # Another tenant's conversation of the same id: its own row, never tenant A's guess.
        body = (await get(url, "c1", "key-b", **params)).json()
        assert [m["content"] for m in body["messages"]] == ["B's own"]
        assert app.state.conversation_owners[("tenant-b", "c1")] == ("other", None)
        await pooled_is_clean(app)
        # The conversation erased under the guess: 404, forgotten, clean.
        async with await connect(settings) as conn:
            await conn.execute("DELETE FROM conversations WHERE tenant_id = %s AND conversation_id = 'c1'", (L.A,))
        assert (await get(url, "c1", "key-a", **params)).status_code == 404
        assert (L.A, "c1") not in app.state.conversation_owners
        await pooled_is_clean(app)


async def test_min_seq_and_as_of_seq_read_without_the_guess_and_leave_the_connection_clean(settings):
    settings = one_connection(settings)
    await conversation(settings, "c1", "maria", L.JOE, ["Hi!", "Hello", "About grandpa?"])
    app = create_app(settings)
    async with running_api(settings, app) as url:
        await context(url, "c1", query="grandpa", before_seq=2)
        waited = await context(url, "c1", query="grandpa", before_seq=2, min_seq=2)
        assert waited["watermark"]["requested_min_seq"] == 2 and waited["watermark"]["complete"]
        await pooled_is_clean(app)
        assert (await get(url, "c1", "key-bob", query="grandpa", before_seq=2, min_seq=2)).status_code == 404
        await pooled_is_clean(app)
        rebuilt = await get(url, "c1", "key-a", query="grandpa", before_seq=2, as_of_seq=2)
        assert rebuilt.status_code < 500, rebuilt.text
        await pooled_is_clean(app)
        assert (await get(url, "c1", "key-bob", before_seq=2, as_of_seq=2)).status_code == 404
        await pooled_is_clean(app)


async def test_a_failing_statement_in_the_guessed_batch_falls_back_and_leaves_the_connection_clean(settings):
    """A statement of the one-round-trip batch times out (a lock held on topic_conversations: the
    topic section's progress row, read ahead, waits past statement_timeout): the route reads as
    usual, the context is served (the topic section, reading alone, reports its timeout), and
    the connection is clean."""
    settings = one_connection(settings, statement_timeout_ms=300)
    await conversation(settings, "c1", "maria", L.JOE, ["Hi!", "Hello", "About grandpa?"])
    app = create_app(settings)
    params = {"query": "grandpa", "before_seq": 2}
    async with running_api(settings, app) as url:
        first = await context(url, "c1", **params)
        async with await connect(settings) as locker:
            await locker.execute("LOCK TABLE topic_conversations IN ACCESS EXCLUSIVE MODE")
            blocked = await get(url, "c1", "key-a", **params)
            await locker.rollback()
        assert blocked.status_code == 200, blocked.text
        assert "canceling statement due to statement timeout" in blocked.json()["active_topic"]["error"]
        assert [m["content"] for m in blocked.json()["messages"]] == [m["content"] for m in first["messages"]]
        await pooled_is_clean(app)
        again = await context(url, "c1", **params)
        assert again["messages"] == first["messages"]
        await pooled_is_clean(app)


async def test_a_request_cancelled_between_the_begin_and_the_commit_leaves_the_connection_clean(settings):
    """The request is cancelled while its guessed batch (BEGIN sent) waits on a lock in the
    server: the connection the pool gets back is not handed out inside that transaction nor in
    autocommit."""
    settings = one_connection(settings)
    await conversation(settings, "c1", "maria", L.JOE, ["Hi!", "Hello", "About grandpa?"])
    app = create_app(settings)
    params = {"query": "grandpa", "before_seq": 2}
    async with running_api(settings, app) as url:
        await context(url, "c1", **params)
        async with await connect(settings) as locker:
            await locker.execute("LOCK TABLE topics IN ACCESS EXCLUSIVE MODE")
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api",
                                         headers={"X-API-Key": "key-a"}) as http:
                task = asyncio.create_task(http.get("/v1/conversations/c1/context", params=params))
                async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True) as watch:
                    while not await (await watch.execute(
                            "SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                            " AND application_name LIKE 'memory-agent-api/%%'")).fetchone() == (True,):
                        assert not task.done(), task.result()
                        await asyncio.sleep(0.01)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            await locker.rollback()
        await pooled_is_clean(app)
        again = await context(url, "c1", **params)
        assert [m["content"] for m in again["messages"]] == ["Hi!", "Hello"]
        await pooled_is_clean(app)


async def test_a_generation_switch_between_requests_reads_the_new_generations_row_on_the_same_connection(settings):
    """Reads move to another generation (`generations activate`) while the process remembers
    the conversation's owner from the old one: the next requests on the same connection point
    it at the new schema before autocommit goes on, the old guess is checked against the new
    row (another user there: not used), and the connection stays clean."""
    from projections.generations import activate
    from projections.migrate import migrate

    settings = one_connection(settings)
    other = settings.model_copy(update={"generation": f"{settings.generation}_b"})
    await asyncio.to_thread(migrate, other)
    await conversation(settings, "c1", "maria", L.JOE, ["Hi!", "Hello", "About grandpa?"])
    await conversation(other, "c1", "zoe", None, ["New gen", "reply", "now"])
    app = create_app(settings)
    params = {"query": "grandpa", "before_seq": 2}
    async with running_api(settings, app) as url:
        assert [m["content"] for m in (await context(url, "c1", **params))["messages"]] == ["Hi!", "Hello"]
        assert app.state.conversation_owners[(L.A, "c1")] == ("maria", L.JOE)

        def switch():
            with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
                activate(conn, settings.kafka.topic_prefix, other.generation)

        await asyncio.to_thread(switch)
        for _ in range(1000):  # the generation is looked up once a second (api/generation.py)
            if (body := await context(url, "c1", **params))["messages"][0]["content"] != "Hi!":
                break
            await pooled_is_clean(app)  # within the generation cache's second: the old one, clean
        assert [m["content"] for m in body["messages"]] == ["New gen", "reply"]
        assert app.state.conversation_owners[(L.A, "c1")] == ("zoe", None)
        await pooled_is_clean(app)
        again = await context(url, "c1", **params)  # the guess now right, in the new generation
        assert again["messages"] == body["messages"]
        await pooled_is_clean(app)
