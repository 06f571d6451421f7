"""The batch replay's topic rows (projections/topic_rows.py: computed in memory, one COPY per
table) against the topics and topic-lineage projectors' per-event statements, on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.integration.test_topics import _topic_rows, agent_event_stream
from tests.support.projected import project_one_by_one

_TABLES = ("topic_messages, topic_archives, topic_unassigned, topic_conversations, topics, topic_assignments,"
           " topic_activations, topic_compactions")


def _recorded_log() -> list:
    """Three conversations' agent events interleaved (compactions, restores, an eviction, activations,
    a re-sent assignment without its text), with what a log also holds: a lost assignment (archived
    from `messages`), a reply left unassigned then placed late, a failed compaction and its retry,
    an older activation after a newer one, and redelivered events."""
    from schemas import topic_events as te
    from schemas.codec import new_event

    streams = [agent_event_stream(name) for name in ("first", "second", "third")]
    lost = next(e for e in streams[1] if e.type == te.TOPIC_MESSAGE_ASSIGNED and e.seq == 1)
    streams[1].remove(lost)
    third = streams[2]
    late = next(e for e in third if e.type == te.TOPIC_MESSAGE_ASSIGNED and e.seq == 13)
    common = dict(tenant_id="tenant-a", conversation_id="third", user_id="alice")
    unassigned = new_event(te.TOPIC_MESSAGE_UNASSIGNED, te.TopicMessageUnassigned(seq=13, reason="no-turn"),
                           **common, seq=13)
    placed_late = late.model_copy(update={"payload": late.payload | {"content_from_log": True, "content": "",
                                                                     "similarity": None}})
    third.insert(third.index(late), unassigned)
    third[third.index(late)] = placed_late
    request = next(e for e in third if e.type == te.TOPIC_COMPACTION_REQUESTED)
    p = request.payload
    failed = new_event(te.TOPIC_COMPACTION_FAILED, te.TopicCompactionFailed(
        topic_id=p["topic_id"], upto_seq=p["upto_seq"], attempt=p["attempt"], error="RateLimited: later",
        retryable=True), **common, seq=request.seq)
    third.insert(third.index(request) + 1, failed)
    third.append(new_event(te.TOPIC_MESSAGE_UNASSIGNED, te.TopicMessageUnassigned(seq=17, reason="no-turn"),
                           **common, seq=17))  # never placed: the row stays
    first = streams[0]
    compacted = next(e for e in first if e.type == te.TOPIC_COMPACTED)  # answered late: after a switch
    switch = next(e for e in first[first.index(compacted):] if e.type == te.TOPIC_ACTIVATED
                  and e.payload["topic_id"] != compacted.payload["topic_id"])
    first.remove(compacted)
    first.insert(first.index(switch) + 1, compacted)
    restored = [e for e in first if e.type == te.TOPIC_ARCHIVE_RESTORE_REQUESTED][-1]
    on_first = dict(tenant_id="tenant-a", conversation_id="first", user_id="alice")
    topic = restored.payload["topic_id"]
    first += [  # another topic activated ends the restore; a restore asked before that switch is refused
        new_event(te.TOPIC_ACTIVATED, te.TopicActivated(topic_id="first:topic-3", seq=20), **on_first, seq=20),
        new_event(te.TOPIC_ARCHIVE_RESTORE_REQUESTED, te.TopicArchiveRestoreRequested(
            topic_id=topic, seq=19, archived_count=1, archived_upto_seq=9), **on_first, seq=19),
        new_event(te.TOPIC_ARCHIVE_RESTORE_REQUESTED, te.TopicArchiveRestoreRequested(
            topic_id="first:topic-2", seq=21, archived_count=1, archived_upto_seq=9), **on_first, seq=21),
        # a compaction asked at 15 answered after the switch at 20: the restore stays cleared up to 20
        new_event(te.TOPIC_COMPACTED, te.TopicCompacted(
            topic_id=topic, upto_seq=11, archived_seqs=[10, 11], summary="summary up to 11", prompt_version="p-v1",
            model="m", generation_time_ms=1), **on_first, seq=15)]
    activations = [e for e in streams[0] if e.type == te.TOPIC_ACTIVATED]
    streams[0].append(activations[0])  # redelivered: older than the newest activation
    streams[0].append(new_event(te.TOPIC_ACTIVATED, te.TopicActivated(
        topic_id=activations[0].payload["topic_id"], seq=activations[0].payload["seq"]),
        tenant_id="tenant-a", conversation_id="first", user_id="alice", seq=activations[0].seq))
    log = [e for i in range(max(map(len, streams))) for s in streams if i < len(s) for e in [s[i]]]
    return log + log[len(log) // 2:]  # a redelivered tail




async def _seed_messages(conn) -> None:
    """The messages the recorded log's assignments and restores read (their text, "(the log)")."""
    for conversation in ("first", "second", "third"):
        for seq in (1, 13, 15):
            await conn.execute(
                "INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, role, content,"
                " occurred_at, source_partition, source_offset) VALUES ('tenant-a', %s, %s, %s, 'alice',"
                " 'assistant', %s, %s, 0, 0)",
                (conversation, seq, f"{conversation}-{seq}", f"subject 0 assistant {seq} (the log)",
                 datetime.fromtimestamp(1_750_000_000 + 60 * seq + 0.123456, UTC)))


