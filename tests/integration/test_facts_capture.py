"""Chunks and facts through real Kafka, the faust worker, an LLM server and PostgreSQL (seeds 001, 003)."""

from __future__ import annotations

import json
import uuid

import httpx
import orjson
import psycopg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from core.embeddings.local_onnx import model_name
from core.settings import EmbeddingSettings
from runtime.client import MemoryClient
from schemas import facts_events as fe
from tests.integration.conftest import SEALING, running_api, scalar, wait_until, sealed_variant, worker_process
from tests.support.topic_reader import topic_residue
from tests.support.fake_openai import FakeOpenAI, RecordedRequest

SMALL_CHUNKS = {  # a chunk of the 4 oldest messages once more than 6 are unsummarized
    "MEMORY_FACTS__SUMMARIZATION_THRESHOLD": "6",
    "MEMORY_FACTS__BATCH_SIZE": "4",
    "MEMORY_FACTS__FAILURE_BACKOFF_S": "1",
    # The LLM result cache is shared by every deployment on the database: off, so the
    # scripted model really answers (and counts) every call.
    "MEMORY_LLM__CACHE_ENABLED": "false",
}
SESSIONS = {
    "s1": ["I live in Lisbon with my family.", "Lovely city.", "My daughter Ana plays the piano.", "Wonderful."],
    "s2": ["Still living in Lisbon, as you know.", "Noted.", "The weather was great today.", "Good to hear."],
    "s3": ["We moved to Porto last month.", "Big change!", "Yes, new flat and all.", "Exciting."],
    "s4": ["hi", "Hello!", "ok", "Anything else?"],
}
LLM_FACTS = {
    "s1": [{"category": "other", "content": "The user lives in Lisbon."},
           {"category": "relationship", "content": "The user's daughter Ana plays the piano.", "importance": 4}],
    "s2": [{"category": "other", "content": "The user lives in Lisbon.", "importance": 5, "tags": ["home"]}],
    "s3": [{"category": "other", "content": "The user lives in Porto."}],
}
TAIL = ["Tell me more.", "Sure.", "Bye for now."]  # seqs 4-6: the 7th message triggers chunk 0-3


def session_of(request: RecordedRequest) -> str:
    for name, lines in SESSIONS.items():  # relative dates arrive resolved: "last month (May 2026)"
        if lines[0].split(" last ")[0] in request.user_content:
            return name
    raise AssertionError(f"unknown chunk: {request.user_content[:200]}")


class ScriptedModel:
    """The gate says yes unless it is chatter; s1's first extraction answer is malformed."""

    def __init__(self) -> None:
        self.extractions: list[str] = []
        self.gates: list[str] = []

    def __call__(self, request: RecordedRequest) -> dict:
        if "worth_remembering" not in request.user_content and "facts" not in request.user_content:
            return {}
        name = session_of(request)
        if request.model == "fake-gate":
            self.gates.append(name)
            return {"worth_remembering": name != "s4", "reason": "scripted"}
        self.extractions.append(name)
        if name == "s1" and self.extractions.count("s1") == 1:
            return {"summary": "", "facts": "not a list"}  # malformed: nothing may be stored
        return {"summary": f"Session {name}: {SESSIONS[name][0]}", "facts": LLM_FACTS.get(name, [])}


async def say_session(client: MemoryClient, conversation: str, user: str = "alice", subject: str = "grandpa",
                      lines: list[str] | None = None) -> None:
    for seq, text in enumerate((lines or SESSIONS[conversation]) + TAIL):
        await client.append_message(tenant_id="tenant-a", conversation_id=conversation, user_id=user,
                                    subject_id=subject, seq=seq, role="user" if seq % 2 == 0 else "assistant",
                                    content=text)


