"""The chunk stage, the topic backlog stage, the erasure check and the re-derive sender read the
read model through ports (domain/facts/reads.py, domain/topics/reads.py, domain/erasure_reads.py;
issue 22): in-memory fakes of the ports drive their logic here, PostgreSQL's implementations
(projections/*_reads.py) are driven by the integration tests through the worker."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import numpy as np

from domain.erasure import AppliedErasure, LogPosition
from domain.erasure_reads import PendingRederive
from domain.facts.reads import RangeRows
from schemas import erasure_events as ee
from schemas import facts_events as fe
from schemas import topic_events as te
from schemas.codec import decode, encode, new_event
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED
from streams.facts.stage import ChunkStage
from streams.rederive import Sender, send_row
from streams.topics_memory.erased import ErasedCheck
from streams.topics_memory.recall import BacklogStage

AT = datetime(2026, 1, 1, tzinfo=UTC)


def run(coroutine):
    return asyncio.run(coroutine)


def as_event(kind, payload, seq, user="alice"):
    return decode(encode(new_event(kind, payload, tenant_id="t", conversation_id="c", user_id=user, seq=seq)))


# --- the chunk stage (streams/facts/stage.py) -------------------------------------------------


class Chunks:
    """The chunk stage's read model in memory; `polls` lists what each read found."""

    def __init__(self, messages: dict[int, str], *, erased=(), recorded=(), facts=(), arrive_after: int = 0) -> None:
        self.texts, self.erased, self.done, self.facts = messages, set(erased), set(recorded), list(facts)
        self.arrive_after = arrive_after  # polls before the messages are projected
        self.polls, self.asked = 0, []

    async def recorded(self, tenant_id, conversation_id, start, end):
        return (start, end) in self.done

    async def range_rows(self, tenant_id, conversation_id, start, end):
        self.polls += 1
        shown = self.polls > self.arrive_after
        rows = [(s, f"e{s}", "user", self.texts[s], AT + timedelta(seconds=s)) for s in range(start, end)
                if shown and s in self.texts]
        erased = sum(start <= s < end for s in self.erased) if len(rows) < end - start else 0
        return RangeRows(("alice", None, max(self.texts, default=-1) if shown else -1), rows, erased)

    async def related(self, tenant_id, owner_user_id, subject_id, query, limit, before):
        self.asked.append((owner_user_id, query, limit, before))
        return self.facts[:limit]


def chunk_request(start=0, end=3):
    return as_event(fe.CHUNK_REQUESTED, fe.ChunkRequested(start_seq=start, end_seq_exclusive=end, prompt_version="p",
                                                          model="m"), end - 1)


class NoExtractor:
    async def extract(self, messages, existing):
        raise AssertionError("no model call expected")


def test_a_range_already_recorded_is_answered_with_nothing_and_no_model_call():
    stage = ChunkStage(NoExtractor(), None, Chunks({0: "a", 1: "b", 2: "c"}, recorded={(0, 3)}))
    assert run(stage.handle(chunk_request())) is None


class OneSummary:
    def __init__(self) -> None:
        self.calls = 0

    async def extract(self, messages, existing):
        from streams.facts.extraction import ExtractionResult
        from streams.facts.extractor import Extraction

        self.calls += 1
        return Extraction(ExtractionResult(summary="a b c"), fe.GateVerdict(worth_remembering=False, method="off"),
                          "m", "p")


class TwoDims:
    model, dimensions = "stub", 2

    async def embed_documents(self, texts):
        return np.ones((len(texts), 2), dtype=np.float32)


def test_a_re_issued_request_for_a_recorded_range_is_answered_so_the_fold_moves_on():
    """The fold re-issues a range only when no result reached it within its timeout; a worker
    stopped between recording a chunk and folding its result left such a range. Answered with
    nothing, the fold re-issued it until its attempts ran out (5 timeouts) and skipped it."""
    extractor = OneSummary()
    stage = ChunkStage(extractor, TwoDims(), Chunks({0: "a", 1: "b", 2: "c"}, recorded={(0, 3)}))
    reissued = as_event(fe.CHUNK_REQUESTED, fe.ChunkRequested(start_seq=0, end_seq_exclusive=3, attempt=2,
                                                              prompt_version="p", model="m"), 2)
    out = run(stage.handle(reissued))
    assert out is not None and out.type == fe.CHUNK_RECORDED, out
    assert (out.payload["start_seq"], out.payload["end_seq_exclusive"], out.payload["attempt"]) == (0, 3, 2)
    assert extractor.calls == 1


