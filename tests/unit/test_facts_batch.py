"""The batch replay's chunk fold (streams/facts/batch.py): folding the whole history first and
answering the requests in waves must ask for the ranges the stream agent asks for when the
answers come back interleaved with the messages, and end in the same state."""

from __future__ import annotations

import random

import pytest

from schemas import facts_events as fe
from schemas.codec import Event, decode, encode, new_event
from schemas.events import MessageAppended
from streams.facts.agent import fold_event
from streams.facts.batch import ChunkHistoryFold, as_event
from domain.facts.chunking import ChunkConfig, ChunkState

CFG = ChunkConfig(summarization_threshold=6, batch_size=4)
NOW = 1_000.0


def message(conversation: str, seq: int) -> Event:
    envelope = new_event("message.appended", MessageAppended(role="user", content=f"m{seq}"), tenant_id="t",
                         conversation_id=conversation, user_id="u", seq=seq, event_id=f"{conversation}-{seq}")
    return decode(encode(envelope))


def answer(request: Event, fail: bool) -> Event:
    """The stage's result, reduced to what the fold reads."""
    r, e = request.payload, request.envelope
    if fail:
        payload = fe.ChunkFailed(start_seq=r.start_seq, end_seq_exclusive=r.end_seq_exclusive, attempt=r.attempt,
                                 error="boom", retryable=True, prompt_version="p", model="m")
        return as_event(new_event(fe.CHUNK_FAILED, payload, tenant_id="t", conversation_id=e.conversation_id,
                                  user_id="u", seq=e.seq))
    payload = fe.ChunkRecorded.model_construct(start_seq=r.start_seq, end_seq_exclusive=r.end_seq_exclusive)
    envelope = new_event(fe.CHUNK_SKIPPED, fe.ChunkSkipped(start_seq=r.start_seq, end_seq_exclusive=r.end_seq_exclusive,
                                                           attempts=1, error="-"),
                         tenant_id="t", conversation_id=e.conversation_id, user_id="u", seq=r.end_seq_exclusive - 1)
    return Event(envelope.model_copy(update={"type": fe.CHUNK_RECORDED}), payload)


def ranges(requests: list) -> list[tuple[int, int, int]]:
    return [(r.payload["start_seq"], r.payload["end_seq_exclusive"], r.payload["attempt"])
            for r in requests if r.type == fe.CHUNK_REQUESTED]


def stream(lengths: dict[str, int], failing: set, rng: random.Random) -> tuple[dict, dict]:
    """The agent: messages in order per conversation, answers folded whenever they come back."""
    states = {c: ChunkState() for c in lengths}
    asked: dict[str, list] = {c: [] for c in lengths}
    in_flight: list[Event] = []
    todo = {c: 0 for c in lengths}
    while any(todo[c] < n for c, n in lengths.items()) or in_flight:
        if in_flight and (rng.random() < 0.3 or all(todo[c] >= n for c, n in lengths.items())):
            request = in_flight.pop(rng.randrange(len(in_flight)))
            c = request.envelope.conversation_id
            key = (c, request.payload.start_seq)
            event = answer(request, key in failing)
        else:
            c = rng.choice([c for c, n in lengths.items() if todo[c] < n])
            event, todo[c] = message(c, todo[c]), todo[c] + 1
        states[c], out = fold_event(CFG, states[c], event, NOW, "p", "m")
        asked[c] += out
        in_flight += [as_event(e) for e in out if e.type == fe.CHUNK_REQUESTED]
    return states, asked


def batch(lengths: dict[str, int], failing: set) -> tuple[dict, dict]:
    fold = ChunkHistoryFold(CFG, NOW, "p", "m")
    asked: dict[str, list] = {c: [] for c in lengths}
    for c, n in lengths.items():
        for seq in range(n):
            asked[c] += fold.add(c.encode(), message(c, seq))
    while wave := fold.wave():
        for conversation in wave:
            c = conversation.asked.envelope.conversation_id
            result = answer(conversation.asked, (c, conversation.asked.payload.start_seq) in failing)
            asked[c] += fold.answer(conversation, result)
    return {c.decode(): conv.state for c, conv in fold.conversations.items()}, asked


@pytest.mark.parametrize("seed", range(40))
def test_the_batch_asks_for_the_ranges_the_stream_asks_for_and_ends_in_its_state(seed):
    rng = random.Random(seed)
    lengths = {f"c{i}": rng.randrange(0, 40) for i in range(4)}
    failing = {(c, 4 * rng.randrange(0, 8)) for c in lengths if rng.random() < 0.3}  # a range that fails once
    stream_states, stream_asked = stream(lengths, failing, rng)
    batch_states, batch_asked = batch(lengths, failing)
    for c in lengths:
        assert ranges(batch_asked[c]) == ranges(stream_asked[c]), c
        if lengths[c] == 0:
            continue
        s, b = stream_states[c], batch_states[c]
        # A failed range backs off in both (retried by the live agents' timer afterwards).
        assert (b.last_summarized_end, b.completions, b.failures, b.failed_attempts, b.in_flight is None) == (
            s.last_summarized_end, s.completions, s.failures, s.failed_attempts, s.in_flight is None), c


def test_the_waves_cover_a_long_history_one_range_per_wave():
    fold = ChunkHistoryFold(CFG, NOW, "p", "m")
    for seq in range(30):
        fold.add(b"c", message("c", seq))
    waves = 0
    while wave := fold.wave():
        waves += 1
        (conversation,) = wave
        fold.answer(conversation, answer(conversation.asked, False))
    # more than 6 unsummarized -> 4 at a time: [0,4) ... [20,24), leaving 6
    assert waves == 6 and fold.conversations[b"c"].state.last_summarized_end == 24
    assert [c.key for c in fold.changed()] == [b"c"]
