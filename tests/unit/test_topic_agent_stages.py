"""The topic agent's stages and settings: embedding batches, topic summaries, calibration on MiniLM."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from pydantic import ValidationError

from core.embeddings import EmbeddingError, make_embedder
from core.llm.port import ChatMessage
from core.settings import Settings, TopicSettings
from domain.topics.archive import pack_bytes, to_json_bytes
from schemas import topic_events as te
from schemas.codec import decode, encode, new_event
from streams.topics_memory import (
    TopicConfig,
    TopicMessage,
    TopicsState,
    UserMessage,
    compress_bytes,
    decompress_bytes,
    merge_archive_bytes,
    step,
)
from streams.topics_memory.stage import EmbeddingStage
from streams.topics_memory.summarize import (
    ExtractiveTopicSummarizer,
    LlmTopicSummarizer,
    make_topic_summarizer,
)
from tests.integration.test_topics import CONVERSATION, WORKER_ENV
from tests.support.fake_openai import fake_openai  # noqa: F401 (the fixture)


def request(seq: int, content: str, attempt: int = 1):
    envelope = new_event(te.TOPIC_EMBEDDING_REQUESTED, te.TopicEmbeddingRequested(seq=seq, content=content,
                                                                                  attempt=attempt),
                         tenant_id="t", conversation_id="c", user_id="u", subject_id="s", seq=seq)
    return decode(encode(envelope))


class FakeEmbedder:
    model, dimensions = "fake", 3

    def __init__(self, vectors=None, error: Exception | None = None) -> None:
        self.vectors, self.error, self.calls = vectors, error, []

    async def embed_documents(self, texts):
        self.calls.append(list(texts))
        if self.error:
            raise self.error
        return np.asarray(self.vectors, dtype=np.float32)


def payloads(envelopes):
    return [(e.type, decode(encode(e)).payload) for e in envelopes]


async def test_one_call_embeds_a_whole_batch_and_answers_each_request():
    embedder = FakeEmbedder([[3.0, 4.0, 0.0], [0.0, 0.0, 2.0]])
    out = await EmbeddingStage(embedder).handle([request(0, "a"), request(4, "b", attempt=2)])
    assert embedder.calls == [["a", "b"]]
    (t0, p0), (t1, p1) = payloads(out)
    assert (t0, p0.seq, p0.attempt, p0.embedding) == (te.TOPIC_MESSAGE_EMBEDDED, 0, 1, [0.6, 0.8, 0.0])
    assert (p1.seq, p1.attempt, p1.embedding, p1.model) == (4, 2, [0.0, 0.0, 1.0], "fake")
    assert [(e.seq, e.subject_id) for e in out] == [(0, "s"), (4, "s")]


async def test_a_zero_vector_fails_for_good_and_a_provider_error_as_it_says():
    out = await EmbeddingStage(FakeEmbedder([[0.0, 0.0, 0.0]])).handle([request(0, "")])
    ((kind, failed),) = payloads(out)
    assert kind == te.TOPIC_EMBEDDING_FAILED and failed.retryable is False
    for error, retryable in ((EmbeddingError("429", retryable=True), True), (RuntimeError("onnx crashed"), True),
                             (EmbeddingError("bad key", retryable=False), False)):
        out = await EmbeddingStage(FakeEmbedder(error=error)).handle([request(0, "a"), request(2, "b")])
        assert [(k, p.seq, p.retryable) for k, p in payloads(out)] == [
            (te.TOPIC_EMBEDDING_FAILED, 0, retryable), (te.TOPIC_EMBEDDING_FAILED, 2, retryable)]


async def test_the_llm_summary_builds_on_the_previous_one_with_the_topic_prompt(fake_openai):
    settings = Settings(llm=fake_openai.llm_settings(cache_enabled=False))  # the cache: test_topic_summary_cache
    summarizer = make_topic_summarizer(settings)
    assert isinstance(summarizer, LlmTopicSummarizer) and summarizer.prompt_version == "topic-summary-v1"
    messages = [ChatMessage(9, "user", "The brakes squeak."), ChatMessage(10, "assistant", "Bed them in.")]
    summary = await summarizer.summarize("Car brakes", "The pads were worn.", messages, 10)
    sent = fake_openai.chat_requests[-1].user_content
    assert sent.startswith("Topic: Car brakes") and "The pads were worn." in sent
    assert "[9] user: The brakes squeak." in sent and "before seq 9" in sent and "up to seq 10" in sent
    assert summary.text.startswith("FAKE SUMMARY") and summary.model == "fake-llm"
    await summarizer.aclose()


async def test_the_offline_summary_keeps_the_whole_topic_not_a_window():
    summarizer = make_topic_summarizer(Settings())
    assert isinstance(summarizer, ExtractiveTopicSummarizer)
    first = await summarizer.summarize("t", None, [ChatMessage(0, "user", "Carbonara needs guanciale.")], 0)
    later = await summarizer.summarize("t", first.text, [ChatMessage(40, "user", "Pecorino, not parmesan.")], 40)
    assert "[0] user: Carbonara needs guanciale." in later.text and "[40] user:" in later.text
    assert later.model == later.prompt_version == "extractive-v2"


def test_topic_settings_come_from_the_environment_and_are_checked(monkeypatch):
    for name, value in WORKER_ENV.items():
        monkeypatch.setenv(name, value)
    config = TopicConfig.from_settings(Settings().topics)
    assert (config.similarity_threshold, config.max_messages_per_topic, config.recent_message_keep) == (0.175, 6, 2)
    assert config.center_on_conversation and config.session_gap_seconds == 3600.0
    assert TopicConfig.from_settings(TopicSettings()) == TopicConfig()  # the seed's defaults, unchanged
    with pytest.raises(ValidationError, match="recent_message_keep"):
        TopicSettings(max_messages_per_topic=4, recent_message_keep=4)


def test_the_stored_archive_is_gzip_bytes_and_merging_twice_changes_nothing():
    first = [TopicMessage(0, "user", "Grüße aus Kyōto", 1.0), TopicMessage(1, "assistant", "hi", 2.0)]
    packed = compress_bytes(first)
    assert packed[:2] == b"\x1f\x8b" and json.loads(gzip.decompress(packed))[0]["content"] == "Grüße aus Kyōto"
    merged = merge_archive_bytes(packed, [TopicMessage(2, "user", "more", 3.0), first[1]])
    assert [m.seq for m in decompress_bytes(merged)] == [0, 1, 2]
    assert merge_archive_bytes(merged, [TopicMessage(2, "user", "more", 3.0)]) == merged
    assert decompress_bytes(None) == [] and decompress_bytes(b"") == []
    # The projector's one encoding: the same stored bytes, and the JSON's length it records.
    assert pack_bytes(first) == (packed, len(to_json_bytes(first)))


@pytest.fixture(scope="module")
async def conversation_vectors():
    embedder = make_embedder(Settings())
    return await embedder.embed_documents([user for _, user, _ in CONVERSATION])


@pytest.mark.parametrize(("threshold", "topics"), [(0.3, 3), (0.7, 10)])
async def test_minilm_needs_a_lower_threshold_than_the_seed_for_three_subjects(conversation_vectors, threshold,
                                                                               topics):
    """The integration test's calibration: at 0.3 MiniLM finds the three subjects; at seed 004's
    0.7 every message of this conversation starts a topic of its own (docs/topics.md)."""
    config, state, owners = TopicConfig(similarity_threshold=threshold), TopicsState("c"), {}
    for i, ((subject, user, _), vector) in enumerate(zip(CONVERSATION, conversation_vectors)):
        state, _ = step(state, UserMessage(2 * i, user, vector, float(i)), float(i), config)
        owners.setdefault(state.active_topic_id, set()).add(subject)
    assert len(state.topics) == topics and all(len(subjects) == 1 for subjects in owners.values())


async def test_the_integration_chat_finds_its_three_subjects_at_the_defaults(conversation_vectors):
    """The active-topic bonus keeps follow-ups in their topic without merging subjects."""
    config, state, owners = TopicConfig.from_settings(Settings().topics), TopicsState("c"), {}
    for i, ((subject, user, _), vector) in enumerate(zip(CONVERSATION, conversation_vectors)):
        state, _ = step(state, UserMessage(2 * i, user, vector, float(i)), float(i), config)
        owners.setdefault(state.active_topic_id, set()).add(subject)
    assert all(len(subjects) == 1 for subjects in owners.values()) and len(state.topics) == 3


def test_topic_matching_is_chosen_per_embedding_model_unless_set(monkeypatch):
    for name in ("MEMORY_TOPICS__SIMILARITY_THRESHOLD", "MEMORY_TOPICS__ACTIVE_TOPIC_BONUS", "MEMORY_EMBEDDING__MODEL"):
        monkeypatch.delenv(name, raising=False)
    minilm = Settings().topics
    assert (minilm.similarity_threshold, minilm.active_topic_bonus, minilm.center_on_conversation) == (0.175, 0.15, True)
    monkeypatch.setenv("MEMORY_EMBEDDING__PROVIDER", "openai")
    monkeypatch.setenv("MEMORY_EMBEDDING__MODEL", "text-embedding-3-small")
    other = Settings().topics
    assert (other.similarity_threshold, other.active_topic_bonus) == (0.7, 0.0)  # seed 004, unmeasured models
    assert other.center_on_conversation is False  # ...on the seed's plain cosines
    monkeypatch.setenv("MEMORY_TOPICS__SIMILARITY_THRESHOLD", "0.55")
    assert TopicConfig.from_settings(Settings().topics).similarity_threshold == 0.55  # an explicit value wins


async def test_the_default_settings_find_the_subjects_of_a_multi_subject_chat():
    """Issue 12: at the shipped defaults (offline MiniLM) six interleaved subjects become about
    six topics, most messages in their subject's, titled by their first sentence (the
    per-threshold numbers: bench/topic_threshold_bench.py, docs/topics.md)."""
    from tests.support.topic_subjects import conversation, score

    settings = Settings()
    chat = conversation(with_replies=False)
    vectors = await make_embedder(settings).embed_documents([text for _, _, text in chat])
    config, state, topics = TopicConfig.from_settings(settings.topics), TopicsState("c"), []
    for seq, ((_, _, text), vector) in enumerate(zip(chat, vectors)):
        state, _ = step(state, UserMessage(seq, text, vector, float(seq)), float(seq), config)
        topics.append(state.active_topic_id)
    count, right = score([subject for subject, _, _ in chat], topics)
    assert 5 <= count <= 7 and right >= 0.75, (count, right)
    assert "I want to bake my first sourdough bread this weekend." in [t.title for t in state.topics]
    # At seed 004's 0.7 alone, the same chat falls apart (what issue 12 saw).
    seed, state, topics = TopicConfig(), TopicsState("c"), []
    for seq, ((_, _, text), vector) in enumerate(zip(chat, vectors)):
        state, _ = step(state, UserMessage(seq, text, vector, float(seq)), float(seq), seed)
        topics.append(state.active_topic_id)
    assert score([subject for subject, _, _ in chat], topics)[0] > 30
