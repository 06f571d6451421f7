"""The extraction stage's turns: a conversation's requests one after another in arrival order
(the ranges the chunk fold asks for ahead see the facts of the range before), conversations side
by side up to the limit."""

from __future__ import annotations

import asyncio

from streams.facts.stage import Turns


def test_a_conversations_requests_run_one_at_a_time_in_the_order_they_came():
    async def scenario():
        turns, log = Turns(limit=8), []

        async def request(key, name, delay):
            async with turns.turn(key):
                log.append(("start", name))
                await asyncio.sleep(delay)
                log.append(("end", name))

        # the first takes longest: without turns the others would finish before it
        await asyncio.gather(request(("t", "a"), "a1", 0.03), request(("t", "a"), "a2", 0.0),
                             request(("t", "a"), "a3", 0.01))
        return log, turns

    log, turns = asyncio.run(scenario())
    assert log == [("start", "a1"), ("end", "a1"), ("start", "a2"), ("end", "a2"), ("start", "a3"), ("end", "a3")]
    assert turns._locks == {} and turns._users == {}  # nothing kept for a conversation with no request


def test_conversations_go_side_by_side_up_to_the_limit():
    async def scenario():
        turns, running, most = Turns(limit=2), 0, 0

        async def request(key):
            nonlocal running, most
            async with turns.turn(key):
                running += 1
                most = max(most, running)
                await asyncio.sleep(0.01)
                running -= 1

        await asyncio.gather(*(request(("t", name)) for name in "abcde"))
        return most

    assert asyncio.run(scenario()) == 2
