"""Erasure on the real stack (docs/lineage.md): a worker process (Kafka, faust, projectors) with
an LLM and embedding server over HTTP, PostgreSQL and the API over HTTP. Marker strings planted
in one user's messages are derived into summaries, chunks, facts, topics with archives, served
contexts and the LLM cache; after DELETE /v1/users/{id} no table of the generation (nor the
public LLM cache) holds a marker, and the other user's memory is as it was."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import uuid
from datetime import UTC, datetime

import httpx
import numpy as np
import orjson
import pytest
from aiokafka import AIOKafkaConsumer

from runtime.client import MemoryClient
from core.embeddings.cache import text_key
from core.master_keys import new_master_key
from core.settings import ApiSettings, PrivacySettings
from projections.erasure import ErasureProjector
from projections.migrate import migrate
from projections.runner import ProjectorRunner
from domain.facts import ids
from schemas import facts_events as fe
from schemas.erasure_events import CONVERSATION_ERASED, ConversationErased
from schemas.codec import decode, new_event
from schemas.events import SummaryCompleted, SummaryRequested
from schemas.registry import SUMMARY_COMPLETED, SUMMARY_REQUESTED
from runtime.kafka_topics import ensure_topics
from schemas.sealed import ERASED_CONTENT
from tests.integration.conftest import (API_KEYS, running_api, running_projectors, sealed_variant, wait_until,
                                       worker_process)
from tests.integration.test_facts_capture import SMALL_CHUNKS, rows
from tests.integration.test_lineage import until
from tests.integration.test_memory_projector import send_memory_events
from tests.support.fake_openai import FakeOpenAI, RecordedRequest, hashed_embedding
from tests.support.topic_reader import topic_residue

ADMIN = "erasure-admin-key"
# A tenant and users unique to this run: user keys, conversation participants and LLM-cache
# provenance live in public tables shared by every test and run.
TENANT = f"tenant-e{uuid.uuid4().hex[:8]}"
ALICE, BOB = f"alice-{uuid.uuid4().hex[:8]}", f"bob-{uuid.uuid4().hex[:8]}"
KEYS = API_KEYS | {"key-a": {"tenant": TENANT, "act_as": "any_user"}, "alice-key": {"tenant": TENANT, "user": ALICE},
                   "bob-key": {"tenant": TENANT, "user": BOB}}
MARK = f"zqxmark{uuid.uuid4().hex[:8]}"  # alice's words; one token for every tokenizer
KEEP = f"bobkeep{uuid.uuid4().hex[:8]}"  # bob's
ENV = SMALL_CHUNKS | {
    "MEMORY_LLM__CACHE_ENABLED": "true",  # entries keyed by this run's unique texts
    "MEMORY_TOPICS__MAX_MESSAGES_PER_TOPIC": "6",  # topics compact and archive early
    "MEMORY_TOPICS__RECENT_MESSAGE_KEEP": "2",
    "MEMORY_TOPICS__SIMILARITY_THRESHOLD": "-1.0",  # the fake vectors are unrelated: one topic per conversation
}


def lines(word: str) -> list[str]:
    return [f"My secret code word is {word} and I keep it at home.", "Noted.",
            f"I told my sister about {word} yesterday.", "Understood.", f"Remember {word} for later.", "Sure.",
            f"The garden shed hides {word} too.", "Fine.", f"Last time: {word}.", "Okay.", "Bye.", "Bye."]


def model(request: RecordedRequest) -> dict:
    if "worth_remembering" in request.user_content:
        return {"worth_remembering": True, "reason": "scripted"}
    for word in (MARK, KEEP):
        if word in request.user_content:
            return {"summary": f"The user talks about {word}.",
                    "facts": [{"category": "other", "content": f"The user's code word is {word}.", "importance": 5}]}
    return {"summary": "Nothing.", "facts": []}


async def say(client: MemoryClient, user: str, conversation: str, word: str) -> None:
    for seq, text in enumerate(lines(word)):
        await client.append_message(tenant_id=TENANT, conversation_id=conversation, user_id=user, subject_id="home",
                                    seq=seq, role="user" if seq % 2 == 0 else "assistant", content=text)


async def residue(settings, marker: str) -> dict[str, int]:
    """Rows holding `marker` per table of the generation, in public.llm_cache, and in the
    gzip'd topic archives."""
    tables = [t for (t,) in await rows(settings, "SELECT table_name FROM information_schema.tables WHERE"
                                                 " table_schema = %s AND table_type = 'BASE TABLE'", (settings.pg_schema,))]
    assert {"messages", "memory", "facts", "fact_history", "topics", "topic_archives", "served_contexts"} <= set(tables)
    found = {}
    for table in tables:
        [(count,)] = await rows(settings, f'SELECT count(*) FROM "{settings.pg_schema}"."{table}" t'
                                          " WHERE t::text LIKE %s", (f"%{marker}%",))
        found[table] = count
    [(found["public.llm_cache"],)] = await rows(settings, "SELECT count(*) FROM public.llm_cache WHERE output::text"
                                                          " LIKE %s", (f"%{marker}%",))
    archives = await rows(settings, "SELECT archive FROM topic_archives")
    found["topic_archives (gunzipped)"] = sum(marker in gzip.decompress(bytes(a)).decode() for (a,) in archives)
    return {k: v for k, v in found.items() if v}


