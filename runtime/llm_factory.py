"""Build the configured summarizer / JSON completer from Settings."""

from __future__ import annotations

from core.llm.cache import CachedJsonCompleter, CachedSummarizer, LlmCache
from domain.extractive import ExtractiveSummarizer
from core.llm.openai_provider import OpenAiLlm
from core.llm.port import Summarizer
from core.settings import Settings


def _cache(settings: Settings) -> LlmCache:
    return LlmCache(settings.postgres.dsn, settings.kafka.topic_prefix, settings.generation)


def make_summarizer(settings: Settings) -> Summarizer:
    """"openai" -> OpenAiLlm (behind the result cache); "extractive" (offline default) -> ExtractiveSummarizer."""
    if settings.llm.provider == "openai":
        llm = OpenAiLlm.from_settings(settings.llm)
        return CachedSummarizer(llm, _cache(settings)) if settings.llm.cache_enabled else llm
    return ExtractiveSummarizer(max_chars=settings.llm.extractive_max_chars)


def make_json_completer(settings: Settings) -> OpenAiLlm | CachedJsonCompleter | None:
    """The LLM for JSON tasks (chunk facts, gate), or None when running offline."""
    if settings.llm.provider == "openai":
        llm = OpenAiLlm.from_settings(settings.llm)
        return CachedJsonCompleter(llm, _cache(settings)) if settings.llm.cache_enabled else llm
    return None


def preload_llm_client(settings: Settings) -> None:
    """Import the `openai` client at a worker's start when it will call the LLM: ~1 CPU-s once,
    otherwise paid by the first summary's call in the middle of the stream (docs/scaling.md)."""
    if settings.llm.provider == "openai":
        import openai  # noqa: F401
