"""The processor's batches: wait for a first record without a timer, then take what is buffered.

faust's `Stream.take_events(max, within)` wakes every `within` seconds whether or not a record
came (with 50 ms, 20 wake-ups a second of an idle worker, docs/scaling.md) and holds a lone record
back until its timer fires. `take_ready` waits for the first record with no timer at all; once one
is there it lets the stream's background reader move what faust has already fetched into the
buffer (it yields to the event loop until a pass adds nothing, or the buffer holds `max_`) and
hands that over as one batch. So a burst's records still reach the slices together (the embedding
queue gets the batch's user messages at once), an idle worker does not wake, and a lone record
is folded at once.

The rest is faust's own `take_events` (pinned in pyproject: `_enable_passive`, `_active_agens`):
the buffer is filled by a processor on the stream's passive reader, which waits while a batch
is handed over; the batch's events are acknowledged once the caller asks for the next batch.

Rebalances: as with `take_events`, every event of the batch is acknowledged through the
consumer's `ack`, which refuses a record not applied in turn (streams/kafka_transport.py
`in_turn`: fetched before the rebalance under way or the last one). The records a rebalance cut
off (the processor stops at the first record not in turn) stay unacknowledged and the seek that
ends the rebalance delivers them again. Nothing here waits on a rebalance: the batch is handed
over at once, and while a batch is folded the reader holds at most the one record it has in hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

# Passes of the event loop without a new record before the buffered records count as taken: the
# reader moves one queued record per pass or two (a queue get and a processor call).
QUIET_PASSES = 2


async def settle(size: Callable[[], int], full: Callable[[], bool], quiet_passes: int = QUIET_PASSES) -> None:
    """Yield to the event loop until `size()` stopped growing for `quiet_passes` passes or `full()`."""
    quiet, seen = 0, size()
    while quiet < quiet_passes and not full():
        await asyncio.sleep(0)
        now = size()
        quiet, seen = (quiet + 1, seen) if now == seen else (0, now)


def take_ready(stream: Any, max_: int) -> AsyncIterator[list]:
    """Batches of faust events from `stream` (an agent's stream): at least one, at most `max_`."""
    agen = _take_ready(stream, max_)
    stream._active_agens.add(agen)  # noqa: SLF001 - Stream.on_stop closes it (as faust's own take does)
    return agen


async def _take_ready(stream: Any, max_: int) -> AsyncIterator[list]:
    events: list = []
    ready = asyncio.Event()  # a record is in the buffer
    room = asyncio.Event()  # the batch was handed over: the reader may add again
    room.set()
    enable_acks = stream.enable_acks

    async def add_to_buffer(value):
        try:
            while not room.is_set():  # a batch is being folded, or the buffer is full
                await stream.wait(room)
                if stream.should_stop:
                    return value
            event = stream.current_event
            if event is None:
                raise RuntimeError("take buffer found current_event is None")
            events.append(event)
            ready.set()
            if len(events) >= max_:
                room.clear()
        except asyncio.CancelledError:  # pragma: no cover
            raise
        except Exception as exc:  # noqa: BLE001 - as faust's take: the stream crashes with it
            stream.log.exception("Error adding to take buffer: %r", exc)
            await stream.crash(exc)
        return value

    stream.enable_acks = False  # acknowledged here, once the batch is folded
    stream.add_processor(add_to_buffer)
    stream._enable_passive(aiter(stream.channel))  # noqa: SLF001 - faust's take does the same
    try:
        while not stream.should_stop:
            if await stream.wait_for_stopped(ready):
                break
            await settle(events.__len__, lambda: len(events) >= max_)
            room.clear()  # nothing is added while the batch is handed over
            batch = list(events)
            try:
                yield batch
            finally:
                events.clear()
                ready.clear()
                for event in batch:
                    await stream.ack(event)
                room.set()
    finally:
        stream.enable_acks = enable_acks
        stream._processors.remove(add_to_buffer)  # noqa: SLF001