def test_the_chunk_inputs_wait_for_the_projection_and_skip_erased_seqs():
    reads = Chunks({0: "a", 2: "c"}, erased={1}, arrive_after=2)
    stage = ChunkStage(NoExtractor(), None, reads, inputs_wait_s=5)
    event = chunk_request()
    inputs = run(stage._inputs(event.envelope, event.payload))
    assert [m.content for m in inputs.messages] == ["a", "c"] and inputs.event_ids == ["e0", "e2"]
    assert inputs.owner_user_id == "alice" and inputs.observed_at == AT + timedelta(seconds=2)
    assert reads.polls == 3  # two polls found nothing projected yet


def test_a_range_whose_every_message_was_erased_fails_at_once():
    reads = Chunks({}, erased={0, 1, 2})
    out = run(ChunkStage(NoExtractor(), None, reads, inputs_wait_s=30).handle(chunk_request()))
    assert out.type == fe.CHUNK_FAILED and "every message 0..2 was erased" in out.payload["error"]
    assert reads.polls == 1


def test_inputs_the_port_never_has_fail_the_chunk_after_the_wait():
    out = run(ChunkStage(NoExtractor(), None, Chunks({0: "a"}, arrive_after=10**6), inputs_wait_s=0.1)
              .handle(chunk_request()))
    assert out.type == fe.CHUNK_FAILED and "0/3 messages 0..2 projected" in out.payload["error"]


def test_related_facts_come_from_the_port_before_the_chunk_s_newest_message_and_from_the_stage_s_memory():
    reads = Chunks({0: "I moved to Lisbon", 1: "I play chess"}, facts=[("f1", "Ana lives in Porto", "location")])
    stage = ChunkStage(NoExtractor(), None, reads, related_facts=5)
    cause = SimpleNamespace(tenant_id="t", conversation_id="c")
    stage._remember(cause, [SimpleNamespace(fact_id="r1", content="Ana plays chess", category="hobby")])
    event = chunk_request(0, 2)
    inputs = run(stage._inputs(event.envelope, event.payload))
    related = run(stage._related(cause, inputs))
    assert {f.fact_id for f in related} == {"f1", "r1"}
    [(owner, query, limit, before)] = reads.asked
    assert owner == "alice" and limit == 5 and before == inputs.observed_at and "chess" in query


# --- the topic backlog stage (streams/topics_memory/recall.py) ----------------------------------


class Backlog:
    """The projected log in memory: rows by seq; `newest` also counts erased seqs."""

    def __init__(self, rows: dict[int, tuple[str, str]], newest: int | None = None) -> None:
        self.projected, self.newest_seq, self.sessions = rows, newest, 0

    @contextlib.asynccontextmanager
    async def session(self):
        self.sessions += 1
        yield self

    def _row(self, seq):
        role, content = self.projected[seq]
        return (seq, role, content, AT, "alice", None, {"importance": 2} if seq == 1 else {})

    async def rows(self, tenant_id, conversation_id, from_seq, upto_seq, limit):
        return [self._row(s) for s in sorted(self.projected) if from_seq <= s <= upto_seq][:limit]

    async def gap_rows(self, tenant_id, conversation_id, ranges, limit):
        return [self._row(s) for s in sorted(self.projected) if any(a <= s <= b for a, b in ranges)][:limit]

    async def newest(self, tenant_id, conversation_id):
        return self.newest_seq


class Embedder:
    model = "stub"

    async def embed_documents(self, texts):
        return [np.array([3.0, 4.0]) for _ in texts]


