"""The facts projector's `apply` (pipeline mode: a new fact, its history and its link in one
statement whose answer nothing awaits; an owner's decisions looked for once a fact) leaves the
rows and dead letters of the same events applied one by one, each in a transaction of its own
with every answer awaited, on the real PostgreSQL: inserts, an extractor's duplicate (merge) and
contradiction (supersede + link), another owner, an owner's decision applied to a re-extracted
copy, a memory stored by hand and shared, and an event the database refuses (a check constraint
this test adds) in the middle of the batch; redelivered, nothing changes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from domain.facts import ids
from projections.facts import FactsProjector
from runtime.db import connect
from schemas import facts_events as fe
from schemas.codec import decode, new_event
from tests.support.projected import consumer_records, table_rows

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


def _vector(settings, *hot: int) -> fe.Vector:
    values = [0.0] * settings.embedding.dimensions
    for h in hot:
        values[h % len(values)] = 1.0
    return ids.to_vector(values, "m")


def _fact(settings, fact_id: str, content: str, *hot: int, **extra) -> fe.RecordedFact:
    return fe.RecordedFact(fact_id=fact_id, category="hobby", content=content, embedding=_vector(settings, *hot),
                           **extra)


def _chunk(settings, owner: str, conversation: str, start: int, facts: list[fe.RecordedFact], day: int):
    at = T0 + timedelta(days=day)
    payload = fe.ChunkRecorded(
        chunk_id=ids.chunk_id("t", conversation, start, start + 2), start_seq=start, end_seq_exclusive=start + 2,
        owner_user_id=owner, subject_id="kid", summary=f"chunk {start} of {conversation}",
        embedding=_vector(settings, 300 + start), facts=facts,
        gate=fe.GateVerdict(worth_remembering=True, method="off"), extractor="llm", model="m", prompt_version="p",
        source_event_ids=[f"{conversation}-e{start}", f"{conversation}-e{start + 1}"], observed_at=at,
        occurred_start=at, generation_time_ms=1)
    return new_event(fe.CHUNK_RECORDED, payload, tenant_id="t", conversation_id=conversation, user_id=owner,
                     seq=start + 1)


def _log(settings) -> list:
    s = settings
    deleted = fe.FactDeleted(fact_id="old-copy", owner_user_id="ana", subject_id="kid",
                             content_snapshot="The kid hates broccoli", snapshot_embedding=_vector(s, 40))
    stored = fe.MemoryStored(fact_id="stored-1", owner_user_id="ana", subject_id="kid", category="hobby",
                             content="The kid swims on Saturdays", visibility="shared", embedding=_vector(s, 50))
    return [
        _chunk(s, "ana", "c1", 0, [_fact(s, "a1", "The kid plays chess", 1), _fact(s, "a2", "The kid likes tea", 2),
                                   _fact(s, "a3", "The kid reads comics", 3, 4)], day=0),
        _chunk(s, "bob", "c2", 0, [_fact(s, "b1", "The kid plays chess well", 1)], day=0),
        # A decision on a fact of an earlier extraction: a re-extracted copy close to its snapshot gets it.
        new_event(fe.FACT_DELETED, deleted, tenant_id="t", conversation_id="c1", user_id="ana", seq=90),
        _chunk(s, "ana", "c1", 2, [
            _fact(s, "a4", "The kid plays chess a lot", 1, relation="duplicate", target_fact_id="a1"),  # merge
            _fact(s, "a5", "The kid likes coffee", 2, relation="contradicts", target_fact_id="a2"),  # supersede
            _fact(s, "a6", "The kid reads comics at night", 3, relation="elaborates", target_fact_id="a3"),  # link
            _fact(s, "a7", "The kid hates broccoli", 40)], day=1),  # the deleted snapshot's copy
        _chunk(s, "ana", "c1", 4, [_fact(s, "a8", "The kid poison", 60)], day=2),  # refused by the database
        new_event(fe.MEMORY_STORED, stored, tenant_id="t", conversation_id="c1", user_id="ana", seq=None),
        _chunk(s, "bob", "c2", 2, [_fact(s, "b2", "The kid swims", 50), _fact(s, "b3", "The kid paints", 70)], day=3),
        _chunk(s, "ana", "c1", 6, [_fact(s, "a9", "The kid paints", 70)], day=4),
    ]


_CLOCKS = {"id", "pos", "created_pos", "valid_to_pos", "deleted_pos", "created_at", "updated_at"}


async def _rows(conn) -> dict[str, list[str]]:
    return await table_rows(conn, ("conversation_chunks", "facts", "fact_history", "fact_links", "fact_decisions"),
                            _CLOCKS)


@pytest.mark.asyncio
async def test_the_pipelined_batch_leaves_the_rows_of_one_event_at_a_time(settings):
    envelopes = _log(settings)
    records = consumer_records(envelopes)
    projector = FactsProjector(settings)
    tables = "conversation_chunks, facts, fact_history, fact_links, fact_decisions"
    async with await connect(settings) as conn:
        await conn.execute("ALTER TABLE facts ADD CONSTRAINT test_no_poison CHECK (content NOT LIKE '%poison%')")
        await conn.commit()
        one_by_one = []  # the reference: each event its own transaction, no pipeline
        for record in records:
            async with conn.transaction():
                letter = await projector.apply_event(conn, record, decode(record.value, key=record.key))
            if letter is not None:
                one_by_one.append((letter.record.offset, letter.reason))
        reference = await _rows(conn)
        for record in records:  # redelivered (a memory stored again merges into itself: history grows)
            async with conn.transaction():
                await projector.apply_event(conn, record, decode(record.value, key=record.key))
        reference_again = await _rows(conn)
        await conn.execute(f"TRUNCATE {tables} CASCADE")
        await conn.commit()
        async with conn.transaction():
            letters = await projector.apply(conn, records)
        batch = await _rows(conn)
        facts = [tuple(r) for r in await (await conn.execute(
            "SELECT fact_id, content, valid_to IS NOT NULL, deleted_at IS NOT NULL, visibility FROM facts"
            " ORDER BY 1")).fetchall()]
        links = [tuple(r) for r in await (await conn.execute(
            "SELECT from_fact_id, to_fact_id, relationship FROM fact_links")).fetchall()]
        async with conn.transaction():
            again = await projector.apply(conn, records)  # redelivered: nothing new
        redelivered = await _rows(conn)
    assert one_by_one == [(4, "apply_failed")]
    assert [(letter.record.offset, letter.reason) for letter in letters] == one_by_one
    assert [(letter.record.offset, letter.reason) for letter in again] == one_by_one
    # What the log did, so that the comparison compares something: every path of `_fact` ran.
    assert facts == [  # fact_id, content, superseded, deleted, visibility
        ("a1", "The kid plays chess a lot", False, False, "private"),  # a4 merged into it, reworded
        ("a2", "The kid likes tea", True, False, "private"),  # superseded by a5
        ("a3", "The kid reads comics", False, False, "private"),
        ("a5", "The kid likes coffee", False, False, "private"),
        ("a6", "The kid reads comics at night", False, False, "private"),
        ("a7", "The kid hates broccoli", False, True, "private"),  # the owner's earlier decision
        ("a9", "The kid paints", False, False, "private"),  # a8's chunk refused whole
        ("b1", "The kid plays chess well", False, False, "private"),
        ("b2", "The kid swims", False, False, "private"),
        ("b3", "The kid paints", False, False, "private"),
        ("stored-1", "The kid swims on Saturdays", False, False, "shared"),
    ]
    assert sorted(r[:3] for r in links) == [("a5", "a2", "supersedes"), ("a6", "a3", "elaborates")]
    assert len(batch["conversation_chunks"]) == 5 and len(batch["fact_history"]) == 15
    for table, rows in reference.items():
        assert batch[table] == rows, table
    for table, rows in reference_again.items():
        assert redelivered[table] == rows, table
