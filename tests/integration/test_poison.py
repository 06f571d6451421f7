"""No input can stop a consumer (issue 11): every poison input is refused at the doors
(HTTP, SDK) with nothing appended, and as a raw record it is dead-lettered with its reason
while the worker, a real process, goes on projecting every tenant's next messages."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC, datetime

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

import schemas.codec
from runtime.client import MemoryClient
from schemas import topic_events as te
from schemas.codec import encode, new_event
from schemas.envelope import InvalidEvent, conversation_key
from schemas.events import SummaryRequested, WindowTicked
from schemas.registry import SUMMARY_REQUESTED, WINDOW_TICKED
from streams.context import StreamContext
from streams.stages import Stage, StageRunner
from tests.integration.test_backbone import read_dead_letters
from tests.integration.conftest import running_api, running_projectors, scalar, wait_until, worker_process
from tests.support.poison import CASES, GOOD, message_value, raw_records

A = {"X-API-Key": "key-a"}
WORKER_ENV = {  # a chunk once more than 6 messages are unsummarized; the offline models answer
    "MEMORY_FACTS__SUMMARIZATION_THRESHOLD": "6",
    "MEMORY_FACTS__BATCH_SIZE": "4",
    "MEMORY_LLM__CACHE_ENABLED": "false",
}


async def _appended(settings) -> int:
    """Records in the conversation topic: the doors must leave it empty."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers)
    await consumer.start()
    try:
        topic = settings.kafka.conversation_topic
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or range(4)]
        return sum((await consumer.end_offsets(partitions)).values())
    finally:
        await consumer.stop()


@pytest.mark.asyncio
async def test_the_doors_refuse_every_poison_input_and_append_nothing(settings):
    async with running_api(settings) as base, MemoryClient(settings) as client, \
            httpx.AsyncClient(base_url=base, timeout=60) as http:
        for case in CASES:
            body = orjson.dumps({**GOOD, "seq": 1, **case.changes})
            response = await http.post("/v1/conversations/victim/messages", headers=A | {
                "content-type": "application/json"}, content=body)
            assert response.status_code == case.http_status, (case.name, response.text[:300])
            assert response.json()["detail"]["reason"] == case.http_reason, case.name
            assert response.json()["detail"]["message"]

            with pytest.raises(InvalidEvent) as refused:
                await client.append_message(tenant_id="tenant-a", conversation_id="victim",
                                            **({**GOOD, "seq": 1} | case.changes))
            assert refused.value.reason == case.sdk_reason, case.name

        # What only HTTP can carry: broken bodies, a NUL in the path, a body without a length.
        for body, reason in (
            (b'{"user_id": "u1", "seq": 1, "role": "user", "content": "a\\ud800b"}', "not_json"),  # lone surrogate
            (b'{"user_id": "u1", "seq": 1, "role": "user", "content": "\xff\xfe"}', "bad_utf8"),
            (b"[" * 5000 + b"]" * 5000, "not_json"),  # deeper than any parser should go
            (b'[{"user_id": "u1"}]', "not_an_object"),
            (orjson.dumps({**GOOD, "seq": 1, "metadata": "not an object"}), "invalid_field"),
            (orjson.dumps({**GOOD, "seq": 1, "surprise": True}), "invalid_field"),
            (orjson.dumps({"seq": 1, "role": "user", "content": "no user"}), "invalid_field"),
        ):
            response = await http.post("/v1/conversations/victim/messages", headers=A | {
                "content-type": "application/json"}, content=body)
            assert response.status_code == 422, (body[:60], response.text[:300])
            assert response.json()["detail"]["reason"] == reason, (body[:60], response.json())
            assert response.json()["detail"]["message"]
        response = await http.post("/v1/conversations/a%00b/messages", headers=A, json={**GOOD, "seq": 1})
        assert response.status_code == 422 and response.json()["detail"]["reason"] == "invalid_field"
        documented = (await http.get("/openapi.json")).json()["paths"]["/v1/conversations/{conversation_id}/messages"]
        assert {"202", "413", "422", "503"} <= set(documented["post"]["responses"])

        async def chunked():
            yield b'{"user_id": "u1", "seq": 1, "role": "user", "content": "'
            for _ in range(80):
                yield b"x" * 10_000
            yield b'"}'
        response = await http.post("/v1/conversations/victim/messages", headers=A | {
            "content-type": "application/json"}, content=chunked())
        assert response.status_code == 413 and response.json()["detail"]["reason"] == "oversized"

        assert await _appended(settings) == 0  # nothing reached the log

        good = await http.post("/v1/conversations/victim/messages", headers=A, json={**GOOD, "seq": 1})
        assert good.status_code == 202, good.text
        await client.append_message(tenant_id="tenant-a", conversation_id="victim", **{**GOOD, "seq": 2})
        assert await _appended(settings) == 2