def backlog_request(from_seq, upto_seq, limit=100, final=False, ranges=None):
    return as_event(te.TOPIC_BACKLOG_REQUESTED, te.TopicBacklogRequested(
        from_seq=from_seq, upto_seq=upto_seq, limit=limit, final=final, ranges=ranges), from_seq - 1)


def test_a_backlog_is_recalled_in_order_with_unit_vectors_for_the_users_messages():
    reads = Backlog({1: ("user", "a"), 2: ("assistant", "b"), 3: ("system", "s"), 4: ("user", "d")})
    out = run(BacklogStage(Embedder(), reads).handle(backlog_request(1, 4)))
    *recalled, done = [decode(encode(e)) for e in out]
    assert [(r.payload.seq, r.payload.after_seq) for r in recalled] == [(1, 0), (2, 1), (4, 2)]
    assert recalled[0].payload.embedding == [0.6, 0.8] and recalled[1].payload.embedding is None
    assert recalled[0].payload.importance == 1.0  # clamped from the message's metadata
    assert (done.type, done.payload.through_seq, done.payload.missing) == (te.TOPIC_BACKLOG_READ, 4, 0)


def test_a_backlog_not_projected_yet_is_asked_again_unless_final_and_an_erased_seq_is_a_gap():
    reads = Backlog({1: ("user", "a")})
    assert run(BacklogStage(Embedder(), reads, inputs_wait_s=0.05).handle(backlog_request(1, 2))) == []
    final = run(BacklogStage(Embedder(), reads, inputs_wait_s=0.05).handle(backlog_request(1, 2, final=True)))
    assert decode(encode(final[-1])).payload.missing == 1
    erased = Backlog({1: ("user", "a")}, newest=2)  # seq 2 was erased: the log holds nothing more of it
    sessions_before = erased.sessions
    done = decode(encode(run(BacklogStage(Embedder(), erased, inputs_wait_s=30).handle(backlog_request(1, 2)))[-1]))
    assert done.payload.through_seq == 2 and erased.sessions - sessions_before == 1


def test_a_gap_read_takes_the_ranges_rows_and_gives_up_the_seqs_the_log_does_not_hold():
    reads = Backlog({3: ("user", "c"), 7: ("user", "g")}, newest=9)
    out = run(BacklogStage(Embedder(), reads).handle(backlog_request(3, 8, ranges=[[3, 4], [7, 8]])))
    *recalled, done = [decode(encode(e)) for e in out]
    assert [r.payload.seq for r in recalled] == [3, 7]
    assert (done.payload.gap, done.payload.through_seq, done.payload.missing) == (True, 8, 2)


# --- the erasure check (streams/topics_memory/erased.py) ----------------------------------------


class Erasures:
    def __init__(self) -> None:
        self.erasures: list[AppliedErasure] = []
        self.loads = self.probes = 0

    async def count(self):
        self.probes += 1
        return len(self.erasures)

    async def applied(self):
        self.loads += 1
        return len(self.erasures), list(self.erasures)

    async def close(self):
        pass


def test_the_erasure_check_reads_the_erasures_again_only_when_their_count_moved():
    reads = Erasures()
    check = ErasedCheck(reads)
    message = as_event(MESSAGE_APPENDED, MessageAppended(role="user", content="hi"), 3)
    record = SimpleNamespace(partition=0, offset=10, timestamp=5.0)
    assert run(check.erasure_of(message, record)) is None
    assert run(check.erasure_of(message, record)) is None and reads.loads == 1  # same count: the snapshot decides
    reads.erasures.append(AppliedErasure("e1", "t", "alice", frozenset(), LogPosition(0, 11, 6_000)))
    assert run(check.erasure_of(message, record)) == "e1" and reads.loads == 2 and check.reloads == 2


def test_the_erasure_check_probes_once_a_batch_when_asked_to():
    """The processor's batch: the topic slice probes at its first message and lets that snapshot
    decide for the rest of the batch (erased.py, "One probe per processor batch")."""
    reads = Erasures()
    check = ErasedCheck(reads)
    message = as_event(MESSAGE_APPENDED, MessageAppended(role="user", content="hi"), 3)
    record = SimpleNamespace(partition=0, offset=10, timestamp=5.0)
    assert run(check.erasure_of(message, record, probe=False)) is None and reads.probes == 1  # no snapshot yet
    reads.erasures.append(AppliedErasure("e1", "t", "alice", frozenset(), LogPosition(0, 11, 6_000)))
    assert run(check.erasure_of(message, record, probe=False)) is None and reads.probes == 1  # the batch's snapshot
    assert run(check.erasure_of(message, record)) == "e1" and reads.probes == 2  # the next batch's probe


