"""The processor's batch (streams/take.py): what is buffered is taken, without a timer."""

import asyncio

from streams.take import settle


def test_settle_waits_while_the_buffer_grows_and_stops_once_it_is_quiet():
    buffer: list[int] = []

    async def reader():  # a record every other pass of the loop, five of them
        for i in range(5):
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            buffer.append(i)

    async def main():
        task = asyncio.create_task(reader())
        await settle(buffer.__len__, lambda: False, quiet_passes=3)
        taken = len(buffer)
        await task
        return taken

    assert asyncio.run(main()) == 5  # quiet 1 pass between records: not yet settled


def test_settle_stops_at_a_full_buffer_and_after_quiet_passes():
    buffer: list[int] = []

    async def reader():
        for i in range(100):
            await asyncio.sleep(0)
            buffer.append(i)

    async def full():
        task = asyncio.create_task(reader())
        await settle(buffer.__len__, lambda: len(buffer) >= 10)
        taken = len(buffer)
        task.cancel()
        return taken

    assert asyncio.run(full()) == 10

    async def nothing_comes():
        await settle(lambda: 0, lambda: False)  # returns: no record, no wait

    asyncio.run(nothing_comes())


def test_take_ready_hands_over_a_burst_in_batches_and_a_lone_record_without_a_timer():
    """On faust's own stream (an agent's test context, in-memory channel): a burst comes in batches
    of at most `max_`, every record once and in order; a lone record later is handed over by itself
    (faust's `take_events` without its timer would hold it until the buffer is full)."""
    import faust

    from streams.take import take_ready

    app = faust.App("test-take-ready", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
    batches: list[list[int]] = []

    @app.agent()
    async def agent(stream):
        async for batch in take_ready(stream, 3):
            batches.append([event.value for event in batch])
            await asyncio.sleep(0)  # the reader buffers the next records meanwhile
            yield len(batch)

    async def until(condition) -> None:
        for _ in range(2000):  # polled, not timed: at most ~20 s
            if condition():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"not reached; batches {batches}")

    async def main() -> None:
        async with agent.test_context() as tested:
            await asyncio.gather(*(tested.put(i) for i in range(7)))
            await until(lambda: sum(map(len, batches)) == 7)
            assert [value for batch in batches for value in batch] == list(range(7))
            assert all(1 <= len(batch) <= 3 for batch in batches)
            assert len(batches[0]) == 3  # the burst's first records taken together
            await tested.put(99)
            await until(lambda: batches[-1] == [99])

    asyncio.run(main())
