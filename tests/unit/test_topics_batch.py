"""The topic batch (memory_agent/batch_replay/topics.py) against the reference it must equal: the
fold shell with every request answered at once, the embedding stage's answer for embeddings and
the summarizer's own text for compactions, in order. The batch folds with placeholder summaries,
writes them in waves and patches them in; the events and the final states must be the same."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memory_agent.batch_replay.topics import TopicsBatch, _Conversation, _event
from core.llm.port import ChatMessage, LlmError
from core.settings import Settings, TopicSettings
from schemas import topic_events as te
from schemas.codec import new_event
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED
from streams.topics_memory import codec
from streams.topics_memory.agent import handle, wants_embedding
from streams.topics_memory.stage import EmbeddingStage, embedded_of
from streams.topics_memory.summarize import TopicSummary
from tests.support.fake_openai import hashed_embedding

T0 = datetime(2026, 11, 1, tzinfo=UTC)
WORDS = ("orchid", "glacier", "saxophone", "lantern")


class Embedder:
    model = "fake-embedding"

    def __init__(self) -> None:
        self.calls = 0

    async def embed_documents(self, texts):
        self.calls += 1
        return np.asarray([hashed_embedding(t, 64) for t in texts], dtype=np.float32)


class Summarizer:
    """A summary that carries its whole chain (previous text, title, archived seqs); fails where told."""

    model, prompt_version = "fake-llm", "topic-summary-v1"

    def __init__(self, failing: str | None = None) -> None:
        self.failing = failing  # a compaction archiving the message ending with this fails
        self.calls: list[tuple] = []

    async def summarize(self, title: str, previous_summary: str | None, messages: list[ChatMessage],
                        upto_seq: int) -> TopicSummary:
        self.calls.append((title, previous_summary, [m.seq for m in messages], upto_seq))
        await asyncio.sleep(0)
        if self.failing is not None and any(m.content.endswith(self.failing) for m in messages):
            raise LlmError("the model refused", retryable=True)
        return TopicSummary(f"[{previous_summary or ''}] {title[:20]}: {[m.content[-3:] for m in messages]}",
                            self.model, self.prompt_version)


def settings() -> Settings:
    return Settings(topics=TopicSettings(max_messages_per_topic=4, recent_message_keep=1, similarity_threshold=0.5,
                                         active_topic_bonus=0.0, max_topics=3))


def history(conversation: str, turns: int, seed: int) -> list:
    """User and assistant messages over several subjects, changing subject now and then."""
    rng = np.random.default_rng(seed)
    events, word = [], WORDS[0]
    for turn in range(turns):
        if rng.random() < 0.35:
            word = WORDS[int(rng.integers(len(WORDS)))]
        for role in ("user", "assistant"):
            seq = len(events)
            content = (f"{word} {word} {word} {word} question {turn} n{seq:03d}" if role == "user"
                       else f"Answer {turn} about {word} n{seq:03d}")
            envelope = new_event(MESSAGE_APPENDED, MessageAppended(role=role, content=content), tenant_id="t",
                                 conversation_id=conversation, user_id="u", seq=seq,
                                 occurred_at=T0 + timedelta(minutes=seq))
            events.append(_event(envelope))
    return events


async def reference(batch: TopicsBatch, summarizer: Summarizer, conversation: str, events: list):
    """The shell as the live slice runs it (each message's vector before the fold), each request
    answered at once by the stages' code, in order."""
    stage = EmbeddingStage(Embedder())
    state = codec.loads(None, conversation)
    texts = {e.envelope.seq: (e.payload.role, e.payload.content) for e in events}
    out = []
    for event in events:
        queue = [event]
        while queue:
            event = queue.pop(0)
            embedded = None
            if wants_embedding(state, event):  # as the live slice's prepare: the vector before the fold
                embedded = embedded_of((await stage.embedder.embed_documents([event.payload.content]))[0])
            state, outgoing = handle(batch.config, state, event, batch.wall, embedded)
            out += outgoing
            for request in outgoing:
                p = request.payload
                if request.type == te.TOPIC_EMBEDDING_REQUESTED:
                    answers = await stage.handle([_event(request)])
                elif request.type == te.TOPIC_COMPACTION_REQUESTED:
                    messages = [ChatMessage(seq, *texts[seq]) for seq in sorted(set(p["seqs"]))]
                    same = dict(tenant_id="t", conversation_id=conversation, user_id=request.user_id,
                                subject_id=request.subject_id, seq=request.seq)
                    try:
                        summary = await summarizer.summarize(p["title"], p["previous_summary"], messages, p["upto_seq"])
                    except LlmError as exc:
                        answers = [new_event(te.TOPIC_COMPACTION_FAILED, te.TopicCompactionFailed(
                            topic_id=p["topic_id"], upto_seq=p["upto_seq"], attempt=p["attempt"],
                            error=f"{type(exc).__name__}: {exc}", retryable=True), **same)]
                    else:
                        answers = [new_event(te.TOPIC_COMPACTED, te.TopicCompacted(
                            topic_id=p["topic_id"], upto_seq=p["upto_seq"], archived_seqs=p["seqs"],
                            summary=summary.text, attempt=p["attempt"], prompt_version=summary.prompt_version,
                            model=summary.model, generation_time_ms=0), **same)]
                else:
                    answers = []
                out += answers
                queue += [_event(a) for a in answers]
    return state, out


def comparable(envelopes) -> list:
    return [(e.type, e.seq, e.user_id, {k: v for k, v in e.payload.items() if k != "generation_time_ms"})
            for e in envelopes]


@pytest.mark.parametrize("seed", range(6))
def test_the_batch_equals_the_fold_with_instant_answers(seed):
    failing = "n008" if seed % 2 else None  # then the compaction archiving seq 8 fails in each conversation
    run = Settings.model_copy(settings())

    async def go():
        batch = TopicsBatch(run, Embedder(), Summarizer(failing), producer=None, derived=None, states=None)
        histories = {f"c{i}": history(f"c{i}", 30 + 7 * i, seed * 10 + i) for i in range(3)}
        conversations = []
        for name, events in histories.items():
            conversation = _Conversation(name.encode(), "t", name)
            for event in events:
                conversation.messages.setdefault(event.envelope.seq, ChatMessage(
                    event.envelope.seq, event.payload.role, event.payload.content))
                conversation.events.append((event, None))
            conversations.append(conversation)
        await batch.derive(conversations)
        assert batch.stats["waves"] >= 2 and batch.stats["compactions"] >= 6
        for conversation in conversations:
            state, out = await reference(batch, Summarizer(failing), conversation.conversation_id,
                                         histories[conversation.conversation_id])
            assert comparable(conversation.out) == comparable(out)
            assert codec.dumps(conversation.state) == codec.dumps(state)
            assert not any("\ue000" in str(e.payload) for e in conversation.out)
        return batch

    batch = asyncio.run(go())
    assert (batch.stats["failed"] > 0) == (batch.stats["refolded"] > 0) == (failing is not None)


def test_each_wave_asks_the_cache_once_and_the_summarizer_for_the_misses_only():
    class Cached(Summarizer):
        def __init__(self) -> None:
            super().__init__()
            self.lookups: list[int] = []

        async def cached_many(self, calls):
            self.lookups.append(len(calls))
            return [TopicSummary(f"cached {c.upto_seq} after {c.previous_summary}", self.model, self.prompt_version)
                    if c.upto_seq % 3 == 0 else None for c in calls]

    async def go():
        summarizer = Cached()
        batch = TopicsBatch(settings(), Embedder(), summarizer, producer=None, derived=None, states=None)
        conversation = _Conversation(b"c0", "t", "c0")
        for event in history("c0", 40, 3):
            conversation.messages.setdefault(event.envelope.seq, ChatMessage(
                event.envelope.seq, event.payload.role, event.payload.content))
            conversation.events.append((event, None))
        await batch.derive([conversation])
        return summarizer, batch, conversation

    summarizer, batch, conversation = asyncio.run(go())
    assert len(summarizer.lookups) == batch.stats["waves"] and sum(summarizer.lookups) == batch.stats["compactions"]
    assert len(summarizer.calls) == batch.stats["summary_calls"] == batch.stats["compactions"] - \
        batch.stats["summary_hits"] > 0
    # Each request carries the text that answered the previous compaction of its topic.
    answered: dict[str, str] = {}
    texts = []
    for envelope in conversation.out:
        p = envelope.payload
        if envelope.type == te.TOPIC_COMPACTION_REQUESTED:
            assert p["previous_summary"] == answered.get(p["topic_id"])
        elif envelope.type == te.TOPIC_COMPACTED:
            answered[p["topic_id"]] = p["summary"]
            texts.append(p["summary"])
    assert any(text.startswith("cached") for text in texts) and not all(text.startswith("cached") for text in texts)