async def _count(settings, sql: str, params=()) -> int:
    return int(await scalar(settings, sql, params) or 0)


@pytest.mark.asyncio
async def test_raw_poison_records_are_dead_lettered_and_the_worker_goes_on(settings):
    topic = settings.kafka.conversation_topic
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all",
                                max_request_size=2**21)
    async with worker_process(settings, extra_env=WORKER_ENV) as worker, MemoryClient(settings) as client:
        await producer.start()
        try:
            async def say(tenant: str, conversation: str, seqs: range) -> None:
                for seq in seqs:
                    await client.append_message(tenant_id=tenant, conversation_id=conversation, user_id="u1",
                                                seq=seq, role="user" if seq % 2 == 0 else "assistant",
                                                content=f"{conversation} message {seq} about gardening and tomatoes")

            await say("tenant-a", "victim", range(4))
            await wait_until(lambda: _has(settings, "SELECT count(*) FROM messages", 4), 120, "the first 4 messages")

            poison = raw_records("tenant-a", "victim", 4)
            sent = {}
            for name, reason, key, value in poison:
                meta = await (await producer.send(topic, value=value, key=key))
                sent[(meta.partition, meta.offset)] = (name, reason, value)
            await say("tenant-a", "victim", range(4, 12))
            await say("tenant-b", "bystander", range(12))

            # The next good messages of the same and of another tenant are projected, all the way.
            await wait_until(lambda: _has(settings, "SELECT count(*) FROM messages", 24), 180, "24 messages")
            for tenant, conversation in (("tenant-a", "victim"), ("tenant-b", "bystander")):
                where = (tenant, conversation)
                await wait_until(lambda: _has(settings, "SELECT count(*) FROM memory WHERE tenant_id = %s AND"
                                              " conversation_id = %s", 1, where), 180, f"a summary of {where}")
                await wait_until(lambda: _has(settings, "SELECT count(*) FROM conversation_chunks WHERE"
                                              " tenant_id = %s AND conversation_id = %s", 1, where), 180,
                                 f"a chunk of {where}")
                await wait_until(lambda: _has(settings, "SELECT count(*) FROM topic_messages WHERE"
                                              " tenant_id = %s AND conversation_id = %s", 1, where), 180,
                                 f"topic placements of {where}")
            letters = await read_dead_letters(settings, len(poison), 120)
            assert worker.returncode is None, open(worker.log_path).read()[-3000:]
        finally:
            await producer.stop()

    # Each poison record exactly once, with its reason, from the messages projector.
    by_source = {}
    for letter in letters:
        source = (letter["source"]["partition"], letter["source"]["offset"])
        assert source not in by_source, f"dead-lettered twice: {letter['reason']}"
        by_source[source] = letter
    assert set(by_source) == set(sent)
    for source, (name, reason, value) in sent.items():
        letter = by_source[source]
        assert (name, letter["reason"]) == (name, reason), letter["detail"]
        assert letter["stage"] == "projector.messages" and letter["source"]["topic"] == topic
        assert letter["original_size"] == len(value)
        assert letter["original_sha256"] == hashlib.sha256(value).hexdigest()
        if len(value) < 800_000:
            assert letter["original_bytes"] == value and not letter["original_truncated"]
        else:  # the ~1 MiB record: its letter is cut, with the reference to the whole
            assert letter["original_truncated"] and value.startswith(letter["original_bytes"])
    mismatch = next(by_source[s] for s, (name, _, _) in sent.items() if name == "key_mismatch")
    assert "tenant-a/victim" in mismatch["detail"] and "tenant-c/conv-c" in mismatch["detail"]

    # Tenant C's payload under tenant A's key reached nobody's state.
    for table in ("messages", "conversations", "memory", "conversation_chunks", "topic_messages"):
        assert await _count(settings, f"SELECT count(*) FROM {table} WHERE tenant_id = 'tenant-c'") == 0, table
    assert await _count(settings, "SELECT count(*) FROM messages WHERE conversation_id = 'victim'") == 12
    assert await _count(settings, "SELECT message_count FROM conversations WHERE conversation_id = 'victim'") == 12
    assert await _count(settings, "SELECT max(seq) FROM messages") == 11