def embedded(fake: FakeOpenAI, word: str) -> list[str]:
    """Every text the embedding server was asked to embed that holds `word`."""
    return sorted({t for r in fake.embedding_requests for t in r.inputs if word in t})


async def vector_residue(settings, texts: list[str], dimensions: int) -> dict[str, int]:
    """Rows of every vector column of the generation, and of public.embedding_cache, holding the
    embedding of one of `texts` (the fake server's vector is a function of the text), and cache
    rows keyed by one of the texts' hashes."""
    vectors = np.array([v for v in (hashed_embedding(t, dimensions) for t in texts) if any(v)], dtype=np.float32)
    literals = ["[" + ",".join(map(str, v)) + "]" for v in vectors.tolist()]
    columns = await rows(settings, "SELECT table_name, column_name FROM information_schema.columns WHERE"
                                   " table_schema = %s AND udt_name = 'vector' ORDER BY 1, 2", (settings.pg_schema,))
    assert {("message_embeddings", "embedding"), ("facts", "embedding"), ("conversation_chunks", "embedding")} <= set(
        columns), columns
    found = {}
    for table, column in columns:
        [(found[f"{table}.{column}"],)] = await rows(
            settings, f'SELECT count(*) FROM "{settings.pg_schema}"."{table}" t WHERE EXISTS'
                      f' (SELECT 1 FROM unnest(%s::text[]) v WHERE t."{column}" <=> v::vector < 1e-4)', (literals,))
    cached = await rows(settings, "SELECT text_sha256, vector FROM public.embedding_cache WHERE model = 'fake-embedding'"
                                  " AND dimensions = %s AND created_at > now() - interval '2 hours'", (dimensions,))
    keys = {text_key(t) for t in texts}
    found["public.embedding_cache (key)"] = sum(bytes(k) in keys for k, _ in cached)
    if cached and len(vectors):
        matrix = np.stack([np.frombuffer(v, dtype="<f4") for _, v in cached])
        norms = np.outer(np.linalg.norm(matrix, axis=1), np.linalg.norm(vectors, axis=1))
        cosine = (matrix @ vectors.T) / np.where(norms == 0, 1, norms)
        found["public.embedding_cache (vector)"] = int((cosine.max(axis=1) > 1 - 1e-4).sum())
    return {k: v for k, v in found.items() if v}


async def cache_sources(settings, conversation: str) -> list[tuple[str, str]]:
    """(cache key, kind) of the LLM-cache entries a conversation's requests wrote or used."""
    return await rows(settings, "SELECT s.cache_key, c.kind FROM public.llm_cache_sources s JOIN public.llm_cache c"
                                " USING (cache_key) WHERE s.tenant_id = %s AND s.conversation_id = %s ORDER BY 1",
                      (TENANT, conversation))


async def counts(settings, conversation: str) -> dict[str, int]:
    out = {}
    for table, where in (("messages", "conversation_id"), ("memory", "conversation_id"),
                         ("conversation_chunks", "conversation_id"), ("facts", "source_conversation_id"),
                         ("topics", "conversation_id"), ("topic_assignments", "conversation_id"),
                         ("message_embeddings", "conversation_id"), ("topic_archives", "conversation_id")):
        [(out[table],)] = await rows(settings, f"SELECT count(*) FROM {table} WHERE {where} = %s", (conversation,))
    return out


