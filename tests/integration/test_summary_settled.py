"""The summary stage answers a request for a window the memory table already settled with the
stored result, without an LLM call: a fold that re-issues a request because it never saw the
result (a new owner of the partition after a crash) gets it, instead of silence until it gives up."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer

from projections.db import make_pool
from schemas.codec import decode, encode, new_event
from schemas.events import SummaryCompleted, SummaryFailed, SummaryRequested
from schemas.registry import SUMMARY_COMPLETED, SUMMARY_FAILED, SUMMARY_REQUESTED
from streams.window.summarize import SummaryStage
from tests.integration.conftest import running_projectors, scalar, wait_until

COMMON = dict(tenant_id="tenant-a", user_id="u1", seq=5)
WINDOW = dict(memory_id=1, start_seq=0, end_seq=5, prompt_version="summary-v1", model="m")


class NoLlm:
    """The summarizer must not be asked: the answer is in the memory table."""

    model = "m"
    prompt_version = "summary-v1"
    calls = 0

    async def summarize_window(self, **_):
        self.calls += 1
        raise AssertionError("a settled window went to the LLM again")


async def project(settings, events) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, enable_idempotence=True)
    await producer.start()
    try:
        for event in events:
            await producer.send_and_wait(settings.kafka.memory_topic(settings.generation), key=event.key,
                                         value=encode(event))
    finally:
        await producer.stop()
    async with running_projectors(settings):
        async def settled() -> bool:
            return await scalar(settings, "SELECT count(*) FROM memory WHERE status <> 'processing'") == len(
                {event.conversation_id for event in events})

        await wait_until(settled, 60, "the memory rows to settle")


@pytest.mark.asyncio
async def test_a_reissued_request_for_a_settled_window_gets_the_stored_result(settings):
    done = dict(COMMON, conversation_id="done")
    failed = dict(COMMON, conversation_id="failed")
    await project(settings, [
        new_event(SUMMARY_REQUESTED, SummaryRequested(**WINDOW, attempt=1), **done),
        new_event(SUMMARY_COMPLETED, SummaryCompleted(**WINDOW, attempt=1, text="the summary", generation_time_ms=7,
                                                      source_event_ids=["e0", "e1"]), **done),
        new_event(SUMMARY_REQUESTED, SummaryRequested(**WINDOW, attempt=2), **failed),
        new_event(SUMMARY_FAILED, SummaryFailed(**WINDOW, attempt=2, error="malformed"), **failed),
    ])
    llm = NoLlm()
    async with make_pool(settings, schema=settings.pg_schema) as pool:
        stage = SummaryStage(llm, pool)

        async def ask(conversation: dict, attempt: int):
            request = new_event(SUMMARY_REQUESTED, SummaryRequested(**WINDOW, attempt=attempt), **conversation)
            answer = await stage.handle(decode(encode(request), key=request.key))
            return None if answer is None else decode(encode(answer), key=request.key)  # checked as a fold would

        again = await ask(done, 2)  # re-issued by a fold that never saw attempt 1's result
        assert again.type == SUMMARY_COMPLETED and again.envelope.conversation_id == "done"
        assert (again.payload.memory_id, again.payload.attempt, again.payload.text) == (1, 1, "the summary")
        assert (again.payload.generation_time_ms, again.payload.source_event_ids) == (7, ["e0", "e1"])
        assert (await ask(done, 1)).type == SUMMARY_COMPLETED  # redelivered: the same answer

        failure = await ask(failed, 2)
        assert failure.type == SUMMARY_FAILED
        assert (failure.payload.attempt, failure.payload.error) == (2, "malformed")
        assert await ask(failed, 1) is None  # an older attempt than the row's: the newer one answered
    assert llm.calls == 0
