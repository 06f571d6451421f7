"""The chunk fold's state with sealing on, on the real stack (docs/security.md, "Fold state"):
a failed chunk request whose error quotes the model's output (and so the user's words) is kept
in the fold's state; its changelog holds that text sealed, the service opens it, and once the
user's key is destroyed it reads "[erased]" while the fold keeps its position."""

from __future__ import annotations

import pathlib
import uuid

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient

from core import privacy
from runtime.client import MemoryClient
from schemas.sealed import ERASED_CONTENT
from streams.facts import state_codec
from tests.integration.conftest import sealed_variant, wait_until, worker_process
from tests.integration.test_facts_capture import SMALL_CHUNKS
from tests.support.fake_openai import FakeOpenAI, RecordedRequest
from tests.support.topic_reader import topic_residue

TENANT = f"tenant-f{uuid.uuid4().hex[:8]}"
ALICE = f"alice-{uuid.uuid4().hex[:8]}"
MARK = f"zqxfold{uuid.uuid4().hex[:8]}"


def model(request: RecordedRequest) -> dict:
    """The gate says yes; the extraction's importance quotes the conversation: every chunk
    request fails with an error holding the marker."""
    if "worth_remembering" in request.user_content:
        return {"worth_remembering": True, "reason": "scripted"}
    return {"summary": "A talk.", "facts": [{"category": "other", "content": "A fact.", "importance": f"very {MARK}"}]}


async def changelog(settings) -> list[tuple[bytes, bytes]]:
    """(key, chunk fold state) of every record of the conversation processor's changelog topic."""
    from streams.slice import unpack

    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    await admin.start()
    try:
        names = [t for t in await admin.list_topics()
                 if t.startswith(settings.kafka.topic_prefix + ".") and "conversation-state-changelog" in t]
    finally:
        await admin.close()
    if not names:
        return []
    consumer = AIOKafkaConsumer(*names, bootstrap_servers=settings.kafka.bootstrap_servers,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    out = []
    try:
        batches = await consumer.getmany(timeout_ms=3000)
        while batches:
            out += [(r.key, unpack(r.value)["facts"]) for records in batches.values() for r in records
                    if r.value and "facts" in unpack(r.value)]
            batches = await consumer.getmany(timeout_ms=1000)
    finally:
        await consumer.stop()
    return out


@pytest.mark.asyncio
async def test_the_chunk_folds_failure_text_is_sealed_in_its_changelog_and_erased_with_the_key(settings):
    settings = sealed_variant(settings, True)
    with FakeOpenAI(json_responder=model) as fake:
        env = fake.env(llm=True, embeddings=True) | SMALL_CHUNKS | {"MEMORY_FACTS__MAX_ATTEMPTS": "5"}
        async with worker_process(settings, extra_env=env) as worker:
            async with MemoryClient(settings) as client:
                for seq in range(8):
                    await client.append_message(tenant_id=TENANT, conversation_id="conv-a", user_id=ALICE,
                                                subject_id="home", seq=seq, role="user" if seq % 2 == 0 else "assistant",
                                                content=f"My word {seq} is {MARK}.")

            async def failure_kept() -> bool:
                return any(b'"last_error":null' not in v for _, v in await changelog(settings))
            await wait_until(failure_kept, 120, f"a failed chunk request kept in the fold's state ({worker.log_path})")
            records = await changelog(settings)

    # Nothing in clear on any topic of the deployment (the changelogs included) ...
    assert await topic_residue(settings, MARK, raw=True) == {}
    state_dir = pathlib.Path(f"/tmp/memory-agent-test/{settings.generation}")
    assert not [p for p in state_dir.rglob("*") if p.is_file() and MARK.encode() in p.read_bytes()]
    # ... while the service opens the error (with the rest of the state clear beside it).
    failed = [(k, v) for k, v in records if b'"last_error":null' not in v]
    assert all(b'"last_error":{"_sealed"' in v for _, v in failed), failed
    states = [state_codec.loads(k, v) for k, v in failed]
    assert all(MARK in s.last_error and "importance" in s.last_error for s in states), states
    # The user's key destroyed: the text reads erased, the fold's position is kept.
    assert privacy.key_store(settings).destroy(TENANT, ALICE)
    erased = [state_codec.loads(k, v) for k, v in failed]
    assert all(s.last_error == ERASED_CONTENT for s in erased), erased
    assert [s.last_seq for s in erased] == [s.last_seq for s in states]
