"""The event backbone end to end on real Kafka and PostgreSQL: produce, project, dead-letter, read."""

from __future__ import annotations

import random

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaConsumer

from runtime.client import MemoryClient
from projections import messages as messages_projector
from runtime.dead_letter import decode_dead_letter
from schemas.codec import encode
from schemas.envelope import conversation_key
from tests.integration.conftest import running_api, running_projectors, scalar, wait_until

CONVERSATIONS = 50
PER_CONVERSATION = 20


def malformed_values(good: dict) -> list[tuple[str, bytes]]:
    """One of every kind of invalid input, with the reason the projector must give."""

    def variant(**changes) -> bytes:
        return orjson.dumps({**good, **changes})

    without_user = {k: v for k, v in good.items() if k != "user_id"}
    return [
        ("not_json", b"{this is not json"),
        ("bad_utf8", b'{"type": "message.appended", "x": "\xff\xfe"}'),
        ("not_an_object", b'"just a string"'),
        ("unknown_type", variant(type="message.exploded")),
        ("invalid_field", orjson.dumps(without_user)),
        ("invalid_field", variant(seq="seven")),
        ("unknown_schema_version", variant(schema_version=99)),
        ("content_too_long", variant(payload={"role": "user", "content": "x" * 40_000, "metadata": {}})),
    ]


