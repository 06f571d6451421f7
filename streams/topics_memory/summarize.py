"""Incremental topic summaries for compactions: the LLM (topic-summary-v1) or the offline fallback."""

from __future__ import annotations

from dataclasses import dataclass

from memory_agent.llm.extractive import ExtractiveSummarizer
from memory_agent.llm.openai_provider import OpenAiLlm
from memory_agent.llm.port import ChatMessage, MalformedOutput
from memory_agent.llm.prompts import format_messages, load_prompt
from memory_agent.settings import Settings


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


TopicSummarizer = LlmTopicSummarizer | ExtractiveTopicSummarizer


def make_topic_summarizer(settings: Settings) -> TopicSummarizer:
    """"openai" -> the LLM with TopicSettings.summary_prompt_version; else the offline fallback."""
    if settings.llm.provider == "openai":
        return LlmTopicSummarizer(OpenAiLlm.from_settings(settings.llm), settings.topics.summary_prompt_version)
    return ExtractiveTopicSummarizer(settings.llm.extractive_max_chars)
