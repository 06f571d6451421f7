"""The window summary and topic compaction stages read through ports (domain/window/reads.py,
domain/topics/reads.py), not SQL in streams/ (issue 22): an in-memory read model drives them."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

from core.llm.port import SummaryOutput
from domain.window.reads import SettledRow
from schemas import topic_events as te
from schemas.codec import decode, encode, new_event
from schemas.events import SummaryRequested
from schemas.registry import SUMMARY_COMPLETED, SUMMARY_FAILED, SUMMARY_REQUESTED
from streams.topics_memory.stage import CompactionStage
from streams.topics_memory.summarize import TopicSummary
from streams.window.summarize import SummaryStage

AT = datetime(2026, 1, 1, tzinfo=UTC)


class Memory:
    """A read model in memory: rows by memory id, messages by seq, erased seqs."""

    def __init__(self, messages: dict[int, str], erased=(), rows=None) -> None:
        self.texts, self.erased, self.rows = messages, set(erased), rows or {}
        self.sessions = 0

    @contextlib.asynccontextmanager
    async def session(self):
        self.sessions += 1
        yield self

    async def settled(self, tenant_id, conversation_id, memory_id):
        return self.rows.get(memory_id)

    async def base(self, tenant_id, conversation_id, memory_id):
        row = self.rows.get(memory_id)
        return None if row is None else (row.status, row.text)

    async def messages(self, tenant_id, conversation_id, first_seq, last_seq):
        return [(s, f"e{s}", "user", self.texts[s], AT) for s in range(first_seq, last_seq + 1) if s in self.texts]

    async def erased_seqs(self, tenant_id, conversation_id, first_seq, last_seq):
        return sum(first_seq <= s <= last_seq for s in self.erased)


class Summarizer:
    model = "m"

    def __init__(self) -> None:
        self.calls = []

    async def summarize_window(self, *, previous_summary, new_messages, window_start_seq, window_end_seq):
        self.calls.append((previous_summary, [m.content for m in new_messages]))
        return SummaryOutput(text=f"{previous_summary or ''}+{len(new_messages)}", prompt_version="p", model="m")


def request(memory_id=2, start=0, end=3, base=None, base_end=None):
    payload = SummaryRequested(memory_id=memory_id, start_seq=start, end_seq=end, base_memory_id=base,
                               base_end_seq=base_end, prompt_version="p", model="m", attempt=1)
    return decode(encode(new_event(SUMMARY_REQUESTED, payload, tenant_id="t", conversation_id="c", user_id="u",
                                   seq=end)))


def run(stage, event):
    return asyncio.run(stage.handle(event))


def row(status, text=None, attempt=1):
    return SettledRow(status, attempt, text, 5, "p", "m", ["e0"], None if status != "failed" else "boom")


def test_the_stage_summarizes_what_the_port_gives_in_one_session():
    memory, llm = Memory({0: "a", 1: "b", 2: "c", 3: "d"}), Summarizer()
    out = run(SummaryStage(llm, memory), request())
    assert out.type == SUMMARY_COMPLETED and out.payload["text"] == "+4"
    assert llm.calls == [(None, ["a", "b", "c", "d"])] and memory.sessions == 1
    assert out.payload["source_event_ids"] == ["e0", "e1", "e2", "e3"]


def test_a_base_summary_and_erased_seqs_come_through_the_port():
    memory, llm = Memory({4: "e", 6: "g"}, erased={5}, rows={1: row("completed", "base")}), Summarizer()
    out = run(SummaryStage(llm, memory), request(start=0, end=6, base=1, base_end=3))
    assert out.type == SUMMARY_COMPLETED and llm.calls == [("base", ["e", "g"])]


def test_a_settled_request_gets_its_stored_result_without_a_model_call():
    memory, llm = Memory({0: "a"}, rows={2: row("completed", "stored")}), Summarizer()
    out = run(SummaryStage(llm, memory), request())
    assert out.payload["text"] == "stored" and llm.calls == []


def test_inputs_the_port_never_has_fail_the_request_after_the_wait():
    memory, llm = Memory({0: "a"}), Summarizer()
    out = run(SummaryStage(llm, memory, inputs_wait_s=0.05), request())
    assert out.type == SUMMARY_FAILED and "1/4 messages" in out.payload["error"] and llm.calls == []


def test_a_base_still_being_computed_is_waited_for_beyond_the_wait_without_progress():
    """A chained request behind a slow base (a burst on a busy machine) waits for it instead of
    failing after `inputs_wait_s`, which would fail every request chained behind it."""
    memory, llm = Memory({4: "e", 5: "f", 6: "g"}, rows={1: row("processing")}), Summarizer()

    async def scenario():
        async def base_completes_later():
            await asyncio.sleep(0.4)  # eight times the wait without progress
            memory.rows[1] = row("completed", "base")
        later = asyncio.create_task(base_completes_later())
        out = await SummaryStage(llm, memory, inputs_wait_s=0.05, max_wait_s=5).handle(
            request(start=0, end=6, base=1, base_end=3))
        await later
        return out

    out = asyncio.run(scenario())
    assert out.type == SUMMARY_COMPLETED and llm.calls == [("base", ["e", "f", "g"])]


def test_a_base_processing_forever_fails_the_request_at_the_overall_bound():
    memory, llm = Memory({4: "e"}, rows={1: row("processing")}), Summarizer()
    out = run(SummaryStage(llm, memory, inputs_wait_s=0.05, max_wait_s=0.3), request(start=0, end=4, base=1,
                                                                                      base_end=3))
    assert out.type == SUMMARY_FAILED and "base summary 1 not completed" in out.payload["error"]
    assert llm.calls == []


class Topics:
    """The topic compaction stage's read model in memory."""

    def __init__(self, texts: dict[int, str], compaction=None) -> None:
        self.texts, self.row = texts, compaction

    async def compaction(self, tenant_id, conversation_id, topic_id):
        return self.row

    async def messages(self, tenant_id, conversation_id, seqs):
        return [(s, "user", self.texts[s]) for s in sorted(set(seqs)) if s in self.texts]


class TopicLlm:
    model, prompt_version = "m", "p"

    def __init__(self) -> None:
        self.calls = []

    async def summarize(self, title, previous_summary, messages, upto_seq):
        self.calls.append([m.content for m in messages])
        return TopicSummary("+".join(m.content for m in messages), "m", "p")


def compaction_request(seqs=(1, 2)):
    payload = te.TopicCompactionRequested(topic_id="c:topic-1", upto_seq=max(seqs), seqs=list(seqs), title="T",
                                          prompt_version="p", model="m")
    return decode(encode(new_event(te.TOPIC_COMPACTION_REQUESTED, payload, tenant_id="t", conversation_id="c",
                                   user_id="u", seq=max(seqs))))


def test_the_compaction_stage_reads_its_messages_through_the_port():
    llm = TopicLlm()
    out = run(CompactionStage(llm, Topics({1: "a", 2: "b"})), compaction_request())
    assert out.type == te.TOPIC_COMPACTED and out.payload["summary"] == "a+b" and llm.calls == [["a", "b"]]


def test_a_compaction_the_port_already_holds_is_said_again_without_a_model_call():
    llm = TopicLlm()
    out = run(CompactionStage(llm, Topics({1: "a", 2: "b"}, compaction=(2, "stored", "m", "p"))), compaction_request())
    assert out.payload["summary"] == "stored" and llm.calls == []
