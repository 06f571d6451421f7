"""Language-model port: sliding-window summaries and JSON answers, OpenAI-compatible or offline."""

from memory_agent.llm.extractive import ExtractiveSummarizer
from memory_agent.llm.factory import make_json_completer, make_summarizer
from memory_agent.llm.openai_provider import OpenAiLlm, parse_json_object
from memory_agent.llm.port import (
    ChatMessage,
    JsonCompleter,
    JsonOutput,
    LlmError,
    MalformedOutput,
    Summarizer,
    SummaryOutput,
)
from memory_agent.llm.prompts import Prompt, format_messages, load_prompt

__all__ = [
    "ChatMessage",
    "ExtractiveSummarizer",
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
    "make_json_completer",
    "make_summarizer",
    "parse_json_object",
]