async def log_texts(settings) -> tuple[bytes, str]:
    """Every record of the conversation topic: the raw bytes, and the texts as the service
    decodes them (schemas.codec.decode, which opens sealed messages)."""
    consumer = AIOKafkaConsumer(settings.kafka.conversation_topic, bootstrap_servers=settings.kafka.bootstrap_servers,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    raw, texts = b"", []
    try:
        batches = await consumer.getmany(timeout_ms=5000)
        while batches:
            for records in batches.values():
                for record in records:
                    raw += record.value
                    event = decode(record.value, key=record.key)
                    texts.append(orjson.dumps(event.payload.model_dump(mode="json")).decode())
            batches = await consumer.getmany(timeout_ms=2000)
    finally:
        await consumer.stop()
    return raw, "\n".join(texts)


@pytest.mark.asyncio
@pytest.mark.parametrize("sealed", [False, True], ids=["clear", "sealed"])
async def test_erasing_a_user_leaves_no_marker_in_any_table_and_the_other_user_intact(settings, sealed):
    # Sealed: the data keys wrapped by a master key (the worker gets it through its environment).
    privacy = PrivacySettings(encrypt_content=sealed, master_keys={"test-mk": new_master_key()} if sealed else {})
    settings = settings.model_copy(update={"api": ApiSettings(api_keys=KEYS, admin_keys=[ADMIN]), "privacy": privacy})
    with FakeOpenAI(json_responder=model) as fake:
        env = fake.env(llm=True, embeddings=True) | ENV | {"MEMORY_API__ADMIN_KEYS": f'["{ADMIN}"]'}
        api_settings = settings.model_copy(update={"embedding": fake.embedding_settings()})
        async with worker_process(settings, extra_env=env) as worker, running_api(api_settings) as base:
            async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": "key-a"}, timeout=60) as http:
                async with MemoryClient(settings) as client:
                    await say(client, ALICE, "conv-a", MARK)
                    await say(client, BOB, "conv-b", KEEP)
                log = worker.log_path
                for conversation in ("conv-a", "conv-b"):
                    await until(settings, "SELECT 1 FROM facts WHERE source_conversation_id = %s", (conversation,),
                                f"a fact of {conversation}", log, timeout=180)
                    await until(settings, "SELECT 1 FROM memory WHERE conversation_id = %s AND status = 'completed'",
                                (conversation,), f"a summary of {conversation}", log, timeout=180)
                    await until(settings, "SELECT 1 FROM topic_archives WHERE conversation_id = %s", (conversation,),
                                f"a topic archive of {conversation}", log, timeout=180)
                served = await http.get("/v1/conversations/conv-a/context", params={"query": f"What is {MARK}?"})
                assert served.status_code == 200, served.text
                await until(settings, "SELECT 1 FROM served_contexts WHERE conversation_id = 'conv-a'", (),
                            "the served context projected", log)
                planted = await residue(settings, MARK)
                for table in ("messages", "memory", "conversation_chunks", "facts", "fact_history", "topics",
                              "topic_compactions", "topic_archives (gunzipped)", "served_contexts", "public.llm_cache"):
                    assert planted.get(table), (table, planted)  # the test sees residue where there is some
                bob_before = await counts(settings, "conv-b")
                assert all(bob_before.values()), bob_before
                bob_residue = await residue(settings, KEEP)
                # Vectors: every embedding of alice's texts is somewhere (the check sees residue).
                dimensions = fake.embedding_dimensions
                alice_texts, bob_texts = embedded(fake, MARK), embedded(fake, KEEP)
                alice_vectors = await vector_residue(settings, alice_texts, dimensions)
                for where in ("message_embeddings.embedding", "facts.embedding", "conversation_chunks.embedding",
                              "public.embedding_cache (key)", "public.embedding_cache (vector)"):
                    assert alice_vectors.get(where), (where, alice_vectors)
                bob_vectors = await vector_residue(settings, bob_texts, dimensions)
                cached = {c: await cache_sources(settings, c) for c in ("conv-a", "conv-b")}
                assert cached["conv-a"] and cached["conv-b"], cached  # entries record their conversation
                assert {"summary", "json", "topic_summary"} <= {kind for _, kind in cached["conv-a"]}, cached
                if sealed:  # the log holds ciphertext only; the service's decode opens it
                    raw, texts = await log_texts(settings)
                    assert MARK not in raw.decode() and KEEP not in raw.decode()
                    assert MARK in texts and KEEP in texts
                    before = await topic_residue(settings, MARK)  # derived events hold it, sealed
                    assert settings.kafka.memory_topic(settings.generation) in before, before
                    assert await topic_residue(settings, MARK, raw=True) == {}  # nothing in clear on any topic
                    # nor any vector: every embedding field is sealed with its text
                    assert await topic_residue(settings, 'embedding":', raw=True) == {}

                # Only an operator or alice herself may erase alice.
                assert (await http.delete(f"/v1/users/{ALICE}")).status_code == 403
                assert (await http.delete(f"/v1/users/{ALICE}", headers={"X-API-Key": "bob-key"})).status_code == 403
                assert (await http.delete(f"/v1/users/{ALICE}", headers={"X-Admin-Key": ADMIN,
                                                                      "X-API-Key": ""})).status_code == 400
                answer = await http.delete(f"/v1/users/{ALICE}", params={"tenant_id": TENANT},
                                           headers={"X-Admin-Key": ADMIN, "X-API-Key": ""})
                assert answer.status_code == 202, answer.text
                event_id = answer.json()["event_id"]
                [(deleted,)] = await until(settings, "SELECT deleted_rows FROM erasures WHERE event_id = %s",
                                           (event_id,), "the erasure applied", log)
                assert deleted["messages"] == 12 and deleted["facts"] >= 1, deleted

                async def clean() -> bool:  # derived events already in flight are erased too
                    return not await residue(settings, MARK)
                try:
                    await wait_until(clean, 30, "no residue")
                except AssertionError:
                    raise AssertionError(f"residue: {await residue(settings, MARK)}") from None
                assert await counts(settings, "conv-b") == bob_before
                assert not any((await counts(settings, "conv-a")).values())
                # No vector derived from alice's texts in any vector column nor the embedding cache
                # (texts embedded since, e.g. by derivation in flight, included); bob's all there.
                assert await vector_residue(settings, embedded(fake, MARK), dimensions) == {}
                assert await vector_residue(settings, bob_texts, dimensions) == bob_vectors
                assert await residue(settings, KEEP) == bob_residue
                # Every entry alice's requests wrote or used is gone by provenance (the gate's verdicts
                # hold no marker: no text match finds them); bob's stay.
                assert await cache_sources(settings, "conv-a") == []
                assert await rows(settings, "SELECT count(*) FROM public.llm_cache WHERE cache_key = ANY(%s)",
                                  ([k for k, _ in cached["conv-a"]],)) == [(0,)]
                assert await cache_sources(settings, "conv-b") == cached["conv-b"]
                # Alice's conversation is gone from the API too.
                gone = await http.get("/v1/conversations/conv-a/context", headers={"X-API-Key": "alice-key"})
                assert gone.status_code == 404, gone.text
                if sealed:  # the data keys are wrapped by the master key at rest
                    wrapped = await rows(settings, "SELECT user_id, master_key_id FROM public.data_keys WHERE"
                                                   " deployment = %s ORDER BY 1", (settings.kafka.topic_prefix,))
                    assert wrapped and all(m == "test-mk" for _, m in wrapped), wrapped
                if sealed:  # alice's key is destroyed: her events decode as erased, bob's as before
                    raw, texts = await log_texts(settings)
                    assert MARK not in texts and KEEP in texts and ERASED_CONTENT in texts
                    # Every topic of the prefix, derived events included, read as the service would.
                    assert await topic_residue(settings, MARK) == {}
                    assert settings.kafka.memory_topic(settings.generation) in await topic_residue(settings, KEEP)
                    await replay_has_no_residue(settings, env, alice_texts, dimensions)


async def replay_has_no_residue(settings, env: dict, erased_texts: list[str], dimensions: int) -> None:
    """A replay after the erasure (a new generation built from the whole log by a worker
    process): alice's sealed messages open as erased, bob's memory is rebuilt, no marker."""
    replay = settings.model_copy(update={"generation": settings.generation + "_r"})
    await asyncio.to_thread(migrate, replay)
    await ensure_topics(replay)
    async with worker_process(replay, extra_env=env, log_name="replay") as worker:
        log = worker.log_path
        await until(replay, "SELECT 1 FROM facts WHERE source_conversation_id = 'conv-b'", (), "bob's fact replayed",
                    log, timeout=180)
        await until(replay, "SELECT 1 FROM memory WHERE conversation_id = 'conv-b' AND status = 'completed'", (),
                    "bob's summary replayed", log, timeout=180)
        await until(replay, "SELECT 1 FROM erasures", (), "the erasure replayed", log)
        assert await residue(replay, MARK) == {}
        assert await topic_residue(replay, MARK) == {}  # the replay's memory topic too
        assert await vector_residue(replay, erased_texts, dimensions) == {}  # nor any vector of alice's texts
        assert (await residue(replay, KEEP)).get("facts")
        assert await rows(replay, "SELECT count(*) FROM projection_anomalies WHERE kind = 'invalid'") == [(0,)]


@contextlib.asynccontextmanager
async def projectors_and_api(settings):
    """The projectors in-process and the API over HTTP, with this file's keys: (settings, http)."""
    settings = settings.model_copy(update={"api": ApiSettings(api_keys=KEYS, admin_keys=[ADMIN])})
    async with running_projectors(settings), running_api(settings) as base:
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            yield settings, http


@pytest.mark.asyncio
async def test_erasing_a_conversation_is_its_owners_right(settings):
    async with projectors_and_api(settings) as (settings, http):
        async with MemoryClient(settings) as client:
            await say(client, ALICE, "conv-a", MARK)
            await say(client, ALICE, "conv-a2", KEEP)
        await until(settings, "SELECT 1 FROM messages WHERE conversation_id = 'conv-a2' AND seq = 11", (),
                    "messages projected")
        await until(settings, "SELECT 1 FROM messages WHERE conversation_id = 'conv-a' AND seq = 11", (),
                    "messages projected")
        bob = await http.delete("/v1/conversations/conv-a", headers={"X-API-Key": "bob-key"})
        assert bob.status_code == 404, bob.text  # not his: as if it did not exist
        assert (await http.delete("/v1/conversations/nope", headers={"X-API-Key": "alice-key"})).status_code == 404
        answer = await http.delete("/v1/conversations/conv-a", headers={"X-API-Key": "alice-key"})
        assert answer.status_code == 202, answer.text
        await until(settings, "SELECT 1 FROM erasures WHERE event_id = %s", (answer.json()["event_id"],),
                    "the erasure applied")
        assert await rows(settings, "SELECT count(*) FROM messages WHERE conversation_id = 'conv-a'") == [(0,)]
        assert await rows(settings, "SELECT count(*) FROM conversations WHERE conversation_id = 'conv-a'") == [(0,)]
        assert await rows(settings, "SELECT count(*) FROM messages WHERE conversation_id = 'conv-a2'") == [(12,)]


@pytest.mark.asyncio
async def test_a_user_erased_from_another_owners_conversation_loses_only_its_messages(settings):
    async with projectors_and_api(settings) as (settings, http):
        async with MemoryClient(settings) as client:
            for seq, (user, text) in enumerate([(BOB, "Hello all."), (ALICE, f"I am {MARK}."),
                                                (BOB, f"Welcome {KEEP}."), (ALICE, f"Bye {MARK}.")]):
                await client.append_message(tenant_id=TENANT, conversation_id="conv-b", user_id=user,
                                            seq=seq, role="user", content=text)
        await until(settings, "SELECT 1 FROM messages WHERE conversation_id = 'conv-b' AND seq = 3", (),
                    "messages projected")
        answer = await http.delete(f"/v1/users/{ALICE}", headers={"X-API-Key": "alice-key"})  # herself
        assert answer.status_code == 202, answer.text
        [(rederive, deleted)] = await until(settings, "SELECT rederive, deleted_rows FROM erasures", (),
                                            "the erasure applied")
        assert rederive == {"conv-b": [1, 3]} and deleted["messages"] == 2, (rederive, deleted)
        left = await rows(settings, "SELECT seq, user_id FROM messages WHERE conversation_id = 'conv-b' ORDER BY seq")
        assert left == [(0, BOB), (2, BOB)]
        assert await rows(settings, "SELECT count(*) FROM conversations WHERE conversation_id = 'conv-b'") == [(1,)]
        assert await residue(settings, MARK) == {}


def mixed_lines() -> list[tuple[str, str, str]]:
    """(user, role, text) of bob's conversation: alice writes its seqs 10 and 14."""
    out = []
    for seq in range(20):
        if seq % 2:
            out.append((BOB, "assistant", f"Reply number {seq}."))
        elif seq in (10, 14):
            out.append((ALICE, "user", f"Alice here: my word is {MARK}, number {seq}."))
        else:
            out.append((BOB, "user", f"Bob says {KEEP} number {seq}."))
    return out


@pytest.mark.asyncio
async def test_mixed_summaries_and_chunks_are_derived_again_without_the_erased_user(settings):
    """Alice wrote in bob's conversation: after her erasure bob gets summaries and chunks for
    the erased range again, made from his messages only, through the worker's normal paths."""
    settings = settings.model_copy(update={"api": ApiSettings(api_keys=KEYS, admin_keys=[ADMIN])})
    with FakeOpenAI(json_responder=model) as fake:
        env = fake.env(llm=True, embeddings=True) | SMALL_CHUNKS | {"MEMORY_WINDOW__CATCH_UP_BACKLOG": "1"}
        api_settings = settings.model_copy(update={"embedding": fake.embedding_settings()})
        async with worker_process(settings, extra_env=env) as worker, running_api(api_settings) as base, \
                MemoryClient(settings) as client:
            log = worker.log_path

            async def write(seqs: range) -> None:
                for seq in seqs:
                    user, role, text = mixed_lines()[seq]
                    await client.append_message(tenant_id=TENANT, conversation_id="conv-m", user_id=user,
                                                subject_id="home", seq=seq, role=role, content=text)
            await write(range(0, 8))  # a summary that ends before alice's first message: kept
            await until(settings, "SELECT 1 FROM memory WHERE conversation_id = 'conv-m' AND status = 'completed'"
                        " AND end_sequence = 7", (), "a summary up to seq 7", log, timeout=180)
            await write(range(8, 20))
            await until(settings, "SELECT 1 FROM memory WHERE conversation_id = 'conv-m' AND status = 'completed'"
                        " AND end_sequence = 19", (), "a summary up to seq 19", log, timeout=180)
            await until(settings, "SELECT 1 FROM conversation_chunks WHERE conversation_id = 'conv-m'"
                        " AND message_range_start = 12", (), "the chunk of seqs 12..15", log, timeout=180)
            planted = await residue(settings, MARK)
            assert planted.get("memory") and planted.get("conversation_chunks"), planted
            [(newest_before,)] = await rows(settings, "SELECT max(memory_id) FROM memory WHERE conversation_id = 'conv-m'")
            [(kept_id, kept_end, kept_text)] = await rows(  # the newest summary that ends before alice's words
                settings, "SELECT memory_id, end_sequence, memory_text FROM memory WHERE conversation_id = 'conv-m'"
                " AND status = 'completed' AND end_sequence < 10 ORDER BY memory_id DESC LIMIT 1")
            chunks_before = await rows(settings, "SELECT message_range_start, chunk_id, content FROM conversation_chunks"
                                                 " WHERE conversation_id = 'conv-m' ORDER BY 1")
            await until(settings, "SELECT 1 FROM topic_messages WHERE conversation_id = 'conv-m' AND seq = 19", (),
                        "seq 19 placed in a topic", log, timeout=180)
            topics_before = {t for (t,) in await rows(settings, "SELECT topic_id FROM topics"
                                                                " WHERE conversation_id = 'conv-m'")}
            assert [c[0] for c in chunks_before] == [0, 4, 8, 12], chunks_before
            mixed_vectors = await vector_residue(settings, embedded(fake, MARK), fake.embedding_dimensions)
            for where in ("message_embeddings.embedding", "conversation_chunks.embedding", "public.embedding_cache (key)"):
                assert mixed_vectors.get(where), (where, mixed_vectors)  # alice's words, embedded

            async with httpx.AsyncClient(base_url=base, timeout=60) as http:
                answer = await http.delete(f"/v1/users/{ALICE}", headers={"X-API-Key": "alice-key"})
                assert answer.status_code == 202, answer.text
                [(rederive,)] = await until(settings, "SELECT rederive FROM erasures WHERE event_id = %s",
                                            (answer.json()["event_id"],), "the erasure applied", log)
                assert rederive == {"conv-m": [10, 14]}, rederive
                [(outcome, ranges, base_id)] = await until(
                    settings, "SELECT outcome, chunk_ranges, base_memory_id FROM erasure_rederive"
                    " WHERE conversation_id = 'conv-m' AND done_at IS NOT NULL", (), "the re-derivation done",
                    log, timeout=180)
                assert (outcome, ranges, base_id) == ("done", [[8, 12], [12, 16]], kept_id)
                [(new_id, start, text, sources)] = await until(
                    settings, "SELECT memory_id, start_sequence, memory_text, source_event_ids FROM memory"
                    " WHERE conversation_id = 'conv-m' AND status = 'completed' AND end_sequence = 19"
                    " AND memory_id > %s", (newest_before,), "the summary derived again", log, timeout=180)
                assert start <= kept_end + 1 and KEEP in text and MARK not in text, (start, text)
                assert len(sources) == len([s for s in range(kept_end + 1, 20) if s not in (10, 14)])  # but alice's
                after = await rows(settings, "SELECT message_range_start, chunk_id, content FROM conversation_chunks"
                                             " WHERE conversation_id = 'conv-m' ORDER BY 1")
                assert [c[0] for c in after] == [0, 4, 8, 12], after
                assert after[:2] == chunks_before[:2]  # the chunks without alice are untouched
                assert all(KEEP in c[2] and MARK not in c[2] for c in after[2:]), after
                # Bob's kept summary is as it was, and nothing of alice is left anywhere.
                assert await rows(settings, "SELECT memory_text FROM memory WHERE conversation_id = 'conv-m'"
                                            " AND memory_id = %s", (kept_id,)) == [(kept_text,)]
                # Topics are derived again too: the remaining messages read back and placed anew.
                await until(settings, "SELECT 1 FROM topic_messages WHERE conversation_id = 'conv-m' AND seq = 19"
                            " AND topic_id <> ALL(%s::text[])", (sorted(topics_before),),
                            "seq 19 placed in a topic derived again", log, timeout=180)
                placed = [seq for (seq,) in await rows(settings, "SELECT seq FROM topic_messages"
                                                                 " WHERE conversation_id = 'conv-m' ORDER BY seq")]
                assert placed and 10 not in placed and 14 not in placed, placed
                assert await residue(settings, MARK) == {}
                # No vector of her messages or of the chunks that mixed them, anywhere (the
                # re-derivation embedded bob's texts again).
                assert await vector_residue(settings, embedded(fake, MARK), fake.embedding_dimensions) == {}
                context = await http.get("/v1/conversations/conv-m/context", headers={"X-API-Key": "bob-key"})
                assert context.status_code == 200, context.text
                served = context.json()
                assert served["summary"]["memory_id"] == new_id and MARK not in context.text, served


def summary_events(conversation: str, memory_id: int, end: int, text: str, sources: list[str]):
    common = dict(tenant_id=TENANT, conversation_id=conversation, user_id="system")
    return [new_event(SUMMARY_REQUESTED, SummaryRequested(memory_id=memory_id, start_seq=0, end_seq=end,
                                                          prompt_version="p", model="m"), **common),
            new_event(SUMMARY_COMPLETED, SummaryCompleted(memory_id=memory_id, start_seq=0, end_seq=end, text=text,
                                                          generation_time_ms=1, prompt_version="p", model="m",
                                                          source_event_ids=sources), **common)]


def chunk_event(settings, conversation: str, owner: str, text: str, sources: list[str]):
    vector = ids.to_vector([1.0] + [0.0] * (settings.embedding.dimensions - 1), "fake")
    fact = fe.RecordedFact(fact_id=ids.fact_id(TENANT, conversation, 0, 4, text), category="other",
                           content=text, embedding=vector)
    payload = fe.ChunkRecorded(chunk_id=ids.chunk_id(TENANT, conversation, 0, 4), start_seq=0, end_seq_exclusive=4,
                               owner_user_id=owner, summary=text, embedding=vector, facts=[fact],
                               gate=fe.GateVerdict(worth_remembering=True, method="off"), extractor="test", model="m",
                               prompt_version="p", source_event_ids=sources, observed_at=datetime.now(UTC),
                               generation_time_ms=1)
    return new_event(fe.CHUNK_RECORDED, payload, tenant_id=TENANT, conversation_id=conversation, user_id=owner,
                     seq=3)


@pytest.mark.asyncio
async def test_derived_events_in_flight_do_not_bring_erased_rows_back(settings):
    """Summaries and chunks requested before an erasure and projected after it (the race of
    docs/lineage.md): the tombstones of the applied erasure drop them; bob's clean ones pass."""
    async with projectors_and_api(settings) as (settings, http):
        async with MemoryClient(settings) as client:
            await say(client, ALICE, "conv-a", MARK)
            for seq, (user, text) in enumerate([(BOB, "Hello all."), (ALICE, f"I am {MARK}."),
                                                (BOB, f"Welcome {KEEP}."), (BOB, "Bye.")]):
                await client.append_message(tenant_id=TENANT, conversation_id="conv-b", user_id=user,
                                            seq=seq, role="user", content=text)
        await until(settings, "SELECT 1 FROM messages WHERE conversation_id = 'conv-a' AND seq = 11", (), "projected")
        await until(settings, "SELECT 1 FROM messages WHERE conversation_id = 'conv-b' AND seq = 3", (), "projected")
        events = dict(await rows(settings, "SELECT conversation_id || ':' || seq, event_id FROM messages"))
        alice_a = [events[f"conv-a:{s}"] for s in range(4)]
        answer = await http.delete(f"/v1/users/{ALICE}", headers={"X-API-Key": "alice-key"})
        assert answer.status_code == 202, answer.text
        await until(settings, "SELECT 1 FROM erasures WHERE event_id = %s", (answer.json()["event_id"],),
                    "the erasure applied")
        assert await residue(settings, MARK) == {}

        # Results of requests made before the erasure arrive now, and then bob's clean ones.
        late = [*summary_events("conv-a", 1, 3, f"About {MARK}.", alice_a),
                chunk_event(settings, "conv-a", ALICE, f"Alice said {MARK}.", alice_a),
                *summary_events("conv-b", 1, 3, f"Mixed {MARK} and {KEEP}.",
                                [events["conv-b:0"], events["conv-b:1"], events["conv-b:2"]]),
                *summary_events("conv-b", 2, 2, f"Only {KEEP}.", [events["conv-b:0"], events["conv-b:2"]])]
        await send_memory_events(settings, late)
        await until(settings, "SELECT 1 FROM memory WHERE conversation_id = 'conv-b' AND memory_id = 2"
                    " AND status = 'completed'", (), "bob's clean summary projected")
        assert await residue(settings, MARK) == {}
        assert await rows(settings, "SELECT count(*) FROM memory WHERE conversation_id = 'conv-a'") == [(0,)]
        assert await rows(settings, "SELECT count(*) FROM conversation_chunks WHERE conversation_id = 'conv-a'"
                                    " UNION ALL SELECT count(*) FROM facts WHERE source_conversation_id = 'conv-a'") \
            == [(0,), (0,)]
        assert await rows(settings, "SELECT memory_id, status, memory_text, error FROM memory"
                                    " WHERE conversation_id = 'conv-b' ORDER BY memory_id") == [
            (1, "failed", None, "its inputs were erased"), (2, "completed", f"Only {KEEP}.", None)]


@contextlib.asynccontextmanager
async def erasure_projector_alone(settings):
    """Only the erasure projector, as in a replay where it reaches `user.erased` first (it skips
    every message; the messages projector still has the whole log to read)."""
    runner = ProjectorRunner(settings, ErasureProjector(settings))
    task = asyncio.create_task(runner.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.asyncio
@pytest.mark.parametrize("sealed", [False, True], ids=["clear", "sealed"])
async def test_messages_reached_after_their_erasure_are_not_projected_and_later_ones_are(settings, sealed):
    """The race of docs/lineage.md: the erasure is applied before the messages projector reaches
    messages written before it. They leave no row, no embedding, no marker; what the user (or
    the conversation) gets after the erasure is projected."""
    settings = sealed_variant(settings.model_copy(update={
        "api": ApiSettings(api_keys=KEYS, admin_keys=[ADMIN]),
        "embedding": settings.embedding.model_copy(update={"provider": "stub"})}), sealed)
    again = f"zqxagain{uuid.uuid4().hex[:8]}"  # alice's words after her erasure
    async with MemoryClient(settings) as client:
        await say(client, ALICE, "conv-a", MARK)  # hers, 12 messages
        for seq, (user, text) in enumerate([(BOB, "Hello all."), (ALICE, f"I am {MARK}."),
                                            (BOB, f"Welcome {KEEP}."), (BOB, "Bye.")]):
            await client.append_message(tenant_id=TENANT, conversation_id="conv-b", user_id=user,
                                        seq=seq, role="user", content=text)
        for seq in range(3):  # bob's conversation erased by a conversation.erased (same partition)
            await client.append_message(tenant_id=TENANT, conversation_id="conv-c", user_id=BOB, seq=seq,
                                        role="user", content=f"Gone {MARK} {seq}.")
        dropped_c = new_event(CONVERSATION_ERASED, ConversationErased(erased_conversation_id="conv-c"),
                              tenant_id=TENANT, conversation_id="conv-c", user_id=BOB)
        await client.append(dropped_c)
        await client.append_message(tenant_id=TENANT, conversation_id="conv-c", user_id=BOB, seq=3,
                                    role="user", content=f"After the erasure {KEEP}.")
    async with erasure_projector_alone(settings), running_api(settings) as base:
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            answer = await http.delete(f"/v1/users/{ALICE}", headers={"X-API-Key": "alice-key"})
        assert answer.status_code == 202, answer.text
        erasure = answer.json()["event_id"]
        [(partition, offset, logged_at)] = await until(
            settings, "SELECT log_partition, log_offset, logged_at FROM erasures WHERE event_id = %s", (erasure,),
            "the erasure applied")
        assert partition is not None and offset is not None and logged_at is not None
        await until(settings, "SELECT 1 FROM erasures WHERE event_id = %s", (dropped_c.event_id,),
                    "the conversation erasure applied")
    assert await rows(settings, "SELECT count(*) FROM messages") == [(0,)]  # nothing projected yet

    # After the erasure alice writes again (with sealing: under a new key), in a new conversation and in bob's.
    async with MemoryClient(settings) as client:
        await client.append_message(tenant_id=TENANT, conversation_id="conv-new", user_id=ALICE, seq=0,
                                    role="user", content=f"Back again {again}.")
        await client.append_message(tenant_id=TENANT, conversation_id="conv-b", user_id=ALICE, seq=4,
                                    role="user", content=f"Back in bob's {again}.")
    async with running_projectors(settings):
        for conversation, seq in (("conv-new", 0), ("conv-b", 4), ("conv-c", 3)):
            await until(settings, "SELECT 1 FROM messages WHERE conversation_id = %s AND seq = %s",
                        (conversation, seq), f"{conversation}:{seq} projected")
            await until(settings, "SELECT 1 FROM message_embeddings WHERE conversation_id = %s AND seq = %s",
                        (conversation, seq), f"{conversation}:{seq} embedded")
        assert await rows(settings, "SELECT conversation_id, seq, user_id FROM messages ORDER BY 1, 2") == [
            ("conv-b", 0, BOB), ("conv-b", 2, BOB), ("conv-b", 3, BOB), ("conv-b", 4, ALICE),
            ("conv-c", 3, BOB), ("conv-new", 0, ALICE)]
        assert await rows(settings, "SELECT conversation_id, seq FROM message_embeddings ORDER BY 1, 2") == [
            ("conv-b", 0), ("conv-b", 2), ("conv-b", 3), ("conv-b", 4), ("conv-c", 3), ("conv-new", 0)]
        assert await residue(settings, MARK) == {}
        # Her new words are memory: the log's row and the search index's (migration 0020).
        assert set((await residue(settings, again))) == {"messages", "memory_items", "memory_lexicon"}
        assert await rows(settings, "SELECT conversation_id, count(*), min(erasure_event_id), max(erasure_event_id)"
                                    " FROM erased_messages GROUP BY 1 ORDER BY 1") == [
            ("conv-a", 12, erasure, erasure), ("conv-b", 1, erasure, erasure),
            ("conv-c", 3, dropped_c.event_id, dropped_c.event_id)]
        # Bob's conversation: seq 1 is a seq the log had, not a gap; alice's has no row at all.
        assert await rows(settings, "SELECT conversation_id, user_id, last_seq, message_count, gap_count"
                                    " FROM conversations ORDER BY 1") == [
            ("conv-b", BOB, 4, 4, 0), ("conv-c", BOB, 3, 1, 0), ("conv-new", ALICE, 0, 1, 0)]
        assert await rows(settings, "SELECT count(*) FROM projection_anomalies") == [(0,)]


@pytest.mark.asyncio
async def test_another_tenant_s_messages_are_projected_while_an_erasure_waits_and_it_erases_only_before_itself(
        settings):
    """docs/security.md, "A flood of erasures and the other tenants": the erasure projector has a
    consumer of its own. While alice's erasure cannot be applied (a transaction of this test holds
    a table it locks), tenant B's message appended after it and alice's own message in a new
    conversation are projected; once applied, it erases her messages written before it only."""
    import psycopg

    from schemas import erasure_events as ee

    settings = settings.model_copy(update={"embedding": settings.embedding.model_copy(update={"provider": "stub"})})
    after = f"zqxafter{uuid.uuid4().hex[:8]}"
    async with running_projectors(settings), MemoryClient(settings) as client:
        for seq in range(3):
            await client.append_message(tenant_id=TENANT, conversation_id="conv-a", user_id=ALICE, seq=seq,
                                        role="user", content=f"Before {MARK} {seq}.")
        await until(settings, "SELECT 1 FROM messages WHERE conversation_id = 'conv-a' AND seq = 2", (), "projected")
        async with await psycopg.AsyncConnection.connect(
                settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public") as holder:
            await holder.execute("LOCK TABLE topic_compactions IN ROW EXCLUSIVE MODE")  # the erasure waits for it
            erasure = new_event(ee.USER_ERASED, ee.UserErased(erased_user_id=ALICE), tenant_id=TENANT,
                                conversation_id=ee.erasure_stream(ALICE), user_id=ALICE)
            await client.append(erasure)
            await client.append_message(tenant_id="tenant-b", conversation_id="conv-other", user_id="carol", seq=0,
                                        role="user", content="Tenant B goes on.")
            await client.append_message(tenant_id=TENANT, conversation_id="conv-new", user_id=ALICE, seq=0,
                                        role="user", content=f"Back again {after}.")
            await until(settings, "SELECT 1 FROM messages WHERE tenant_id = 'tenant-b' AND conversation_id ="
                                  " 'conv-other'", (), "tenant B's message projected while the erasure waits")
            await until(settings, "SELECT 1 FROM messages WHERE conversation_id = 'conv-new'", (),
                        "alice's message written after her erasure projected while it waits")
            assert await rows(settings, "SELECT count(*) FROM erasures") == [(0,)]  # still waiting: the lock
            await holder.rollback()
        await until(settings, "SELECT 1 FROM erasures WHERE event_id = %s", (erasure.event_id,), "the erasure applied")
    assert await residue(settings, MARK) == {}
    assert sorted(await rows(settings, "SELECT tenant_id, conversation_id, user_id FROM messages")) == sorted([
        (TENANT, "conv-new", ALICE), ("tenant-b", "conv-other", "carol")])
    assert await rows(settings, "SELECT user_id, last_seq FROM conversations WHERE conversation_id = 'conv-new'") \
        == [(ALICE, 0)]
    [(bound,)] = await rows(settings, "SELECT log_bound FROM erasures WHERE event_id = %s", (erasure.event_id,))
    assert bound and len(bound) == settings.kafka.partitions