async def _has(settings, sql: str, at_least: int, params=()) -> bool:
    return await _count(settings, sql, params) >= at_least


def _summary_requested(memory_id: int):
    return new_event(SUMMARY_REQUESTED, SummaryRequested(memory_id=memory_id, start_seq=0, end_seq=4,
                                                         prompt_version="p", model="m"),
                     tenant_id="tenant-a", conversation_id="net", user_id="u1", seq=4)


def _topic_created(topic_id: str, seq: int):
    return new_event(te.TOPIC_CREATED, te.TopicCreated(topic_id=topic_id, title=topic_id, seq=seq, importance=0.5,
                                                       created_at=datetime.now(UTC)),
                     tenant_id="tenant-a", conversation_id="net", user_id="u1", seq=4)


@pytest.mark.asyncio
async def test_a_record_the_database_refuses_is_dead_lettered_and_its_batch_applied(settings, monkeypatch):
    # Switch the storable rules off so that the database itself meets the poison: the
    # projector's own safety net (runtime/isolation.py) must hold without them.
    monkeypatch.setattr(schemas.codec, "check_storable", lambda *args: None)
    monkeypatch.setattr(schemas.codec, "check_integers", lambda *args: None)
    key = conversation_key("tenant-a", "net")
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
    await producer.start()
    try:
        values = [message_value("tenant-a", "net", seq) for seq in range(5)]
        values += [message_value("tenant-a", "net", 5, {"seq": 2**31}),
                   message_value("tenant-a", "net", 5, {"content": "a\u0000b"}),
                   message_value("tenant-a", "net", 5, {"metadata": {"k": "v\u0000"}})]
        values += [message_value("tenant-a", "net", seq) for seq in range(5, 10)]
        for value in values:  # one partition, one batch
            await (await producer.send(settings.kafka.conversation_topic, value=value, key=key))
        # Derived events of the pipelined projectors (memory, topics): one bad between good ones.
        derived = [_summary_requested(1), _summary_requested(2**31), _summary_requested(3),
                   _topic_created("t1", 0), _topic_created("t2", 2**31), _topic_created("t3", 2)]
        derived_offsets = []
        for event in derived:
            meta = await (await producer.send(settings.kafka.memory_topic(settings.generation), value=encode(event),
                                              key=key))
            derived_offsets.append(meta.offset)
    finally:
        await producer.stop()

    async with running_projectors(settings) as task:
        await wait_until(lambda: _has(settings, "SELECT count(*) FROM messages", 10), 120, "10 messages")
        await wait_until(lambda: _has(settings, "SELECT count(*) FROM memory", 2), 120, "2 summary requests")
        await wait_until(lambda: _has(settings, "SELECT count(*) FROM topics", 2), 120, "2 topics")
        for projector, end in (("messages", len(values)), ("memory", derived_offsets[-1] + 1),
                               ("topics", derived_offsets[-1] + 1)):
            await wait_until(lambda: _has(settings, "SELECT sum(next_offset) FROM projector_offsets WHERE"
                                          " projector = %s", end, (projector,)), 60, f"the {projector} offset at the end")
        # Read once every projector above has moved past its letters (they are sent first).
        letters = await read_dead_letters(settings, 5)
        assert not task.done()
    by_stage = {}
    for letter in letters:
        by_stage.setdefault(letter["stage"], []).append(letter["source"]["offset"])
    # The message index (message search) meets the same poisoned messages and may refuse them
    # too, at its own pace: only ever those, never a good one.
    assert set(by_stage.pop("projector.message_index", [])) <= {5, 6, 7}
    assert {stage: sorted(offsets) for stage, offsets in by_stage.items()} == {
        "projector.messages": [5, 6, 7], "projector.memory": [derived_offsets[1]],
        "projector.topics": [derived_offsets[4]],
    }
    assert await _count(settings, "SELECT count(*) FROM memory WHERE memory_id IN (1, 3)") == 2
    assert await _count(settings, "SELECT count(*) FROM topics WHERE topic_id IN ('t1', 't3')") == 2
    assert {letter["reason"] for letter in letters} == {"apply_failed"}
    details = " ".join(letter["detail"] for letter in letters)
    assert "NumericValueOutOfRange" in details and ("NUL" in details or "0x00" in details), details
    print(details)
    assert await _count(settings, "SELECT message_count FROM conversations WHERE conversation_id = 'net'") == 10
    assert await _count(settings, "SELECT gap_count FROM conversations WHERE conversation_id = 'net'") == 0
    assert await _count(settings, "SELECT count(DISTINCT seq) FROM messages") == 10


