"""Seed 001's two tiers over one chunk: a cheap gate, then seed 003's summary + facts call."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from memory_agent.llm.port import ChatMessage, JsonCompleter, LlmError
from memory_agent.llm.prompts import format_messages
from memory_agent.settings import Settings
from schemas.facts_events import GateVerdict
from streams.facts.extraction import (
    OFFLINE_EXTRACTOR, ExtractionResult, MalformedExtraction, extract_offline, heuristic_gate, parse_extraction,
    parse_gate,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Extraction:
    result: ExtractionResult
    gate: GateVerdict
    model: str
    prompt_version: str


def gate_method(settings: Settings, completer: JsonCompleter | None) -> tuple[str, str | None]:
    """("llm", model) | ("heuristic", None) | ("off", None). "auto" uses the LLM gate only when a
    distinct cheaper gate model is configured: the same model twice would cost more, not less."""
    facts, llm = settings.facts, settings.llm
    if facts.gate == "off":
        return "off", None
    gate_model = facts.gate_model or llm.gate_model
    extraction_model = facts.extraction_model or llm.model
    if completer is None or facts.gate == "heuristic":
        return "heuristic", None
    if facts.gate == "llm":
        return "llm", gate_model or extraction_model
    if gate_model and gate_model != extraction_model:
        return "llm", gate_model
    return "heuristic", None


class ChunkExtractor:
    """Gate, then extract: the LLM (JSON prompt, validated) or the offline rules."""

    def __init__(self, settings: Settings, completer: JsonCompleter | None) -> None:
        self.completer = completer
        self.method, self.gate_model = gate_method(settings, completer)
        self.gate_prompt = settings.llm.gate_prompt_version
        self.prompt_version = settings.facts.prompt_version or settings.llm.chunk_facts_prompt_version
        self.model = settings.facts.extraction_model or settings.llm.model
        self.max_facts = settings.facts.max_facts_per_chunk

    async def extract(self, messages: Sequence[ChatMessage]) -> Extraction:
        """Raises LlmError / MalformedExtraction: the caller records a failed attempt (no state)."""
        gate = await self._gate(messages)
        if not gate.worth_remembering:
            # Nothing worth the extractor: the chunk still gets a (rule-based) summary, no facts.
            offline = extract_offline(messages)
            return Extraction(ExtractionResult(offline.summary, (), (), OFFLINE_EXTRACTOR), gate,
                              OFFLINE_EXTRACTOR, OFFLINE_EXTRACTOR)
        if self.completer is None:
            result = extract_offline(messages)
            return Extraction(self._capped(result), gate, OFFLINE_EXTRACTOR, OFFLINE_EXTRACTOR)
        output = await self.completer.complete_json(
            self.prompt_version, {"messages": format_messages(list(messages))}, model=self.model,
            validate=parse_extraction)
        result = parse_extraction(output.data)
        return Extraction(self._capped(result), gate, output.model or self.model, output.prompt_version)

    def _capped(self, result: ExtractionResult) -> ExtractionResult:
        if len(result.facts) <= self.max_facts:
            return result
        return ExtractionResult(result.summary, result.facts[:self.max_facts], result.remapped_categories,
                                result.extractor)

    async def _gate(self, messages: Sequence[ChatMessage]) -> GateVerdict:
        if self.method == "off":
            return GateVerdict(worth_remembering=True, reason="gate off", method="off")
        if self.method == "heuristic":
            worth, reason = heuristic_gate(messages)
            return GateVerdict(worth_remembering=worth, reason=reason, method="heuristic")
        try:
            output = await self.completer.complete_json(
                self.gate_prompt, {"messages": format_messages(list(messages))}, model=self.gate_model,
                validate=parse_gate)
            worth, reason = parse_gate(output.data)
        except (LlmError, MalformedExtraction) as exc:
            # The gate only saves money: when it fails, the extractor decides.
            log.warning("gate failed, extracting anyway: %s", exc)
            return GateVerdict(worth_remembering=True, reason=f"gate failed: {exc}"[:500],
                               method="llm-failed-open", model=self.gate_model)
        return GateVerdict(worth_remembering=worth, reason=reason[:500], method="llm", model=self.gate_model)
