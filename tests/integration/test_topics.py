"""Seed 004 through real Kafka, the faust worker, PostgreSQL, offline MiniLM and the HTTP API:
three subjects give three topics; the long one is compacted into a gzip archive (nothing lost),
and restored into the turn-start context when its subject comes back."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest

from runtime.client import MemoryClient
from domain.topics.fold import make_title
from tests.integration.conftest import SEALING, running_api, scalar, wait_until, sealed_variant, worker_process
from tests.support.projected import project_one_by_one, table_rows
from tests.support.topic_reader import topic_residue
from tests.support.fake_openai import FakeOpenAI

CONVERSATION_ID = "three-subjects"
# Topic matching at the defaults for the offline model (0.3 + 0.15 for the active topic,
# docs/topics.md); the unit test test_topic_agent_stages checks these subjects on the real model.
WORKER_ENV = {
    "MEMORY_TOPICS__MAX_MESSAGES_PER_TOPIC": "6",
    "MEMORY_TOPICS__RECENT_MESSAGE_KEEP": "2",
}
# (subject, user message, assistant reply), in conversation order: seq = 2 * index (+1 for the reply).
CONVERSATION = [
    ("cooking", "I'm cooking pasta carbonara tonight for four people. How much spaghetti and guanciale should I buy?",
     "For four people take about 400 g of spaghetti and 150 g of guanciale. You also need four egg yolks plus one "
     "whole egg, and about 80 g of grated pecorino romano."),
    ("cooking", "For the carbonara, do I mix the eggs and pecorino before they go into the hot pasta?",
     "Yes: whisk the yolks, the egg and the pecorino into a thick paste first. Take the pan off the heat, add the "
     "pasta and the crisp guanciale, then stir in the egg mixture with a splash of pasta water so it turns creamy "
     "instead of scrambling."),
    ("car", "My car makes a grinding noise from the front wheels when I brake. What could cause that?",
     "A grinding noise when braking usually means the brake pads are worn down to their metal backing plates, "
     "which then scrape the brake discs. It can also be a stone trapped between the disc and the dust shield. "
     "Have the front brakes inspected soon."),
    ("car", "The brake pedal of my car also feels soft and goes down further than before. Is that related to the "
     "brakes grinding?",
     "A soft brake pedal points to the hydraulic side of the brakes: low brake fluid, air in the brake lines or a "
     "leaking caliper. Worn pads lower the fluid level in the reservoir, so check the brake fluid level, but do not "
     "drive far until the brakes are checked."),
    ("car", "The mechanic says the front brakes of my car are worn out: the brake pads are down to the metal and the "
     "brake discs are scored. How much does fixing the brakes cost?",
     "For a typical family car, new front brake pads and discs cost roughly 250 to 450 euros fitted, depending on "
     "the model. Replacing the brake fluid at the same time adds about 60 to 90 euros, which is worth it if the "
     "pedal felt soft."),
    ("car", "Is it safe to drive my car to the garage with worn brakes that grind, or should the car be towed?",
     "If the garage is close and you drive slowly, leave extra distance and avoid motorways, driving there is "
     "usually acceptable. With metal-on-metal grinding and a soft pedal, though, braking distance is longer; "
     "towing is the safer choice if the garage is far away."),
    ("japan", "I'm planning a two-week trip to Japan in April. Is a Japan Rail Pass worth it for Tokyo, Kyoto and "
     "Osaka?",
     "For a simple Tokyo, Kyoto, Osaka route the Japan Rail Pass rarely pays off since the 2023 price increase: a "
     "one-way Tokyo to Kyoto shinkansen ticket costs about 14,000 yen. Buy individual tickets unless you add long "
     "trips such as Hiroshima or Kanazawa."),
    ("japan", "On my Japan trip, where should I stay in Kyoto to see the cherry blossoms in April?",
     "Stay near Higashiyama or Gion in Kyoto: the Philosopher's Path, Maruyama Park and the Kamo River banks are "
     "all within walking distance, and you can reach them early in the morning before the cherry blossom crowds "
     "arrive."),
    ("car", "Back to my car: the garage replaced the brake pads and discs, but the brakes squeak a little now. Is "
     "that normal?",
     "A light squeak from new brake pads and discs is common for the first few hundred kilometres while the pads "
     "bed in. If the brakes still squeak after a week of normal driving, or the squeal is loud, ask the garage to "
     "check the pads were fitted with anti-squeal paste."),
    ("car", "My car has new brake pads and discs now. Should I do anything special with the new brakes during the "
     "first days?",
     "Bed in the new brakes: avoid hard emergency stops for the first 200 km, and do a few moderate stops from "
     "60 km/h to let the pads transfer an even layer onto the discs. That also reduces squeaking."),
]
CAR_SEQS = [s for i, (subject, _, _) in enumerate(CONVERSATION) if subject == "car" for s in (2 * i, 2 * i + 1)]


def text_of(seq: int) -> str:
    return CONVERSATION[seq // 2][1 + seq % 2]


async def say_turns(client: MemoryClient, indexes: range) -> None:
    for i in indexes:
        for seq in (2 * i, 2 * i + 1):
            await client.append_message(tenant_id="tenant-a", conversation_id=CONVERSATION_ID, user_id="alice",
                                        seq=seq, role="user" if seq % 2 == 0 else "assistant", content=text_of(seq))


async def wait_for(settings, sql: str, expected, what: str, timeout: float = 60) -> None:
    async def reached() -> bool:
        return await scalar(settings, sql) == expected

    try:
        await wait_until(reached, timeout, what)
    except AssertionError:
        raise AssertionError(f"{what}: {sql} gave {await scalar(settings, sql)!r}, expected {expected!r}") from None


def topic_summaries(fake: FakeOpenAI) -> list:
    return [r for r in fake.chat_requests if r.user_content.startswith("Topic:")]


@pytest.mark.asyncio
@SEALING
async def test_three_subjects_three_topics_compaction_archive_and_restore(settings, sealed):
    settings = sealed_variant(settings, sealed)
    placed = "SELECT last_seq FROM topic_conversations WHERE conversation_id = 'three-subjects'"
    car_summary_upto = "SELECT summary_upto_seq FROM topics WHERE topic_id = 'three-subjects:topic-2'"
    with FakeOpenAI(latency_s=0.05) as fake:
        # The LLM itself answers every compaction (its prompts are checked below), not the result
        # cache these fixed texts would hit from an earlier run: test_topic_summary_cache.py covers it.
        env = fake.env() | WORKER_ENV | {"MEMORY_LLM__CACHE_ENABLED": "false"}
        async with worker_process(settings, extra_env=env) as worker, \
                running_api(settings) as base, MemoryClient(settings) as client, \
                httpx.AsyncClient(base_url=base, headers={"X-API-Key": "key-a"}, timeout=10) as http:
            # Cooking, then four car turns: the car topic passes 6 messages and is compacted.
            await say_turns(client, range(0, 6))
            await wait_for(settings, placed, 11, f"seqs 0-11 placed (log {worker.log_path})", timeout=90)
            await wait_for(settings, car_summary_upto, 8, "the car topic compacted up to seq 8")
            archive = await scalar(settings, "SELECT archive FROM topic_archives"
                                             " WHERE topic_id = 'three-subjects:topic-2'")
            assert bytes(archive[:2]) == b"\x1f\x8b"  # stored as gzip bytes
            assert [m["seq"] for m in json.loads(gzip.decompress(archive))] == [4, 5, 6, 7, 8]

            # Japan, then back to the car: the archived topic is active again and restored.
            await say_turns(client, range(6, 9))
            await wait_for(settings, placed, 17, "seqs 12-17 placed")
            topics = (await http.get(f"/v1/conversations/{CONVERSATION_ID}/topics")).json()
            assert [(t["topic_id"].split(":")[1], t["total_messages"]) for t in topics["topics"]] == [
                ("topic-1", 4), ("topic-2", 10), ("topic-3", 4)]
            assert topics["active_topic_id"] == f"{CONVERSATION_ID}:topic-2"
            car = topics["topics"][1]
            assert car["topic_title"] == make_title(CONVERSATION[2][1], 80)  # its first sentence
            assert (car["active_messages"], car["compressed_messages"], car["has_summary"]) == (5, 5, True)
            assert (car["access_count"], car["memory_type"], car["half_life_days"]) == (4, "short-term", 1.0)
            assert car["active"] and not car["evicted"] and 0 < car["priority"] <= car["importance_score"]

            context = (await http.get(f"/v1/conversations/{CONVERSATION_ID}/context")).json()["active_topic"]
            assert context["topic_id"] == f"{CONVERSATION_ID}:topic-2" and context["restored"] is True
            if sealed:  # the car topic's title and contents: sealed on every topic, fold state included
                car_words = CONVERSATION[2][1][:40]
                assert await topic_residue(settings, car_words, raw=True) == {}
                assert settings.kafka.memory_topic(settings.generation) in await topic_residue(settings, car_words)
            assert [m["seq"] for m in context["restored_messages"]] == [4, 5, 6, 7, 8]
            assert [m["content"] for m in context["restored_messages"]] == [text_of(s) for s in range(4, 9)]
            assert [m["seq"] for m in context["messages"]] == [9, 10, 11, 16, 17]
            assert context["summary"] and context["summary"] == car["summary"]
            first_summary = car["summary"]

            # One more car turn: a second, incremental compaction (it builds on the first summary).
            await say_turns(client, range(9, 10))
            await wait_for(settings, car_summary_upto, 17, "the car topic compacted again up to seq 17")
            history = (await http.get(f"/v1/conversations/{CONVERSATION_ID}/topics/{CONVERSATION_ID}:topic-2/history"))
            history = history.json()
            assert [m["seq"] for m in history["messages"]] == CAR_SEQS
            assert [m["content"] for m in history["messages"]] == [text_of(s) for s in CAR_SEQS]
            assert [m["archived"] for m in history["messages"]] == [True] * 10 + [False] * 2
            context = (await http.get(f"/v1/conversations/{CONVERSATION_ID}/context")).json()["active_topic"]
            assert context["restored"] is False and [m["seq"] for m in context["messages"]] == [18, 19]

            # Tenant-scoped: another tenant sees neither the topics nor a history.
            other = {"X-API-Key": "key-b"}
            assert (await http.get(f"/v1/conversations/{CONVERSATION_ID}/topics", headers=other)).status_code == 404
            hidden = f"/v1/conversations/{CONVERSATION_ID}/topics/{CONVERSATION_ID}:topic-2/history"
            assert (await http.get(hidden, headers=other)).status_code == 404

            # An API whose MEMORY_SYSTEMS leaves topics out serves no topic (and waits for no fold).
            without = settings.model_copy(update={"systems": ("window", "facts")})
            async with running_api(without) as plain, httpx.AsyncClient(
                    base_url=plain, headers={"X-API-Key": "key-a"}, timeout=10) as other_api:
                answer = await other_api.get(f"/v1/conversations/{CONVERSATION_ID}/context")
                assert answer.status_code == 200 and answer.json()["active_topic"] is None, answer.text

    first, second = topic_summaries(fake)[:2]
    assert "[4] user:" in first.user_content and "(none: this is the first summary)" in first.user_content
    assert first_summary in second.user_content and "[16] user:" in second.user_content
    assert "[4] user:" not in second.user_content.split("now moving to the archive:")[1]
    json_bytes, gzip_bytes = (await scalar(settings, "SELECT ARRAY[json_bytes, gzip_bytes] FROM topic_archives"
                                                     " WHERE topic_id = 'three-subjects:topic-2'"))
    print(f"\ncar topic archive: 10 messages, {json_bytes} B JSON -> {gzip_bytes} B gzip,"
          f" size reduction {1 - gzip_bytes / json_bytes:.1%}")
    assert gzip_bytes < json_bytes



# --- the projector alone: redelivery and a lost assignment --------------------------------------

def agent_event_stream(conversation_id: str) -> list:
    """The events the agent emits for a scripted chat (4 subjects, max 2 topics, compactions
    answered at once), as the memory topic would hold them."""
    from datetime import UTC, datetime

    from core.settings import Settings, TopicSettings
    from schemas import topic_events as te
    from schemas.codec import decode, encode, new_event
    from schemas.events import MessageAppended
    from schemas.registry import MESSAGE_APPENDED
    from streams.topics_memory import codec
    from streams.topics_memory.agent import AgentConfig, handle

    topics = TopicSettings(max_topics=2, max_messages_per_topic=4, recent_message_keep=1)
    cfg = AgentConfig.from_settings(Settings(topics=topics), model="m", prompt_version="p-v1")
    state, log, t0 = codec.loads(None, conversation_id), [], 1_750_000_000.0

    def feed(type_, payload, seq):
        nonlocal state
        cause = new_event(type_, payload, tenant_id="tenant-a", conversation_id=conversation_id, user_id="alice",
                          seq=seq, occurred_at=datetime.fromtimestamp(t0 + 60 * (seq or 0), UTC))
        state, emitted = handle(cfg, state, decode(encode(cause)), t0)
        for envelope in emitted:
            log.append(envelope)
            p = decode(encode(envelope)).payload
            if envelope.type == te.TOPIC_EMBEDDING_REQUESTED:
                subject = int(p.content.split()[1])
                vector = [1.0 if k == subject else 0.0 for k in range(4)]
                feed(te.TOPIC_MESSAGE_EMBEDDED, te.TopicMessageEmbedded(seq=p.seq, embedding=vector, model="m"), p.seq)
            elif envelope.type == te.TOPIC_COMPACTION_REQUESTED:
                done = te.TopicCompacted(topic_id=p.topic_id, upto_seq=p.upto_seq, archived_seqs=p.seqs,
                                         summary=f"summary up to {p.upto_seq}", prompt_version="p-v1", model="m",
                                         generation_time_ms=1)
                log.append(new_event(te.TOPIC_COMPACTED, done, tenant_id="tenant-a", conversation_id=conversation_id,
                                     user_id="alice", seq=envelope.seq))
                feed(te.TOPIC_COMPACTED, done, envelope.seq)

    seq = 0
    # Subject 0 is compacted, restored, compacted again (ending the restore) and restored again;
    # subject 1 is evicted when subject 2 makes a third topic.
    for subject in (0, 0, 0, 1, 0, 0, 2, 0):
        for role in ("user", "assistant"):
            feed(MESSAGE_APPENDED, MessageAppended(role=role, content=f"subject {subject} {role} {seq}"), seq)
            seq += 1
    # Seq 15 delivered again (a restart): the fold re-sends its assignment, without the text.
    feed(MESSAGE_APPENDED, MessageAppended(role="assistant", content="subject 0 assistant 15"), 15)
    return log


async def table_snapshot(settings) -> dict:
    import psycopg

    tables = {
        "topics": "SELECT topic_id, title, summary, summary_upto_seq, access_count, message_count, active,"
                  " restored_at_seq, evicted_reason, compactions FROM topics ORDER BY topic_id",
        "messages": "SELECT topic_id, seq, content FROM topic_messages ORDER BY seq",
        "archives": "SELECT topic_id, archive, message_count, first_seq, last_seq FROM topic_archives ORDER BY 1",
        "conversation": "SELECT active_topic_id, activated_seq, last_seq FROM topic_conversations",
    }
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public"
    ) as conn:
        return {name: [tuple(r) for r in await (await conn.execute(sql)).fetchall()] for name, sql in tables.items()}


@pytest.mark.asyncio
async def test_projector_redelivery_changes_nothing_and_a_lost_assignment_is_archived_from_the_log(settings):
    import psycopg
    from aiokafka.structs import ConsumerRecord

    from projections.topics import TopicsProjector
    from schemas import topic_events as te
    from schemas.codec import encode

    log = agent_event_stream("replayed")
    # Seq 1 was placed, but its assignment event was lost (crash between state and send):
    # the projector takes it from the projected log when it is archived.
    # Seq 15's first assignment was lost too; only its re-sent copy (no text) arrives.
    lost = [next(e for e in log if e.type == te.TOPIC_MESSAGE_ASSIGNED and e.seq == seq) for seq in (1, 15)]
    assert log[-1].type == te.TOPIC_MESSAGE_ASSIGNED and log[-1].seq == 15 and log[-1] is not lost[1]
    records = [ConsumerRecord("memory", 0, offset, 0, 0, e.key, encode(e), None, 0, 0, [])
               for offset, e in enumerate(e for e in log if e not in lost)]
    projector = TopicsProjector(settings)
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public", autocommit=True
    ) as conn:
        for seq in (1, 15):
            await conn.execute(
                "INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, role, content, occurred_at,"
                " source_partition, source_offset) VALUES ('tenant-a', 'replayed', %s, %s, 'alice', 'assistant',"
                " %s, now(), 0, 0)", (seq, f"e{seq}", f"subject 0 assistant {seq}"))
        async with conn.transaction():
            assert await projector.apply(conn, records) == []
        first = await table_snapshot(settings)
        async with conn.transaction():
            await projector.apply(conn, records)  # redelivered batch
            await projector.apply(conn, records[len(records) // 2:])  # and a partial one
    assert await table_snapshot(settings) == first

    assert first["topics"] == [
        # topic_id, title, summary, summary_upto_seq, access_count, message_count, active,
        # restored_at_seq, evicted_reason, compactions
        ("replayed:topic-1", "subject 0 user 0", "summary up to 9", 9, 5, 12, True, 14, None, 2),
        ("replayed:topic-2", "subject 1 user 6", None, -1, 0, 2, False, None, "capacity", 0),
        ("replayed:topic-3", "subject 2 user 12", None, -1, 0, 2, False, None, None, 0),
    ]
    (archive_topic, archive, count, first_seq, last_seq), = first["archives"]
    assert archive_topic == "replayed:topic-1" and bytes(archive[:2]) == b"\x1f\x8b"
    assert [m["seq"] for m in json.loads(gzip.decompress(archive))] == [0, 1, 2, 3, 4, 5, 8, 9]
    assert (count, first_seq, last_seq) == (8, 0, 9)
    assert first["messages"][-1] == ("replayed:topic-1", 15, "subject 0 assistant 15")  # from the log
    assert [(t, s) for t, s, _ in first["messages"]] == [
        ("replayed:topic-2", 6), ("replayed:topic-2", 7), ("replayed:topic-1", 10), ("replayed:topic-1", 11),
        ("replayed:topic-3", 12), ("replayed:topic-3", 13), ("replayed:topic-1", 14), ("replayed:topic-1", 15)]
    assert first["conversation"] == [("replayed:topic-1", 14, 15)]


_ROW_CLOCKS = {"updated_at", "projected_at", "projected_pos"}  # when a row was written, not what it says


async def _topic_rows(conn) -> dict:
    return await table_rows(conn, ("topics", "topic_messages", "topic_archives", "topic_unassigned",
                                   "topic_conversations", "topic_assignments", "topic_activations",
                                   "topic_compactions"), _ROW_CLOCKS)


@pytest.mark.asyncio
async def test_the_projectors_rounds_leave_the_rows_of_one_statement_per_event(settings):
    """The topic and topic-lineage projectors apply a batch in rounds (a conversation's run of
    assignments in a few statements for every conversation at once; the round's compactions read
    together): the rows must be those the per-event statements leave, applied in log order, for
    conversations interleaved in the batch, with a lost assignment and a re-sent one, and again
    after a redelivery."""
    import psycopg
    from aiokafka.structs import ConsumerRecord

    from projections import lineage, topics
    from schemas import topic_events as te
    from schemas.codec import decode, encode

    streams = [agent_event_stream(name) for name in ("first", "second", "third")]
    lost = next(e for e in streams[1] if e.type == te.TOPIC_MESSAGE_ASSIGNED and e.seq == 1)
    streams[1].remove(lost)  # archived from the messages table
    log = [e for i in range(max(map(len, streams))) for s in streams if i < len(s) for e in [s[i]]]
    events = [decode(encode(e)) for e in log]
    records = [ConsumerRecord("memory", 0, offset, 0, 0, e.key, encode(e), None, 0, 0, [])
               for offset, e in enumerate(log)]
    tables = "topic_messages, topic_archives, topic_unassigned, topic_conversations, topics, topic_assignments," \
             " topic_activations, topic_compactions"
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public", autocommit=True
    ) as conn:
        for conversation in ("first", "second", "third"):
            for seq in (1, 15):
                await conn.execute(
                    "INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, role, content,"
                    " occurred_at, source_partition, source_offset) VALUES ('tenant-a', %s, %s, %s, 'alice',"
                    " 'assistant', %s, now(), 0, 0)",
                    (conversation, seq, f"{conversation}-{seq}", f"subject 0 assistant {seq}"))
        await project_one_by_one(conn, events)  # the reference: each event by its own statements
        one_by_one = await _topic_rows(conn)
        await conn.execute(f"TRUNCATE {tables}")
        async with conn.transaction():
            assert await topics.TopicsProjector(settings).apply(conn, records) == []
            assert await lineage.TopicLineageProjector(settings).apply(conn, records) == []
        in_rounds = await _topic_rows(conn)
        async with conn.transaction():  # redelivered, whole and in part
            await topics.TopicsProjector(settings).apply(conn, records)
            await topics.TopicsProjector(settings).apply(conn, records[len(records) // 3:])
            await lineage.TopicLineageProjector(settings).apply(conn, records)
        again = await _topic_rows(conn)
    assert len(topics.rounds([e for e in events if e.type in topics.PROJECTED])) < len(events) / 3
    assert in_rounds["topic_archives"] and in_rounds["topic_messages"] and in_rounds["topic_assignments"]
    for table, rows in one_by_one.items():
        assert in_rounds[table] == rows, table
        assert again[table] == rows, table