# --- the re-derive sender (streams/rederive.py) -------------------------------------------------


class Rederive:
    def __init__(self, recorded=(), with_messages=()) -> None:
        self.recorded_, self.with_messages_, self.marks = set(recorded), set(with_messages), []

    async def recorded_ranges(self, tenant_id, conversation_id):
        return self.recorded_

    async def with_messages(self, tenant_id, conversation_id, ranges):
        return {r for r in ranges if r in self.with_messages_}

    async def now(self):
        return AT

    async def sent(self, erasure_event_id, conversation_id):
        self.marks.append(("sent", erasure_event_id, conversation_id))

    async def done(self, erasure_event_id, conversation_id, outcome):
        self.marks.append(("done", erasure_event_id, outcome))


def sender(sent: list, *, max_attempts=3):
    async def send(envelope):
        sent.append(envelope)
    return Sender(send, window=True, facts=True, prompt_version="p", model="m", resend_after_s=60,
                  max_attempts=max_attempts)


def pending(attempts=0, sent_at=None):
    return PendingRederive("e1", "t", "c", [5, 3], 2, 4, [(0, 4), (4, 8), (8, 12)], attempts, sent_at)


def test_a_new_row_sends_the_rederive_request_and_the_chunks_still_to_derive_then_is_marked_sent():
    session, sent = Rederive(recorded={(0, 4)}, with_messages={(0, 4), (4, 8)}), []
    run(send_row(session, pending(), sender(sent)))
    assert [e.type for e in sent] == [ee.REDERIVE_REQUESTED, fe.CHUNK_REQUESTED]
    rederive, chunk = (decode(encode(e)).payload for e in sent)
    assert rederive.erased_seqs == [3, 5] and rederive.first_seq == 3 and rederive.base_memory_id == 2
    assert (chunk.start_seq, chunk.end_seq_exclusive, chunk.attempt) == (4, 8, 1)
    assert session.marks == [("sent", "e1", "c")]


def test_a_row_with_every_chunk_recorded_is_done_and_one_out_of_attempts_gives_up():
    session, sent = Rederive(recorded={(0, 4), (4, 8)}, with_messages={(0, 4), (4, 8)}), []
    run(send_row(session, pending(attempts=1, sent_at=AT - timedelta(hours=1)), sender(sent)))
    assert sent == [] and session.marks == [("done", "e1", "done")]
    session = Rederive(with_messages={(4, 8)})
    run(send_row(session, pending(attempts=3, sent_at=AT - timedelta(hours=1)), sender(sent)))
    assert sent == [] and session.marks == [("done", "e1", "gave up: chunks [[4, 8]] after 3 attempts")]


# --- the wiring (streams/context.py) ------------------------------------------------------------


def test_the_context_builds_ports_from_the_roof_s_factories_on_one_pool_and_names_a_missing_one():
    import pytest

    from core.settings import Settings
    from streams.context import StreamContext, StreamPorts

    opened = []

    async def open_pool(settings):
        opened.append(settings)
        return "pool"

    settings = Settings()
    ports = StreamPorts(open_pool=open_pool, chunk_reads=lambda pool: ("chunks", pool),
                        erasure_reads=lambda settings: ("erasures", settings))
    ctx = StreamContext(settings, None, None, None, ports=ports)
    assert run(ctx.reads("chunk_reads")) == ("chunks", "pool") and run(ctx.reads("chunk_reads"))[1] == "pool"
    assert run(ctx.reads("erasure_reads")) == ("erasures", settings)  # a connection of its own
    assert opened == [settings]  # one pool, opened once
    with pytest.raises(RuntimeError, match="no backlog_reads wired"):
        run(ctx.reads("backlog_reads"))
