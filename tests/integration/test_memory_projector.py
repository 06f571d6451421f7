"""The memory projector agrees with the fold on re-issued requests (found by the fault matrix)."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer

from schemas.codec import encode, new_event
from schemas.events import SummaryCompleted, SummaryFailed, SummaryRequested
from schemas.registry import SUMMARY_COMPLETED, SUMMARY_FAILED, SUMMARY_REQUESTED
from tests.integration.conftest import running_projectors, scalar, wait_until

COMMON = dict(tenant_id="tenant-a", conversation_id="reissued", user_id="u1", seq=5)
WINDOW = dict(memory_id=1, start_seq=0, end_seq=5, prompt_version="summary-v1", model="m")


REQUESTED_1 = new_event(SUMMARY_REQUESTED, SummaryRequested(**WINDOW, attempt=1), **COMMON)
REQUESTED_2 = new_event(SUMMARY_REQUESTED, SummaryRequested(**WINDOW, attempt=2), **COMMON)
FAILED_1 = new_event(SUMMARY_FAILED, SummaryFailed(**WINDOW, attempt=1, error="malformed"), **COMMON)
COMPLETED_2 = new_event(SUMMARY_COMPLETED, SummaryCompleted(**WINDOW, attempt=2, text="the summary",
                                                            generation_time_ms=5), **COMMON)


async def send_memory_events(settings, events) -> None:
    """Envelopes onto the generation's memory topic, each keyed by its conversation, acknowledged."""
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, enable_idempotence=True)
    await producer.start()
    try:
        for event in events:
            await producer.send_and_wait(settings.kafka.memory_topic(settings.generation), key=event.key,
                                         value=encode(event))
    finally:
        await producer.stop()


@pytest.mark.asyncio
@pytest.mark.parametrize("events", [[REQUESTED_1, REQUESTED_2, FAILED_1, COMPLETED_2],
                                    # The fold re-issued before attempt 1's failure reached it.
                                    [REQUESTED_1, FAILED_1, REQUESTED_2, COMPLETED_2]])
async def test_a_late_failure_of_a_replaced_attempt_does_not_fail_the_row(settings, events):
    """Attempt 1 times out, the fold re-issues attempt 2, attempt 1 fails and attempt 2
    completes: the fold keeps attempt 2's summary (and chains on it), so the row must end
    completed, not failed, in whichever order the re-issue and the failure reach the log."""
    await send_memory_events(settings, events)
    async with running_projectors(settings):
        async def settled() -> bool:
            status = await scalar(settings, "SELECT status FROM memory WHERE conversation_id = 'reissued'")
            return status in ("completed", "failed")

        await wait_until(settled, 60, "the memory row to settle")
    assert await scalar(settings, "SELECT concat_ws(':', status, memory_text, attempt) FROM memory"
                                  " WHERE conversation_id = 'reissued'") == "completed:the summary:2"
