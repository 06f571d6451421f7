"""The topic fold given each user message's vector before it (the slice's `prepare`, issue 22):
no request/answer pair through the log, the same topics as the request path, an older log's
requests and answers still applied in order, an embedder outage waited out."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from core.embeddings.port import EmbeddingError
from schemas import topic_events as te
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED
from streams.topics_memory import codec
from streams.topics_memory.agent import Embedded, handle, wants_embedding
from streams.topics_memory.stage import ZERO_VECTOR, Warmed, embed_for_fold, embedded_of, gave_up
from tests.unit.test_topic_agent import T0, Driver, axis, config, event

REQUEST_TYPES = {te.TOPIC_EMBEDDING_REQUESTED, te.TOPIC_MESSAGE_EMBEDDED, te.TOPIC_EMBEDDING_FAILED}
# (subject axis, role) per seq: two subjects, back and forth.
SCRIPT = [(0, "user"), (0, "assistant"), (0, "user"), (0, "assistant"), (1, "user"), (1, "assistant"),
          (0, "user"), (0, "assistant"), (1, "user"), (1, "assistant")]


def message(seq: int):
    subject, role = SCRIPT[seq]
    return event(MESSAGE_APPENDED, MessageAppended(role=role, content=f"subject {subject} {role} {seq}"), seq, T0 + seq)


def prepared(state, ev) -> Embedded | None:
    """What the live slice's prepare hands the fold (the vector of the message's subject axis)."""
    if not wants_embedding(state, ev):
        return None
    return embedded_of(np.asarray(axis(int(ev.payload.content.split()[1])), dtype=np.float32))


def run_prepared(seqs) -> tuple[object, list]:
    cfg, state, out = config(), codec.loads(None, "c"), []
    for seq in seqs:
        ev = message(seq)
        state, emitted = handle(cfg, state, ev, T0, prepared(state, ev))
        out += emitted
    return state, out


def run_requested() -> tuple[object, list]:
    """The path before issue 22: the fold asks, the answer comes back through the log."""
    driver = Driver()
    for seq in range(len(SCRIPT)):
        for kind, payload in driver.say(seq, SCRIPT[seq][1], f"subject {SCRIPT[seq][0]} {SCRIPT[seq][1]} {seq}"):
            if kind == te.TOPIC_EMBEDDING_REQUESTED:
                vector = axis(int(payload.content.split()[1]))
                driver.feed(event(te.TOPIC_MESSAGE_EMBEDDED, te.TopicMessageEmbedded(
                    seq=payload.seq, embedding=vector, model="m"), payload.seq))
    return driver.state, driver.out


def placed(out) -> list:
    return [(e.type, e.seq, e.payload.get("topic_id")) for e in out if e.type not in REQUEST_TYPES]


def test_a_prepared_vector_places_the_message_without_a_record_through_the_log():
    state, out = run_prepared(range(len(SCRIPT)))
    assert not [e for e in out if e.type in REQUEST_TYPES]
    assert not state.inbox.queue
    assigned = {e.seq: e.payload["topic_id"] for e in out if e.type == te.TOPIC_MESSAGE_ASSIGNED}
    assert sorted(assigned) == list(range(len(SCRIPT)))
    assert assigned[0] == assigned[2] == assigned[6] != assigned[4] == assigned[8]


def test_the_prepared_path_derives_what_the_request_path_derived():
    state_now, out_now = run_prepared(range(len(SCRIPT)))
    state_before, out_before = run_requested()
    assert placed(out_now) == placed(out_before)
    assert state_now.topics == state_before.topics


def test_a_redelivered_or_deferred_message_is_not_embedded_again():
    state, _ = run_prepared(range(4))
    assert not wants_embedding(state, message(2))  # placed already
    assert wants_embedding(state, message(4))
    assert not wants_embedding(state, message(3))  # an assistant reply needs no vector


def test_an_old_logs_request_and_answer_still_apply_in_log_order():
    """A state saved before the upgrade holds seq 0 waiting for the answer its request asked
    for; seq 2 comes with its vector and waits behind it; the old answer places both, in order."""
    cfg, state = config(), codec.loads(None, "c")
    state, out = handle(cfg, state, message(0), T0)  # the old path: no vector, a request
    assert [e.type for e in out] == [te.TOPIC_EMBEDDING_REQUESTED]
    state = codec.loads(codec.dumps(state), "c")  # from the changelog, after the upgrade
    state, out = handle(cfg, state, message(1), T0, prepared(state, message(1)))
    assert out == []
    state, out = handle(cfg, state, message(2), T0, prepared(state, message(2)))
    assert out == [] and [w.seq for w in state.inbox.queue] == [0, 1, 2]
    answer = event(te.TOPIC_MESSAGE_EMBEDDED, te.TopicMessageEmbedded(seq=0, embedding=axis(0), model="m"), 0)
    state, out = handle(cfg, state, answer, T0)
    assert [e.seq for e in out if e.type == te.TOPIC_MESSAGE_ASSIGNED] == [0, 1, 2]
    assert not state.inbox.queue
    again = handle(cfg, state, answer, T0)  # the old answer redelivered: nothing changes
    assert again == (state, [])


def test_a_zero_vector_or_a_failure_for_good_is_placed_unmatched():
    assert embedded_of(np.zeros(4, dtype=np.float32)) == Embedded(None, gave_up(ZERO_VECTOR))
    cfg, state = config(), codec.loads(None, "c")
    state, out = handle(cfg, state, message(0), T0, Embedded(None, gave_up("bad text")))
    assert [(e.type, e.seq, e.payload["reason"]) for e in out] == [
        (te.TOPIC_MESSAGE_UNASSIGNED, 0, "embedding failed: bad text")]  # named, no request sent
    assert not state.inbox.queue


class FlakyEmbedder:
    model, dimensions = "flaky", 4

    def __init__(self, failures: list[BaseException]) -> None:
        self.failures, self.calls = list(failures), 0

    async def embed_documents(self, texts):
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return np.ones((len(texts), 4), dtype=np.float32)


def test_an_embedder_outage_is_waited_out(monkeypatch):
    monkeypatch.setattr(asyncio, "sleep", _no_sleep)
    embedder = FlakyEmbedder([EmbeddingError("503", retryable=True), ConnectionError("refused"),
                              EmbeddingError("429", retryable=True)])
    found = asyncio.run(embed_for_fold(embedder, "hello", what="a message"))
    assert embedder.calls == 4
    assert found.gave_up is None and found.vector == pytest.approx((0.5, 0.5, 0.5, 0.5))


def test_a_failure_for_good_is_not_retried(monkeypatch):
    monkeypatch.setattr(asyncio, "sleep", _no_sleep)
    embedder = FlakyEmbedder([EmbeddingError("too long", retryable=False)])
    found = asyncio.run(embed_for_fold(embedder, "hello", what="a message"))
    assert embedder.calls == 1 and found == Embedded(None, gave_up("too long"))


class AxisEmbedder:
    """Each message's subject axis (as `prepared`); counts calls and texts."""

    model, dimensions = "axes", 4

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def embed_documents(self, texts):
        self.calls.append(list(texts))
        return np.asarray([axis(int(text.split()[1])) for text in texts], dtype=np.float32)