async def read_dead_letters(settings, expected: int, timeout_s: float = 60.0) -> list[dict]:
    consumer = AIOKafkaConsumer(
        settings.kafka.dead_letter_topic,
        bootstrap_servers=settings.kafka.bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    letters: list[dict] = []
    try:
        async def enough() -> bool:
            batch = await consumer.getmany(timeout_ms=200)
            letters.extend(decode_dead_letter(r.value) for recs in batch.values() for r in recs)
            return len(letters) >= expected

        await wait_until(enough, timeout_s, f"{expected} dead letters")
        extra = await consumer.getmany(timeout_ms=500)  # nothing more must arrive
        letters.extend(decode_dead_letter(r.value) for recs in extra.values() for r in recs)
    finally:
        await consumer.stop()
    return letters


@pytest.mark.asyncio
@pytest.mark.parametrize("copy_from", [1, 10**9], ids=["copy", "arrays"])
async def test_valid_messages_land_once_and_bad_ones_are_dead_lettered(settings, monkeypatch, copy_from):
    # Both insert paths of the projector (COPY for big batches, array parameters for small).
    monkeypatch.setattr(messages_projector, "_COPY_FROM", copy_from)
    rng = random.Random(7)
    sent = {}
    bad: list[tuple[str, bytes]] = []
    conflicts = 0
    async with MemoryClient(settings) as client:
        envelopes = []
        for c in range(CONVERSATIONS):
            for seq in range(PER_CONVERSATION):
                envelopes.append(
                    client.message_event(
                        tenant_id="tenant-a", conversation_id=f"conv-{c}", user_id=f"user-{c % 7}",
                        seq=seq, role="user" if seq % 2 == 0 else "assistant", content=f"message {seq} of conv {c}",
                    )
                )
        for envelope in envelopes:
            sent[(envelope.conversation_id, envelope.seq)] = envelope.event_id
            await client.append(envelope)
            roll = rng.random()
            if roll < 0.05:  # the same event again (producer retry from an upstream service)
                await client.append(envelope)
            elif roll < 0.06:  # a different event claiming the same seq
                impostor = client.message_event(
                    tenant_id="tenant-a", conversation_id=envelope.conversation_id, user_id=envelope.user_id,
                    seq=envelope.seq, role="user", content="I am not the real message",
                )
                await client.append(impostor)
                bad.append(("seq_conflict", encode(impostor)))
                conflicts += 1
            if envelope.seq == 3 and envelope.conversation_id in ("conv-1", "conv-2"):
                good = orjson.loads(encode(envelope))
                for reason, value in malformed_values(good):
                    await client.send_raw(value, key=conversation_key("tenant-a", envelope.conversation_id))
                    bad.append((reason, value))
        await client.flush()
    assert conflicts > 0

    async with running_projectors(settings):
        await wait_until(
            lambda: _count(settings, "SELECT count(*) FROM messages", CONVERSATIONS * PER_CONVERSATION),
            90, "1000 projected messages",
        )
        letters = await read_dead_letters(settings, len(bad))

    rows = await _rows(settings, "SELECT conversation_id, seq, event_id FROM messages")
    assert len(rows) == CONVERSATIONS * PER_CONVERSATION
    assert {(c, s): e for c, s, e in rows} == sent
    # Each refused record exactly once, with its reason and its original bytes.
    assert sorted((letter["reason"], letter["original_bytes"]) for letter in letters) == sorted(bad)
    assert all(letter["source"]["topic"] == settings.kafka.conversation_topic for letter in letters)
    assert await scalar(settings, "SELECT sum(message_count) FROM conversations") == 1000
    assert await scalar(settings, "SELECT count(*) FROM conversations WHERE last_seq = 19") == CONVERSATIONS
    assert await scalar(settings, "SELECT sum(gap_count) FROM conversations") == 0
    assert await scalar(settings, "SELECT count(*) FROM projection_anomalies WHERE kind = 'duplicate'") > 0


@pytest.mark.asyncio
async def test_gaps_are_counted(settings):
    async with MemoryClient(settings) as client:
        for seq in (0, 1, 4, 5, 2):
            await client.append_message(
                tenant_id="tenant-a", conversation_id="gappy", user_id="u", seq=seq, role="user", content=f"m{seq}"
            )
    async with running_projectors(settings):
        await wait_until(lambda: _count(settings, "SELECT count(*) FROM messages", 5), 60, "5 messages")
    assert await scalar(settings, "SELECT gap_count FROM conversations WHERE conversation_id = 'gappy'") == 2
    assert await scalar(settings, "SELECT count(*) FROM projection_anomalies WHERE kind = 'gap'") == 1


@pytest.mark.asyncio
async def test_context_endpoint_and_tenant_isolation(settings):
    async with MemoryClient(settings) as client:
        for tenant, conversation in (("tenant-a", "shared-name"), ("tenant-b", "other")):
            for seq in range(6):
                await client.append_message(
                    tenant_id=tenant, conversation_id=conversation, user_id="u1", seq=seq,
                    role="user" if seq % 2 == 0 else "assistant", content=f"{tenant} says {seq}",
                )
    async with running_projectors(settings), running_api(settings) as base:
        # Projected first: min_seq waits only wait_ms (1 s), less than a loaded machine may need.
        await wait_until(lambda: _count(settings, "SELECT count(*) FROM messages", 12), 120, "12 messages")
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            a = {"X-API-Key": "key-a"}
            b = {"X-API-Key": "key-b"}
            response = await http.get("/v1/conversations/shared-name/context", headers=a, params={"min_seq": 5})
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["mode"] == "raw" and body["summary"] is None
            assert [m["seq"] for m in body["messages"]] == [0, 1, 2, 3, 4, 5]
            assert [m["content"] for m in body["messages"]][:2] == ["tenant-a says 0", "tenant-a says 1"]
            assert body["watermark"] == {
                "last_seq": 5, "summary_end_seq": None, "requested_min_seq": 5, "complete": True, "missing_seqs": [],
                "verbatim_from_seq": 0, "gap_omitted_from_seq": None, "gap_omitted_to_seq": None,
                "gap_omitted_count": 0,
            }

            current = await http.get("/v1/conversations/shared-name/context", headers=a, params={"before_seq": 4})
            assert [m["seq"] for m in current.json()["messages"]] == [0, 1, 2, 3]

            # Another tenant's conversation does not exist for this key: 404, not a leak.
            assert (await http.get("/v1/conversations/shared-name/context", headers=b)).status_code == 404
            assert (await http.get("/v1/conversations/other/context", headers=a)).status_code == 404
            assert (await http.get("/v1/conversations/other/messages", headers=a)).status_code == 404
            assert (await http.get("/v1/conversations/other/context", headers=b)).status_code == 200
            assert (await http.get("/v1/conversations/other/context")).status_code == 401
            assert (await http.get("/v1/conversations/other/context", headers={"X-API-Key": "nope"})).status_code == 401

            # Ingest over HTTP, then read it back through the context once projected.
            posted = await http.post(
                "/v1/conversations/shared-name/messages", headers=a,
                json={"user_id": "u1", "seq": 6, "role": "user", "content": "over http"},
            )
            assert posted.status_code == 202, posted.text
            after = await http.get(
                "/v1/conversations/shared-name/context", headers=a, params={"min_seq": 6, "wait_ms": 2000}
            )
            assert after.json()["messages"][-1] == {**after.json()["messages"][-1], "seq": 6, "content": "over http"}

            # The caller says it wrote seq 9, which never arrived: the API says exactly what is missing.
            behind = await http.get(
                "/v1/conversations/shared-name/context", headers=a, params={"min_seq": 9, "wait_ms": 100}
            )
            assert behind.json()["watermark"]["complete"] is False
            assert behind.json()["watermark"]["missing_seqs"] == [7, 8, 9]

            history = await http.get("/v1/conversations/shared-name/messages", headers=a, params={"limit": 3})
            assert [m["seq"] for m in history.json()["messages"]] == [0, 1, 2]
            assert history.json()["next_after_seq"] == 2

            for bad_body, reason in (
                ({"user_id": "u1", "seq": "x", "role": "user", "content": "c"}, "invalid_field"),
                ({"user_id": "u1", "seq": 7, "role": "robot", "content": "c"}, "invalid_field"),
                ({"user_id": "u1", "seq": 7, "role": "user", "content": "c" * 40_000}, "content_too_long"),
            ):
                rejected = await http.post("/v1/conversations/shared-name/messages", headers=a, json=bad_body)
                assert rejected.status_code == 422
                assert rejected.json()["detail"]["reason"] == reason

            assert (await http.get("/readyz")).json()["status"] == "ready"
            assert (await http.get("/openapi.json")).json()["paths"]["/v1/conversations/{conversation_id}/context"]


async def _count(settings, sql: str, expected: int) -> bool:
    return await scalar(settings, sql) == expected


async def _rows(settings, sql: str) -> list[tuple]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public"
    ) as conn:
        return await (await conn.execute(sql)).fetchall()
