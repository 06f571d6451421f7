"""Killing the projector process mid-stream (SIGKILL) and restarting it loses and duplicates nothing."""

from __future__ import annotations

import asyncio

import pytest

from runtime.client import MemoryClient
from tests.integration.conftest import scalar, wait_until, worker_process

TOTAL = 1000


async def produce_slowly(settings) -> dict[tuple[str, int], str]:
    sent = {}
    async with MemoryClient(settings) as client:
        for i in range(TOTAL):
            conversation, seq = f"conv-{i % 50}", i // 50
            envelope = client.message_event(
                tenant_id="tenant-a", conversation_id=conversation, user_id="u", seq=seq,
                role="user" if seq % 2 == 0 else "assistant", content=f"{conversation} #{seq}",
            )
            await client.append(envelope)
            sent[(conversation, seq)] = envelope.event_id
            if i % 25 == 0:
                await asyncio.sleep(0.05)
    return sent


@pytest.mark.asyncio
async def test_sigkill_and_restart_mid_stream(settings):
    producing = asyncio.create_task(produce_slowly(settings))
    kills = 0
    for threshold in (150, 500):
        async with worker_process(settings, "--projectors-only") as worker:
            await wait_until(
                lambda: _at_least(settings, threshold), 90, f"{threshold} projected rows (log: {worker.log_path})"
            )
            worker.kill()  # no shutdown, no flush: the open transaction is simply gone
            await worker.wait()
            kills += 1
    sent = await producing
    async with worker_process(settings, "--projectors-only") as worker:
        await wait_until(lambda: _exactly(settings, TOTAL), 90, f"all rows (log: {worker.log_path})")
        await asyncio.sleep(1.0)  # give a wrongly re-applied batch the chance to show up

    assert kills == 2
    assert await scalar(settings, "SELECT count(*) FROM messages") == TOTAL
    assert await scalar(settings, "SELECT count(DISTINCT (conversation_id, seq, event_id)) FROM messages") == TOTAL
    assert await scalar(settings, "SELECT sum(message_count) FROM conversations") == TOTAL
    assert await scalar(settings, "SELECT count(*) FROM projection_anomalies") == 0
    rows = await scalar(
        settings,
        "SELECT count(*) FROM messages m JOIN unnest(%s::text[], %s::int[], %s::text[]) AS s(c, q, e)"
        " ON m.conversation_id = s.c AND m.seq = s.q AND m.event_id = s.e",
        ([k[0] for k in sent], [k[1] for k in sent], list(sent.values())),
    )
    assert rows == TOTAL


async def _at_least(settings, n: int) -> bool:
    return (await scalar(settings, "SELECT count(*) FROM messages")) >= n


async def _exactly(settings, n: int) -> bool:
    return (await scalar(settings, "SELECT count(*) FROM messages")) == n