@pytest.mark.asyncio
async def test_the_batchs_topic_rows_are_the_projectors_rows(settings):
    """Every topic table, every column but the clocks: what `topic_rows` copies equals what the
    projectors' statements leave applying the same events one by one in log order; and a second
    copy (a resumed batch redoing the partition) replaces the first, leaving the same rows."""
    import psycopg

    from projections import topic_rows
    from schemas import topic_events as te
    from schemas.codec import decode, encode

    log = _recorded_log()
    events = [decode(encode(e)) for e in log]
    kinds = {e.type for e in events}
    assert {te.TOPIC_COMPACTED, te.TOPIC_COMPACTION_FAILED, te.TOPIC_EVICTED, te.TOPIC_ACTIVATED,
            te.TOPIC_ARCHIVE_RESTORE_REQUESTED, te.TOPIC_MESSAGE_UNASSIGNED, te.TOPIC_CREATED} <= kinds
    conversations = [("tenant-a", c) for c in ("first", "second", "third")]
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public", autocommit=True
    ) as conn:
        await _seed_messages(conn)
        await project_one_by_one(conn, events)  # the reference: each event by its own statements
        one_by_one = await _topic_rows(conn)
        await conn.execute(f"TRUNCATE {_TABLES}")
        async with conn.transaction():
            rows = await topic_rows.rows_of(conn, events)
            await topic_rows.copy(conn, rows, conversations)
        copied = await _topic_rows(conn)
        async with conn.transaction():
            await topic_rows.copy(conn, await topic_rows.rows_of(conn, events), conversations)
        again = await _topic_rows(conn)
    assert one_by_one["topic_archives"] and one_by_one["topic_messages"]
    assert [row for row in one_by_one["topic_unassigned"] if "'seq': 13" in row] == []  # placed late
    assert len(one_by_one["topic_unassigned"]) == 1
    assert any("(the log)" in row for row in one_by_one["topic_messages"])  # a re-sent assignment's text
    assert any("RateLimited" in row for row in one_by_one["topics"])  # a failed compaction's error
    for table, expected in one_by_one.items():
        assert copied[table] == expected, table
        assert again[table] == expected, table


@pytest.mark.asyncio
async def test_a_copy_the_database_refuses_falls_back_to_the_projectors(settings, monkeypatch):
    """The batch's publishing (`TopicsBatch._publish`) when a `COPY` is refused for a row's content:
    rolled back, and the partition projected by the projectors' own per-event code, to the same rows
    and both projectors' positions at the end of what was sent."""
    import psycopg
    from aiokafka import AIOKafkaProducer, TopicPartition

    from memory_agent.batch_replay.topics import TopicsBatch, _Conversation
    from projections import topic_rows
    from schemas.codec import decode, encode

    log = _recorded_log()
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public", autocommit=True
    ) as conn:
        await _seed_messages(conn)
        await project_one_by_one(conn, [decode(encode(e)) for e in log])  # the reference
        reference = await _topic_rows(conn)
        await conn.execute(f"TRUNCATE {_TABLES}")

    async def refused(conn, rows, conversations):
        await conn.execute("INSERT INTO topic_unassigned (tenant_id, conversation_id, seq, reason, event_id)"
                           " VALUES ('tenant-a', 'first', 99, 'x', 'e')")  # rolled back with the rest
        raise psycopg.errors.CheckViolation("a row the database refuses")

    monkeypatch.setattr(topic_rows, "copy", refused)
    by_conversation: dict[str, _Conversation] = {}
    for envelope in log:  # each conversation's events in order, as the fold left them
        by_conversation.setdefault(envelope.conversation_id, _Conversation(
            envelope.key, envelope.tenant_id, envelope.conversation_id)).out.append(envelope)
    derived = TopicPartition(settings.kafka.memory_topic(settings.generation), 0)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers)
    await producer.start()
    try:
        batch = TopicsBatch.__new__(TopicsBatch)  # only what publishing uses
        batch.settings, batch.producer, batch.derived, batch.seconds, batch.stats = \
            settings, producer, derived, {}, {}
        await batch._publish(list(by_conversation.values()))  # noqa: SLF001
    finally:
        await producer.stop()
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public", autocommit=True
    ) as conn:
        projected = await _topic_rows(conn)
        positions = await (await conn.execute(
            "SELECT projector, next_offset FROM projector_offsets WHERE topic = %s AND partition = 0"
            " ORDER BY 1", (derived.topic,))).fetchall()
    assert "publish.topics" in batch.seconds and "rows" not in batch.stats  # the fallback ran
    for table, expected in reference.items():
        assert projected[table] == expected, table
    assert positions == [("lineage-topics", len(log)), ("topics", len(log))]
