"""Build the configured summarizer / JSON completer from Settings."""

from __future__ import annotations

from memory_agent.llm.extractive import ExtractiveSummarizer
from memory_agent.llm.openai_provider import OpenAiLlm
from memory_agent.llm.port import Summarizer
from memory_agent.settings import Settings


def make_summarizer(settings: Settings) -> Summarizer:
    """"openai" -> OpenAiLlm; "extractive" (the offline default) -> ExtractiveSummarizer."""
    if settings.llm.provider == "openai":
        return OpenAiLlm.from_settings(settings.llm)
    return ExtractiveSummarizer(max_chars=settings.llm.extractive_max_chars)


def make_json_completer(settings: Settings) -> OpenAiLlm | None:
    """The LLM for JSON tasks (chunk facts, gate), or None when running offline."""
    if settings.llm.provider == "openai":
        return OpenAiLlm.from_settings(settings.llm)
    return None
