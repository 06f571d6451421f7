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