def test_a_warmed_batch_is_one_embedding_call_and_gives_the_fold_the_same_vectors():
    """The processor's batch (streams/processor.py): its user messages embedded in one call, then
    folded one by one with the vector each would have got alone: the same topics, the same events."""
    embedder, warmed = AxisEmbedder(), Warmed()
    batch = [message(seq) for seq in range(len(SCRIPT))]
    state = codec.loads(None, "c")
    asyncio.run(warmed.fill(embedder, [ev for ev in batch if wants_embedding(state, ev)]))
    assert embedder.calls == [[m.payload.content for m in batch if m.payload.role == "user"]]
    cfg, out = config(), []
    for ev in batch:
        ready = warmed.take(ev) if wants_embedding(state, ev) else None
        assert (ready is not None) == (ev.payload.role == "user")
        state, emitted = handle(cfg, state, ev, T0, ready)
        out += emitted
    assert len(embedder.calls) == 1
    state_alone, out_alone = run_prepared(range(len(SCRIPT)))
    assert state == state_alone
    assert [(e.type, e.seq, e.payload) for e in out] == [(e.type, e.seq, e.payload) for e in out_alone]


def test_a_warmed_vector_is_taken_once_and_only_for_its_own_text():
    embedder, warmed = AxisEmbedder(), Warmed()
    asyncio.run(warmed.fill(embedder, [message(0), message(2)]))
    assert warmed.take(message(0)) == prepared(codec.loads(None, "c"), message(0))
    assert warmed.take(message(0)) is None  # taken: a redelivery embeds itself
    other = event(MESSAGE_APPENDED, MessageAppended(role="user", content="subject 1 user 2"), 2, T0 + 2)
    assert warmed.take(other) is None  # same seq, another text: not this vector
    asyncio.run(warmed.fill(embedder, []))
    assert warmed.take(message(2)) is None  # the next batch drops what this one left


def test_a_failed_warm_up_leaves_each_message_to_prepare(monkeypatch):
    """An outage (or one bad text failing the batch's call) during the warm-up: nothing is
    warmed, and each message's own `prepare` waits out the outage / fails its own text alone."""
    monkeypatch.setattr(asyncio, "sleep", _no_sleep)
    warmed = Warmed()
    asyncio.run(warmed.fill(FlakyEmbedder([EmbeddingError("503", retryable=True)]), [message(0), message(2)]))
    assert warmed.take(message(0)) is None and warmed.take(message(2)) is None
    asyncio.run(warmed.fill(FlakyEmbedder([EmbeddingError("too long", retryable=False)]), [message(0)]))
    assert warmed.take(message(0)) is None


_real_sleep = asyncio.sleep


async def _no_sleep(delay: float, *args) -> None:
    await _real_sleep(0)
