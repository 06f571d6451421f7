"""Seed 001's two tiers over one chunk: a cheap gate, then seed 003's summary + facts call."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Sequence

from domain.dates import annotate, format_date
from domain.speakers import speaker_of
from core.llm.port import ChatMessage, JsonCompleter, LlmError
from core.settings import Settings
from schemas.facts_events import GateVerdict
from streams.facts.extraction import (
    OFFLINE_EXTRACTOR, ExtractionResult, MalformedExtraction, extract_offline, heuristic_gate, parse_extraction,
    parse_gate,
)
from streams.facts.offline import ExistingFact

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
        self.summary_chars = settings.facts.summary_max_chars

    async def extract(self, messages: Sequence[ChatMessage], existing: Sequence[ExistingFact] = ()) -> Extraction:
        """Raises LlmError / MalformedExtraction: the caller records a failed attempt (no state).
        `existing`: the owner's related current facts, so the extractor can say which one a
        new fact repeats or updates (seed 001)."""
        gate = await self._gate(messages)
        if not gate.worth_remembering:
            # Nothing worth the extractor: the chunk still gets a (rule-based) summary, no facts.
            offline = extract_offline(messages, self.summary_chars)
            return Extraction(ExtractionResult(offline.summary, (), (), OFFLINE_EXTRACTOR), gate,
                              OFFLINE_EXTRACTOR, OFFLINE_EXTRACTOR)
        if self.completer is None:
            result = extract_offline(messages, self.summary_chars, existing)
            return Extraction(self._capped(result), gate, OFFLINE_EXTRACTOR, OFFLINE_EXTRACTOR)
        output = await self.completer.complete_json(
            self.prompt_version, {"messages": format_dated(messages), "existing": format_existing(existing)},
            model=self.model, validate=parse_extraction)
        result = _targets(parse_extraction(output.data), existing)
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
                self.gate_prompt, {"messages": format_dated(messages)}, model=self.gate_model,
                validate=parse_gate)
            worth, reason = parse_gate(output.data)
        except (LlmError, MalformedExtraction) as exc:
            # The gate only saves money: when it fails, the extractor decides.
            log.warning("gate failed, extracting anyway: %s", exc)
            return GateVerdict(worth_remembering=True, reason=f"gate failed: {exc}"[:500],
                               method="llm-failed-open", model=self.gate_model)
        return GateVerdict(worth_remembering=worth, reason=reason[:500], method="llm", model=self.gate_model)


def format_dated(messages: Sequence[ChatMessage]) -> str:
    """One line per message for a prompt, "[seq] 8 May 2023, Caroline: text", relative dates
    resolved; system and tool messages left out (seed 001: too noisy to remember)."""
    lines = []
    for m in messages:
        spoken = speaker_of(m.role, m.content)
        if spoken is None:
            continue
        day = f"{format_date(m.occurred_at)}, " if m.occurred_at is not None else ""
        who = spoken.speaker if spoken.named else m.role
        lines.append(f"[{m.seq}] {day}{who}: {annotate(spoken.text, m.occurred_at)}")
    return "\n".join(lines) or "(none)"


def format_existing(existing: Sequence[ExistingFact]) -> str:
    return "\n".join(f"[F{i}] {fact.content}" for i, fact in enumerate(existing, start=1)) or "(none)"


def _targets(result: ExtractionResult, existing: Sequence[ExistingFact]) -> ExtractionResult:
    """The model names related memories by their prompt id ("F2"): map them to fact ids; an id
    it was never shown drops the relation (the projector's own dedup rules then decide)."""
    ids = {f"F{i}": fact.fact_id for i, fact in enumerate(existing, start=1)}
    ids.update({fact.fact_id: fact.fact_id for fact in existing})
    facts = []
    for fact in result.facts:
        target = ids.get((fact.target_fact_id or "").strip("[] ").upper()) or ids.get(fact.target_fact_id or "")
        facts.append(replace(fact, target_fact_id=target, relation=fact.relation if target else None))
    return replace(result, facts=tuple(facts))
