"""The batch replay's window fold (streams/window/batch.py): folding the whole history first
and answering afterwards must leave what the stream agent leaves when the answers come back
interleaved with the messages."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from core.llm.port import SummaryOutput
from schemas.codec import Event, decode, encode, new_event
from schemas.events import MessageAppended
from schemas.registry import REGISTRY
from streams.window.agent import fold_event
from streams.window.batch import HistoryFold
from domain.window.fold import WindowConfig, WindowState
from streams.window.summarize import completed_event, failed_event

CFG = WindowConfig(replay_stride=4)
NOW = 1_000.0
UNTIL = datetime.now(UTC) + timedelta(days=1)  # every message below is history


def message(conversation: str, seq: int, at: datetime | None = None) -> Event:
    envelope = new_event(
        "message.appended", MessageAppended(role="user" if seq % 2 == 0 else "assistant", content=f"m{seq}"),
        tenant_id="t", conversation_id=conversation, user_id="u", seq=seq, event_id=f"{conversation}-{seq}",
        occurred_at=at,
    )
    return decode(encode(envelope))


def as_event(envelope) -> Event:
    return Event(envelope, REGISTRY[envelope.type].payload(**envelope.payload))


def answer(request: Event) -> Event:
    r = request.payload
    return as_event(completed_event(request.envelope, r, SummaryOutput(f"summary {r.memory_id}", "m", "p"), 0.0, []))


def streamed(log: list[Event], seed: int) -> tuple[WindowState, list[tuple]]:
    """The stream agent: answers arrive on the same partition at random later points."""
    rng = random.Random(seed)
    state, waiting, asked = WindowState(), [], []
    for event in log:
        state, outgoing = fold_event(CFG, state, event, NOW, UNTIL)
        for envelope in outgoing:
            request = as_event(envelope)
            asked.append(_window(request))
            waiting.append(request)
        while waiting and rng.random() < 0.4:
            state, _ = fold_event(CFG, state, answer(waiting.pop(0)), NOW, UNTIL)
    for request in waiting:
        state, _ = fold_event(CFG, state, answer(request), NOW, UNTIL)
    return state, asked


def batched(log: list[Event]) -> tuple[WindowState, list[tuple], HistoryFold]:
    fold = HistoryFold(CFG, NOW, UNTIL)
    for event in log:
        fold.add(b"t/c", event)
    conversation = fold.conversations[b"t/c"]
    for index in range(fold.waves):
        for pending in fold.wave(index):
            assert pending.error is None, pending.error
            conversation.results[pending.request.payload.memory_id] = answer(pending.request)
    return fold.finish(conversation), [_window(r) for r in conversation.requests], fold


def _window(request: Event) -> tuple:
    r = request.payload
    return (r.memory_id, r.start_seq, r.end_seq, r.base_memory_id, r.base_end_seq)


@pytest.mark.parametrize("seed", range(8))
def test_folding_first_and_answering_later_asks_for_the_same_windows_and_ends_in_the_same_state(seed):
    log = [message("c", seq) for seq in range(40)]
    stream_state, stream_asked = streamed(log, seed)
    batch_state, batch_asked, _ = batched(log)
    assert batch_asked == stream_asked
    assert len(batch_asked) == 9
    assert batch_state == stream_state
    assert batch_state.in_flight is None and batch_state.latest_completed == (9, 24, 37)


def test_a_wave_asks_with_the_previous_answer_and_only_the_new_messages():
    _, _, fold = batched([message("c", seq) for seq in range(14)])
    conversation = fold.conversations[b"t/c"]
    second = fold.wave(1)[0]
    assert second.call.previous_summary == "summary 1"
    assert [m.seq for m in second.call.new_messages] == [6, 7, 8, 9]  # after the base's window (0..5)
    assert second.source_event_ids == ["c-6", "c-7", "c-8", "c-9"]
    assert (second.call.window_start_seq, second.call.window_end_seq) == (0, 9)
    assert conversation.messages[6][:3] == ("c-6", "user", "m6")
    # The summarizer sees when each message was written (it dates what it keeps), as in the stage.
    assert second.call.new_messages[0].occurred_at == conversation.messages[6][3] is not None


def test_the_first_message_of_a_seq_wins_as_in_the_messages_table():
    impostor = new_event("message.appended", MessageAppended(role="user", content="not me"), tenant_id="t",
                         conversation_id="c", user_id="u", seq=2, event_id="other")
    fold = HistoryFold(CFG, NOW, UNTIL)
    for event in [message("c", 0), message("c", 1), message("c", 2), as_event(impostor)]:
        fold.add(b"t/c", event)
    assert fold.conversations[b"t/c"].messages[2][:3] == ("c-2", "user", "m2")


def test_a_missing_message_or_a_failed_base_fails_the_request_without_asking():
    log = [message("c", seq) for seq in range(14) if seq != 7]
    fold = HistoryFold(CFG, NOW, UNTIL)
    for event in log:
        fold.add(b"t/c", event)
    conversation = fold.conversations[b"t/c"]
    first = fold.wave(0)[0]
    assert first.call is not None
    conversation.results[1] = as_event(failed_event(first.request.envelope, first.request.payload, "boom", "m"))
    second = fold.wave(1)[0]
    assert second.call is None and second.error == "inputs: base summary 1 failed"
    conversation.results[1] = answer(first.request)
    second = fold.wave(1)[0]
    assert second.call is None and second.error == "inputs: 3/4 messages 6..9 in the log"


def test_finish_folds_failures_too():
    _, _, fold = batched([message("c", seq) for seq in range(6)])
    conversation = fold.conversations[b"t/c"]
    request = conversation.requests[0]
    conversation.results[1] = as_event(failed_event(request.envelope, request.payload, "boom", "m"))
    state = fold.finish(conversation)
    assert state.in_flight is None and state.latest_completed is None and state.failures == 1


def test_messages_after_replay_until_are_not_history():
    until = datetime.now(UTC)
    fold = HistoryFold(CFG, NOW, until)
    for seq in range(6):
        fold.add(b"t/c", message("c", seq, at=until + timedelta(seconds=1)))
    assert [_window(r) for r in fold.conversations[b"t/c"].requests] == [(1, 0, 5, None, None)]
    assert fold.conversations[b"t/c"].state.last_replay_request == 0  # the live rule asked, not the stride
    history = HistoryFold(CFG, NOW, until + timedelta(seconds=2))
    for seq in range(6):
        history.add(b"t/c", message("c", seq, at=until + timedelta(seconds=1)))
    assert history.conversations[b"t/c"].state.last_replay_request == 1