@pytest.mark.asyncio
async def test_a_stage_dead_letters_requests_it_cannot_answer_and_skips_wrongly_keyed_ones(settings):
    topic = settings.kafka.memory_topic(settings.generation)
    requests = {i: new_event(WINDOW_TICKED, WindowTicked(), tenant_id="t", conversation_id="c1", user_id="u",
                             event_id=f"req-{i}") for i in range(8)}
    keys = {i: requests[i].key for i in requests} | {4: b"t/somebody-else", 5: None}
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
    await producer.start()
    try:
        sent = {i: await (await producer.send(topic, key=keys[i], value=encode(r))) for i, r in requests.items()}
        await (await producer.send(topic, key=requests[0].key, value=b"\xff not even json"))
    finally:
        await producer.stop()

    handled: list[str] = []

    async def handle(events):
        out = []
        for event in events:
            handled.append(event.envelope.event_id)
            if event.envelope.event_id == "req-1":  # an answer no record can hold
                out.append(new_event(te.TOPIC_TICKED, te.TopicTicked(reason="x" * 1_200_000), tenant_id="t",
                                     conversation_id="c1", user_id="u"))
            elif event.envelope.event_id == "req-2":
                raise ValueError("this request cannot be answered")
            elif event.envelope.event_id == "req-6":  # a model's NUL: dropped, the answer goes out
                out.append(new_event(te.TOPIC_TICKED, te.TopicTicked(reason="nul\u0000here"), tenant_id="t",
                                     conversation_id="c1", user_id="u", event_id="answer-req-6"))
            elif event.envelope.event_id == "req-7":  # an answer no consumer could store
                out.append(new_event(te.TOPIC_MESSAGE_UNASSIGNED, te.TopicMessageUnassigned(seq=2**31, reason="r"),
                                     tenant_id="t", conversation_id="c1", user_id="u", seq=1))
            else:
                out.append(new_event(te.TOPIC_TICKED, te.TopicTicked(), tenant_id="t", conversation_id="c1",
                                     user_id="u", event_id=f"answer-{event.envelope.event_id}"))
        return out

    ctx = StreamContext(settings, None, None, None)
    stage = Stage("poisoned", frozenset({WINDOW_TICKED}), handle, max_attempts=2, retry_backoff_s=0.05)
    runner = StageRunner(stage, topic=topic, group_id=f"{settings.kafka.topic_prefix}.stage.poisoned",
                         bootstrap_servers=settings.kafka.bootstrap_servers, decode_if=ctx.decode_if,
                         dead_letter_topic=settings.kafka.dead_letter_topic)
    task = asyncio.create_task(runner.run())
    try:
        letters = await read_dead_letters(settings, 3)
        assert not task.done(), task.exception() if task.done() else None
        answered = {"answer-req-0", "answer-req-3", "answer-req-6"}
        await wait_until(lambda: _answered(settings, topic, answered), 60, "the other requests answered")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert sorted(set(handled)) == ["req-0", "req-1", "req-2", "req-3", "req-6", "req-7"]  # not the wrongly keyed
    by_offset = {letter["source"]["offset"]: letter for letter in letters}
    assert by_offset[sent[1].offset]["reason"] == "result_too_large"
    assert by_offset[sent[2].offset]["reason"] == "apply_failed"
    assert "cannot be answered" in by_offset[sent[2].offset]["detail"]
    assert by_offset[sent[7].offset]["reason"] == "result_invalid" and "out_of_range" in by_offset[sent[7].offset][
        "detail"]
    assert {letter["stage"] for letter in letters} == {"stage.poisoned"}


async def _answered(settings, topic: str, wanted: set[str]) -> bool:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=settings.kafka.bootstrap_servers,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        found = set()
        for records in (await consumer.getmany(timeout_ms=1000)).values():
            found |= {r.value for r in records if r.value and b"answer-req" in r.value}
        assert not any(b"\\u0000" in value for value in found)  # every answer a consumer can store
        return all(any(w.encode() in f for f in found) for w in wanted)
    finally:
        await consumer.stop()
