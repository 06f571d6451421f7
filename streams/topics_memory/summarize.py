"""Incremental topic summaries for compactions: the LLM (topic-summary-v1), behind the LLM result
cache, or the offline fallback."""

from __future__ import annotations

from dataclasses import dataclass

from core.llm.cache import LlmCache, cache_key
from domain.extractive import ExtractiveSummarizer
from core.llm.openai_provider import OpenAiLlm
from core.llm.port import ChatMessage, MalformedOutput
from core.llm.prompts import format_messages, load_prompt
from core.settings import Settings


@dataclass(frozen=True)
class TopicSummary:
    text: str
    model: str
    prompt_version: str


class LlmTopicSummarizer:
    """Renders the versioned topic prompt and asks any OpenAI-compatible model for the text."""

    def __init__(self, llm: OpenAiLlm, prompt_version: str) -> None:
        self._llm = llm
        self._prompt = load_prompt(prompt_version)  # fails at start-up for an unknown version

    @property
    def model(self) -> str:
        return self._llm.model

    @property
    def prompt_version(self) -> str:
        return self._prompt.version

    async def summarize(self, title: str, previous_summary: str | None, messages: list[ChatMessage],
                        upto_seq: int) -> TopicSummary:
        variables = {
            "topic_title": title or "(untitled)",
            "previous_summary": (previous_summary or "").strip() or "(none: this is the first summary)",
            "new_messages": format_messages(messages),
            "first_new_seq": min((m.seq for m in messages), default=upto_seq + 1),
            "upto_seq": upto_seq,
        }
        text = await self._llm.complete_messages(self._prompt.render(variables))
        if not text.strip():
            raise MalformedOutput("empty topic summary")
        return TopicSummary(text.strip(), self.model, self.prompt_version)

    async def aclose(self) -> None:
        await self._llm.aclose()


class ExtractiveTopicSummarizer:
    """The documented offline fallback (never LLM quality): central sentences of the previous
    summary and the archived messages, as "[seq] role: sentence" lines; nothing is dropped for
    being old, since a topic summary covers the topic's whole archive."""

    def __init__(self, max_chars: int) -> None:
        self._summarizer = ExtractiveSummarizer(max_chars=max_chars)

    @property
    def model(self) -> str:
        return self._summarizer.model

    @property
    def prompt_version(self) -> str:
        return self._summarizer.prompt_version

    async def summarize(self, title: str, previous_summary: str | None, messages: list[ChatMessage],
                        upto_seq: int) -> TopicSummary:
        text = self._summarizer.summarize(previous_summary, messages, 0, upto_seq)
        return TopicSummary(text or title, self.model, self.prompt_version)

    async def aclose(self) -> None:
        return None


TOPIC_SUMMARY_KIND = "topic_summary"  # public.llm_cache(.kind) and public.llm_cache_usage(.kind)


@dataclass(frozen=True)
class TopicSummaryCall:
    """The arguments of one `summarize` call (a batch replay asks the cache for many at once)."""

    title: str
    previous_summary: str | None
    messages: list[ChatMessage]
    upto_seq: int


def topic_summary_key(model: str, prompt_version: str, call: TopicSummaryCall) -> str:
    """The cache key of a call: everything the rendered prompt holds (the messages' dates are not in it)."""
    inputs = {
        "title": call.title,
        "previous": call.previous_summary,
        "messages": [[m.seq, m.role, m.content] for m in call.messages],
        "upto_seq": call.upto_seq,
    }
    return cache_key(TOPIC_SUMMARY_KIND, model, prompt_version, inputs)


class CachedTopicSummarizer:
    """The LLM topic summarizer behind public.llm_cache: same model, prompt version and inputs
    -> the same summary, shared by every generation. Only a non-empty summary is stored; a
    failed call stores nothing (its LlmError reaches the stage as before)."""

    def __init__(self, inner: LlmTopicSummarizer, cache: LlmCache) -> None:
        self.inner, self.cache = inner, cache

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def prompt_version(self) -> str:
        return self.inner.prompt_version

    def key(self, call: TopicSummaryCall) -> str:
        return topic_summary_key(self.model, self.prompt_version, call)

    async def cached_many(self, calls: list[TopicSummaryCall]) -> list[TopicSummary | None]:
        """The cached summaries of many calls with one lookup; None where not cached."""
        if not calls:
            return []
        keys = [self.key(call) for call in calls]
        found = await self.cache.get_many(keys, TOPIC_SUMMARY_KIND)
        return [_cached_summary(found.get(key)) for key in keys]

    async def summarize(self, title: str, previous_summary: str | None, messages: list[ChatMessage],
                        upto_seq: int) -> TopicSummary:
        key = self.key(TopicSummaryCall(title, previous_summary, messages, upto_seq))
        cached = await self.cache.get(key, TOPIC_SUMMARY_KIND)
        if cached is not None:
            summary = _cached_summary(cached)
            if summary is not None:
                return summary
            await self.cache.forget(key)  # not a summary (never stored so): asked again
        summary = await self.inner.summarize(title, previous_summary, messages, upto_seq)
        if summary.text.strip():
            await self.cache.put(key, TOPIC_SUMMARY_KIND, self.model, self.prompt_version, {
                "text": summary.text, "model": summary.model, "prompt_version": summary.prompt_version,
            })
        return summary

    async def aclose(self) -> None:
        await self.inner.aclose()
        await self.cache.aclose()


def _cached_summary(cached: object) -> TopicSummary | None:
    """A stored entry as a summary; None for anything else (no entry, or not one this module wrote)."""
    if not isinstance(cached, dict):
        return None
    text, model, prompt_version = cached.get("text"), cached.get("model"), cached.get("prompt_version")
    if not (isinstance(text, str) and text.strip() and isinstance(model, str) and isinstance(prompt_version, str)):
        return None
    return TopicSummary(text, model, prompt_version)


TopicSummarizer = CachedTopicSummarizer | LlmTopicSummarizer | ExtractiveTopicSummarizer


def make_topic_summarizer(settings: Settings) -> TopicSummarizer:
    """"openai" -> the LLM with TopicSettings.summary_prompt_version, behind the LLM result cache
    unless `llm.cache_enabled` is off; else the offline fallback (deterministic CPU, never cached)."""
    if settings.llm.provider == "openai":
        llm = LlmTopicSummarizer(OpenAiLlm.from_settings(settings.llm), settings.topics.summary_prompt_version)
        if settings.llm.cache_enabled:
            return CachedTopicSummarizer(llm, LlmCache(settings.postgres.dsn, settings.kafka.topic_prefix,
                                                       settings.generation))
        return llm
    return ExtractiveTopicSummarizer(settings.llm.extractive_max_chars)
