"""Language-model port: sliding-window summaries and JSON answers (OpenAI-compatible). The offline
extractive summarizer is pure rules (`domain/extractive.py`); the factories are in `runtime/llm_factory.py`."""

from core.llm.openai_provider import OpenAiLlm, parse_json_object
from core.llm.port import (
    ChatMessage,
    JsonCompleter,
    JsonOutput,
    LlmError,
    MalformedOutput,
    Summarizer,
    SummaryOutput,
)
from core.llm.prompts import Prompt, format_messages, load_prompt

__all__ = [
    "ChatMessage",
    "JsonCompleter",
    "JsonOutput",
    "LlmError",
    "MalformedOutput",
    "OpenAiLlm",
    "Prompt",
    "Summarizer",
    "SummaryOutput",
    "format_messages",
    "load_prompt",
    "parse_json_object",
]