async def rows(settings, sql: str, params=()) -> list[tuple]:
    async with await psycopg.AsyncConnection.connect(
            settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public") as conn:
        return [tuple(r) for r in await (await conn.execute(sql, params)).fetchall()]


async def wait_for_chunks(settings, count: int, log_path: str) -> None:
    async def enough() -> bool:
        return await scalar(settings, "SELECT count(*) FROM conversation_chunks") >= count
    try:
        await wait_until(enough, 90, f"{count} chunks")
    except AssertionError:
        raise AssertionError(f"{count} chunks not recorded; worker log {log_path}:\n"
                             + open(log_path).read()[-4000:]) from None


async def facts_by_content(settings) -> dict[str, tuple]:
    found = await rows(settings, "SELECT content, fact_id, importance, tags, valid_to IS NOT NULL,"
                                 " source_conversation_id, array_length(source_event_ids, 1), visibility, owner_user_id"
                                 " FROM facts")
    return {r[0]: r[1:] for r in found}


async def recorded_events(settings) -> list[bytes]:
    consumer = AIOKafkaConsumer(settings.kafka.memory_topic(settings.generation),
                                bootstrap_servers=settings.kafka.bootstrap_servers, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    try:
        batches = await consumer.getmany(timeout_ms=3000, max_records=10_000)
    finally:
        await consumer.stop()
    return [r.value for recs in batches.values() for r in recs if orjson.loads(r.value)["type"] == fe.CHUNK_RECORDED]


@pytest.mark.asyncio
@SEALING
async def test_sessions_produce_chunks_and_facts_that_merge_and_supersede(settings, sealed):
    settings = sealed_variant(settings, sealed)
    model = ScriptedModel()
    with FakeOpenAI(json_responder=model) as fake:
        env = fake.env(llm=True, embeddings=True) | SMALL_CHUNKS | {"MEMORY_FACTS__GATE_MODEL": "fake-gate"}
        api_settings = settings.model_copy(update={"embedding": fake.embedding_settings()})
        async with worker_process(settings, extra_env=env) as worker, MemoryClient(settings) as client, \
                running_api(api_settings) as base:
            for count, conversation in enumerate(SESSIONS, start=1):  # sessions happen one after another
                await say_session(client, conversation)
                await wait_for_chunks(settings, count, worker.log_path)
            async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": "key-a"}) as http:
                current = (await http.get("/v1/facts", params={"subject_id": "grandpa"},
                                          headers={"X-User-Id": "alice"})).json()["facts"]
                history = (await http.get("/v1/facts", params={"subject_id": "grandpa", "include_superseded": "true"},
                                          headers={"X-User-Id": "alice"})).json()["facts"]

            # One chunk per session and range; the malformed answer left nothing and was retried.
            chunks = await rows(settings, "SELECT conversation_id, message_range_start, message_range_end, model,"
                                          " embedding_model, vector_dims(embedding) FROM conversation_chunks"
                                          " ORDER BY conversation_id")
            assert chunks == [("s1", 0, 4, "fake-llm", "fake-embedding", 384),
                              ("s2", 0, 4, "fake-llm", "fake-embedding", 384),
                              ("s3", 0, 4, "fake-llm", "fake-embedding", 384),
                              ("s4", 0, 4, "offline-rules-v2", "fake-embedding", 384)]
            assert model.extractions == ["s1", "s1", "s2", "s3"]  # the gate kept s4 from the big model
            assert model.gates == ["s1", "s1", "s2", "s3", "s4"]

            facts = await facts_by_content(settings)
            assert sorted(facts) == ["The user lives in Lisbon.", "The user lives in Porto.",
                                     "The user's daughter Ana plays the piano."]
            if sealed:  # chunk summaries and facts are sealed on the memory topic, opened by the projector
                assert await topic_residue(settings, "daughter Ana", raw=True) == {}
                assert settings.kafka.memory_topic(settings.generation) in await topic_residue(settings, "daughter Ana")
            lisbon, porto = facts["The user lives in Lisbon."], facts["The user lives in Porto."]
            # s2 repeated Lisbon: merged (importance up, tags joined, s2's events added), no new row.
            assert lisbon[1:4] == (5, ["home"], True) and lisbon[4] == "s1" and lisbon[5] == 8
            assert lisbon[6:] == ("private", "alice")
            # s3 contradicted it: superseded with a validity interval and a link, never deleted.
            assert porto[3] is False
            assert await rows(settings, "SELECT from_fact_id, to_fact_id, relationship FROM fact_links") == [
                (porto[0], lisbon[0], "supersedes")]
            valid = await rows(settings, "SELECT f.valid_to = (SELECT max(occurred_at) FROM messages"
                                         " WHERE conversation_id = 's3' AND seq < 4) FROM facts f WHERE fact_id = %s",
                               (lisbon[0],))
            assert valid == [(True,)]
            changes = await rows(settings, "SELECT change FROM fact_history WHERE fact_id = %s ORDER BY id",
                                 (lisbon[0],))
            assert changes == [("extracted",), ("merged",), ("superseded",)]

            assert [f["content"] for f in current] == ["The user's daughter Ana plays the piano.",
                                                       "The user lives in Porto."]
            old = next(f for f in history if f["fact_id"] == lisbon[0])
            assert old["valid_to"] is not None
            assert old["links"] == [{"relationship": "supersedes", "direction": "incoming", "fact_id": porto[0]}]

            # Redelivery (same bytes) and a late second attempt (new event id) change nothing.
            before_facts, before_history = facts, await scalar(settings, "SELECT count(*) FROM fact_history")
            first = next(v for v in await recorded_events(settings) if orjson.loads(v)["conversation_id"] == "s1")
            late = orjson.loads(first)
            late["event_id"] = str(uuid.uuid4())
            await resend(settings, [first, orjson.dumps(late)])
            await wait_for_projected(settings)
            assert await facts_by_content(settings) == before_facts
            assert await scalar(settings, "SELECT count(*) FROM fact_history") == before_history
            assert await scalar(settings, "SELECT count(*) FROM conversation_chunks") == 4


async def resend(settings, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(settings.kafka.memory_topic(settings.generation), value=value,
                                         key=b"tenant-a/s1")
    finally:
        await producer.stop()


async def wait_for_projected(settings) -> None:
    """Until the facts projector has consumed the memory topic to its end."""
    topic = settings.kafka.memory_topic(settings.generation)
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers)
    await consumer.start()
    try:
        from aiokafka import TopicPartition

        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or
                      range(settings.kafka.partitions)]
        ends = await consumer.end_offsets(partitions)
    finally:
        await consumer.stop()
    wanted = sum(ends.values())

    async def caught_up() -> bool:
        done = await scalar(settings, "SELECT coalesce(sum(next_offset), 0) FROM projector_offsets"
                                      " WHERE projector = 'facts' AND topic = %s", (topic,))
        return done >= wanted
    await wait_until(caught_up, 30, "facts projector at the end of the memory topic")


@pytest.mark.asyncio
async def test_offline_extractor_and_local_embeddings_without_any_llm(settings):
    lines = {
        "o1": ["I live in Lisbon.", "Nice.", "I usually play chess on Sundays.", "Fun."],
        "o2": ["hi", "Hello!", "ok", "Sure."],
        "o3": ["I live in Lisbon.", "Yes.", "thanks", "Welcome."],
        "o4": ["I live in Porto now.", "Oh!", "It was a big move.", "Indeed."],
    }
    async with worker_process(settings, extra_env=SMALL_CHUNKS) as worker, MemoryClient(settings) as client:
        for count, (conversation, text) in enumerate(lines.items(), start=1):
            await say_session(client, conversation, lines=text)
            await wait_for_chunks(settings, count, worker.log_path)
    chunks = await rows(settings, "SELECT conversation_id, model, prompt_version, embedding_model FROM"
                                  " conversation_chunks ORDER BY conversation_id")
    vectors = model_name(EmbeddingSettings().integer_matmul)  # the local model's default graph
    assert chunks == [(c, "offline-rules-v2", "offline-rules-v2", vectors) for c in lines]
    facts = await rows(settings, "SELECT content, category, extracted_by, valid_to IS NULL, source_conversation_id,"
                                 " array_length(source_event_ids, 1) FROM facts ORDER BY valid_from, content")
    assert facts == [
        ("The user lives in Lisbon.", "other", "offline-rules-v2", False, "o1", 8),  # merged by o3, superseded by o4
        ("The user usually plays chess on Sundays.", "habit", "offline-rules-v2", True, "o1", 4),
        ("The user lives in Porto now.", "other", "offline-rules-v2", True, "o4", 4),
    ]
    gate = await rows(settings, "SELECT count(*) FROM facts WHERE source_conversation_id = 'o2'")
    assert gate == [(0,)]  # the heuristic gate found only chatter in o2
    assert json.loads(json.dumps(await rows(settings, "SELECT relationship FROM fact_links"))) == [["supersedes"]]


TWO_PEOPLE = [  # (day, role, content): both people are human; one is role=user, the other role=assistant
    ("2023-05-08T13:56:00+00:00", "user", "Caroline: I live in Lisbon with my two cats."),
    ("2023-05-08T13:57:00+00:00", "assistant", "Melanie: I ran a charity race in Boston yesterday."),
    ("2023-05-08T13:58:00+00:00", "system", "Caroline: internal note that must never be remembered."),
    ("2023-05-08T13:59:00+00:00", "user", "Caroline: I adopted a cat named Oscar last week."),
    ("2023-06-20T18:00:00+00:00", "user", "Caroline: I moved from Lisbon to Porto in June."),
    ("2023-06-20T18:01:00+00:00", "assistant", "Melanie: I painted a lake sunrise last Friday."),
    ("2023-06-20T18:02:00+00:00", "tool", '{"city": "Porto", "note": "tool output never remembered"}'),
    ("2023-06-20T18:03:00+00:00", "user", "Caroline: ok bye"),
]


@pytest.mark.asyncio
async def test_two_named_people_offline_facts_by_name_with_dates_and_an_update_that_supersedes(settings):
    from datetime import datetime

    async with worker_process(settings, extra_env=SMALL_CHUNKS) as worker, MemoryClient(settings) as client:
        for seq, (day, role, content) in enumerate(TWO_PEOPLE + [(TWO_PEOPLE[-1][0], "assistant", "Melanie: bye")]
                                                   + [(TWO_PEOPLE[-1][0], "user", "Caroline: bye")] * 3):
            await client.append_message(tenant_id="tenant-a", conversation_id="two", user_id="caroline",
                                        subject_id=None, seq=seq, role=role, content=content,
                                        occurred_at=datetime.fromisoformat(day))
        await wait_for_chunks(settings, 2, worker.log_path)  # [0, 4) and [4, 8)
    chunks = await rows(settings, "SELECT message_range_start, occurred_start, occurred_end, content"
                                  " FROM conversation_chunks ORDER BY message_range_start")
    assert [(c[0], c[1].isoformat(), c[2].isoformat()) for c in chunks] == [
        (0, "2023-05-08T13:56:00+00:00", "2023-05-08T13:59:00+00:00"),
        (4, "2023-06-20T18:00:00+00:00", "2023-06-20T18:03:00+00:00")]
    assert "Caroline (8 May 2023): " in chunks[0][3] and "Boston" in chunks[0][3]
    assert "yesterday (7 May 2023)" in chunks[0][3]
    assert all("never" not in c[3] for c in chunks)  # system and tool messages left out

    facts = {r[0]: r[1:] for r in await rows(
        settings, "SELECT content, fact_id, valid_to IS NULL, importance, tags, memory_type FROM facts")}
    assert "Melanie ran a charity race in Boston yesterday (7 May 2023)." in facts  # the other speaker
    assert "Caroline adopted a cat named Oscar last week (the week before 8 May 2023)." in facts
    assert not [c for c in facts if "never" in c or c.startswith("I ")]
    assert all(f[3] for f in facts.values())  # tags filled
    assert {f[2] for f in facts.values()} != {3}  # importance is not the constant default
    lisbon, porto = facts["Caroline lives in Lisbon with Caroline's two cats."], facts["Caroline lives in Porto."]
    # The move updates the fact it was shown (offline rule, relation "contradicts"): superseded, kept.
    assert lisbon[1] is False and porto[1] is True
    assert await rows(settings, "SELECT from_fact_id, to_fact_id FROM fact_links WHERE relationship = 'supersedes'"
                      ) == [(porto[0], lisbon[0])]
    assert await rows(settings, "SELECT detail->>'reason' FROM fact_history WHERE fact_id = %s"
                                " AND change = 'superseded'", (lisbon[0],)) == [("extractor verdict: contradicts",)]
