"""The batch replay's wave-wide reads and writes of the facts system (memory_agent/batch_replay/facts.py)
give what the stage's and the projector's one-at-a-time code gives, on the real PostgreSQL:

- the related facts of every range of a wave, read in one query, equal the stage's own query per
  range (owner, subject, validity, `before`, ranking, ties, limit);
- a wave's events projected with the fact-less chunks bulk-inserted leave the same rows and dead
  letters as the facts projector's `apply`.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from domain.facts import ids
from memory_agent.batch_replay.facts import FactsBatch, _BatchStage
from core.llm.port import ChatMessage
from runtime.db import connect, make_pool
from projections.chunk_reads import PostgresChunkReads
from projections.facts import FactsProjector
from schemas import facts_events as fe
from schemas.codec import new_event
from streams.facts.stage import ChunkInputs, ChunkStage
from tests.support.projected import consumer_records

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


def _vector(settings, hot: int, dimensions: int | None = None) -> list[float]:
    values = [0.0] * (dimensions or settings.embedding.dimensions)
    values[hot % len(values)] = 1.0
    return values


async def _facts(settings) -> None:
    rows = [  # fact_id, owner, subject, content, valid_from (days after T0), superseded, deleted
        ("f1", "ana", None, "Ana plays chess with Oscar in Lisbon", 0, False, False),
        ("f2", "ana", None, "Ana plays tennis in Lisbon", 1, False, False),
        ("f3", "ana", None, "Ana plays chess on Sundays", 2, False, False),
        ("f4", "ana", None, "Ana plays chess at the club", 2, False, False),  # same rank and time as f3
        ("f5", "ana", None, "Ana used to play chess in Porto", 0, True, False),  # superseded
        ("f6", "ana", None, "Ana hates chess", 0, False, True),  # deleted
        ("f7", "ana", None, "Ana moved to Lisbon for chess", 30, False, False),  # after the first chunk
        ("f8", "ana", "kid", "Her kid plays chess in Lisbon", 0, False, False),  # another subject
        ("f9", "bob", None, "Bob plays chess in Lisbon", 0, False, False),  # another owner
    ]
    async with await connect(settings) as conn:
        for i, (fact_id, owner, subject, content, day, superseded, deleted) in enumerate(rows):
            at = T0 + timedelta(days=day)
            await conn.execute(
                "INSERT INTO facts (fact_id, tenant_id, owner_user_id, subject_id, category, content, embedding,"
                " embedding_model, extracted_by, prompt_version, valid_from, valid_to, deleted_at, event_id,"
                " updated_at) VALUES (%s, 't', %s, %s, 'hobby', %s, %s::vector, 'm', 'llm', 'p', %s, %s, %s, %s,"
                " %s)",
                (fact_id, owner, subject, content, ids.vector_literal(_vector(settings, i)), at,
                 at if superseded else None, at if deleted else None, f"e-{fact_id}", at))
        await conn.commit()


def _inputs(owner: str, subject: str | None, text: str, day: int) -> ChunkInputs:
    at = T0 + timedelta(days=day)
    messages = [ChatMessage(0, "user", text, at), ChatMessage(1, "assistant", "Ok, thanks.", at)]
    return ChunkInputs(owner, subject, messages, ["e0", "e1"], at, at)


@pytest.mark.asyncio
async def test_the_related_facts_of_a_wave_in_one_query_equal_the_stages_query_per_range(settings):
    await _facts(settings)
    wave = {  # (tenant, conversation, start, end): inputs
        ("t", "c1", 0, 2): _inputs("ana", None, "I play chess with Oscar in Lisbon", 10),
        ("t", "c2", 0, 2): _inputs("ana", None, "Chess in Lisbon again, and tennis", 40),
        ("t", "c3", 0, 2): _inputs("ana", "kid", "My kid plays chess", 10),
        ("t", "c4", 0, 2): _inputs("bob", None, "I play chess", 10),
        ("t", "c5", 0, 2): _inputs("ana", None, "Painting with watercolours", 10),  # nothing shared
        ("t", "c6", 0, 2): _inputs("ana", None, "ok", 10),  # no query words at all
    }
    async with make_pool(settings, schema=settings.pg_schema) as pool:
        for limit in (2, 12):
            stage = _BatchStage(None, None, PostgresChunkReads(pool), related_facts=limit)
            stage._remember(SimpleNamespace(tenant_id="t", conversation_id="c2"),
                            [SimpleNamespace(fact_id="r1", content="Ana plays chess in Lisbon", category="hobby")])
            stage._ready = dict(wave)
            await stage._prefetch_related()
            assert set(stage._related_ready) == {("t", f"c{n}") for n in range(1, 6)}  # c6 has no query
            shown = {}
            for (tenant, conversation, _, _), inputs in wave.items():
                cause = SimpleNamespace(tenant_id=tenant, conversation_id=conversation)
                batch = await stage._related(cause, inputs)
                assert (tenant, conversation) not in stage._related_ready  # the wave's read was used
                assert batch == await ChunkStage._related(stage, cause, inputs), (limit, conversation)
                shown[conversation] = [f.fact_id for f in batch]
        assert shown["c1"][0] == "f1" and sorted(shown["c1"]) == ["f1", "f2", "f3", "f4"]  # most shared first
        assert "f7" in shown["c2"] and "r1" in shown["c2"] and "f7" not in shown["c1"]
        assert "f5" not in shown["c1"] and "f6" not in shown["c1"]
        assert shown["c3"] == ["f8"] and shown["c4"] == ["f9"] and shown["c5"] == [] and shown["c6"] == []


def _chunk(settings, conversation: str, start: int, facts: int, dimensions: int | None = None):
    at = T0 + timedelta(days=start)
    vector = ids.to_vector(_vector(settings, start, dimensions), "m")
    payload = fe.ChunkRecorded(
        chunk_id=ids.chunk_id("t", conversation, start, start + 2), start_seq=start, end_seq_exclusive=start + 2,
        owner_user_id="ana", summary=f"chunk {start} of {conversation}", embedding=vector,
        facts=[fe.RecordedFact(fact_id=f"{conversation}-{start}-{n}", category="hobby",
                               content=f"Ana plays game {start} number {n}",
                               embedding=ids.to_vector(_vector(settings, 100 + start * 10 + n), "m"))
               for n in range(facts)],
        gate=fe.GateVerdict(worth_remembering=True, method="off"), extractor="llm", model="m", prompt_version="p",
        source_event_ids=[f"e{start}", f"e{start + 1}"], observed_at=at, occurred_start=at, generation_time_ms=1)
    return new_event(fe.CHUNK_RECORDED, payload, tenant_id="t", conversation_id=conversation, user_id="ana",
                     seq=start + 1)


_ROWS = (
    "SELECT chunk_id, conversation_id, user_id, content, embedding::text, message_range_start, message_range_end,"
    " source_event_ids, event_id, occurred_start, occurred_end FROM conversation_chunks ORDER BY 1",
    "SELECT fact_id, content, source_chunk_id, embedding::text, valid_from FROM facts ORDER BY 1",
    "SELECT fact_id, change, event_id FROM fact_history ORDER BY 1, 2, 3",
)


@pytest.mark.asyncio
async def test_a_waves_events_projected_in_bulk_leave_the_projectors_rows(settings):
    envelopes = [
        _chunk(settings, "c1", 0, 0), _chunk(settings, "c2", 0, 2), _chunk(settings, "c3", 0, 0),
        _chunk(settings, "c4", 0, 0, dimensions=3),  # the column takes other vectors: a dead letter
        _chunk(settings, "c1", 2, 1),
    ]
    requested = new_event(fe.CHUNK_REQUESTED, fe.ChunkRequested(start_seq=2, end_seq_exclusive=4, prompt_version="p",
                                                                model="m"),
                          tenant_id="t", conversation_id="c1", user_id="ana", seq=3)
    envelopes.insert(1, requested)
    records, types = consumer_records(envelopes), [e.type for e in envelopes]
    batch = FactsBatch(settings, None, None, None, "changelog")
    results = []
    for apply in (lambda conn: FactsProjector(settings).apply(conn, records),
                  lambda conn: batch._project(conn, records, types),
                  lambda conn: batch._project(conn, records, types)):  # again: nothing new (ON CONFLICT)
        async with await connect(settings) as conn:
            async with conn.transaction():
                letters = await apply(conn)
                rows = [await (await conn.execute(sql)).fetchall() for sql in _ROWS]
            if len(results) == 0:
                await conn.execute("TRUNCATE conversation_chunks, facts, fact_history CASCADE")
                await conn.commit()
        results.append(([(letter.record.offset, letter.reason) for letter in letters], rows))
    one_by_one, bulk, again = results
    assert one_by_one[0] == [(4, "wrong_dimensions")]
    assert len(one_by_one[1][0]) == 4 and len(one_by_one[1][1]) == 3  # chunks of c1 (2), c2, c3; facts 2 + 1
    assert bulk == one_by_one
    assert again == one_by_one


@pytest.mark.asyncio
async def test_send_all_appends_in_order_and_returns_each_records_offset(settings):
    """Several producer batches and one record bigger than a batch: every record lands at the
    offset `send_all` returned for it, in order, with its key."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    from memory_agent.batch_replay.produce import send_all
    from runtime.kafka_topics import TopicSpec, ensure_topics

    topic = f"{settings.kafka.topic_prefix}.send-all"
    await ensure_topics(settings, [TopicSpec(topic, 2, {})])
    records = [(f"k{i % 7}".encode(), f"value {i} ".encode() * (1 + i % 50)) for i in range(3000)]
    records.insert(1500, (b"big", b"x" * 40_000))  # more than one batch of 16 KB
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, enable_idempotence=True,
                                acks="all", max_batch_size=16_384, max_request_size=1_048_576)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"before", key=b"k", partition=1)
        offsets = await send_all(producer, topic, 1, records)
    finally:
        await producer.stop()
    assert offsets == list(range(1, len(records) + 1))
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 1)
        consumer.assign([tp])
        consumer.seek(tp, 1)
        seen = []
        while len(seen) < len(records):
            batch = await consumer.getmany(tp, timeout_ms=2000)
            seen += [(r.offset, r.key, r.value) for r in batch.get(tp, [])]
    finally:
        await consumer.stop()
    assert seen == [(offset, key, value) for offset, (key, value) in zip(offsets, records)]
