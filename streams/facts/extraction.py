"""Chunk summary + fact extraction (seeds 003, 001): strict JSON parsing, gates, offline rules."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from streams.facts.offline import ExistingFact, is_worth_it, offline_facts, offline_summary

CATEGORIES = ("personality", "hobby", "relationship", "milestone", "occupation", "preference", "habit", "other")
MEMORY_TYPES = ("decision", "insight", "fact", "preference", "project", "conversation", "general")
DEFAULT_IMPORTANCE = 3
OFFLINE_EXTRACTOR = "offline-rules-v2"  # recorded on rows so they never claim LLM quality

RELATIONS = ("new", "duplicate", "contradicts", "elaborates")  # a fact vs an existing memory
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
_TRUE, _FALSE = {"true", "yes"}, {"false", "no"}


class MalformedExtraction(ValueError):
    """The model's answer is not the required shape; `reason` says what is wrong."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Turn(Protocol):
    """Any message with a role and text (core.llm ChatMessage fits)."""

    role: str
    content: str


@dataclass(frozen=True)
class ExtractedFact:
    category: str
    content: str
    importance: int = DEFAULT_IMPORTANCE
    tags: tuple[str, ...] = ()
    memory_type: str = "fact"
    # Against the related existing memories the extractor was shown: "duplicate" (merge),
    # "contradicts" (an update: supersede), "elaborates", or None/"new".
    relation: str | None = None
    target_fact_id: str | None = None


@dataclass(frozen=True)
class ExtractionResult:
    summary: str
    facts: tuple[ExtractedFact, ...] = ()
    remapped_categories: tuple[str, ...] = ()  # unknown labels that became "other"
    extractor: str = "llm"


def _load(raw: str | bytes | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(raw, Mapping):
        return raw
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = text.strip()
    fenced = _FENCE.match(text)  # one surrounding ```json fence is tolerated, nothing else
    try:
        data = json.loads(fenced.group(1) if fenced else text)
    except ValueError as exc:
        raise MalformedExtraction(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MalformedExtraction(f"expected a JSON object, got {type(data).__name__}")
    return data


def _importance(value: Any, where: str) -> int:
    if value is None:
        return DEFAULT_IMPORTANCE
    try:
        number = float(value) if not isinstance(value, bool) else float("nan")
    except (TypeError, ValueError):
        number = float("nan")
    if number != number:
        raise MalformedExtraction(f"{where}: importance must be a number 1-5, got {value!r}")
    return max(1, min(5, round(number)))


def _tags(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise MalformedExtraction(f"{where}: tags must be a list of strings")
    return tuple(dict.fromkeys(t.strip().lower() for t in value if t.strip()))


def _fact(item: Any, index: int) -> tuple[ExtractedFact, str | None]:
    where = f"facts[{index}]"
    if not isinstance(item, dict):
        raise MalformedExtraction(f"{where} is not an object")
    content = item.get("content")
    if not isinstance(content, str) or not content.strip():
        raise MalformedExtraction(f"{where} has no content")
    label = item.get("category")
    category = label.strip().lower() if isinstance(label, str) else ""
    remapped = None if category in CATEGORIES else str(label)
    kind = item.get("memory_type")
    kind = kind.strip().lower() if isinstance(kind, str) else "fact"
    relation = item.get("relation")
    relation = relation.strip().lower() if isinstance(relation, str) else None
    target = item.get("target_fact_id", item.get("target"))
    target = str(target).strip() if isinstance(target, (str, int)) and not isinstance(target, bool) else None
    if relation not in RELATIONS or relation == "new" or not target:
        relation, target = None, None
    return ExtractedFact(category if remapped is None else "other", " ".join(content.split()),
                         _importance(item.get("importance"), where), _tags(item.get("tags"), where),
                         kind if kind in MEMORY_TYPES else "general", relation, target), remapped


def parse_extraction(raw: str | bytes | Mapping[str, Any]) -> ExtractionResult:
    """Seed 003's {"summary", "facts": [{"category", "content"}]} plus seed 001's optional
    importance (1-5, default 3, clamped), tags and memory_type, and an optional "relation" +
    "target" (an existing memory's id) per fact. Raises MalformedExtraction."""
    data = _load(raw)
    summary = data.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        raise MalformedExtraction("missing or empty summary")
    facts = data.get("facts", None)
    if not isinstance(facts, list):
        raise MalformedExtraction("facts is missing or not a list")
    parsed, remapped, seen = [], [], set()
    for index, item in enumerate(facts):
        fact, label = _fact(item, index)
        if label is not None:
            remapped.append(label)
        if fact.content.casefold() not in seen:  # the same fact twice in one answer counts once
            seen.add(fact.content.casefold())
            parsed.append(fact)
    return ExtractionResult(summary.strip(), tuple(parsed), tuple(remapped))


def parse_gate(raw: str | bytes | Mapping[str, Any]) -> tuple[bool, str]:
    """Seed 001's cheap gate answer {"worth_remembering": bool, "reason": str}."""
    data = _load(raw)
    verdict = data.get("worth_remembering")
    if isinstance(verdict, str) and verdict.strip().lower() in _TRUE | _FALSE:
        verdict = verdict.strip().lower() in _TRUE
    if not isinstance(verdict, bool):
        raise MalformedExtraction("worth_remembering must be true or false")
    reason = data.get("reason", "")
    return verdict, reason.strip() if isinstance(reason, str) else ""


# --- offline rules: a documented fallback, never LLM quality (streams/facts/offline.py) -----


def heuristic_gate(messages: Sequence[Turn], min_content_words: int = 6) -> tuple[bool, str]:
    """Worth extracting if a human speaker made a first-person statement, or wrote at least
    `min_content_words` words that are neither chatter nor stopwords."""
    return is_worth_it(messages, min_content_words)


def extract_offline(messages: Sequence[Turn], max_summary_chars: int = 1000,
                    existing: Sequence[ExistingFact] = ()) -> ExtractionResult:
    """Facts from every human speaker (first-person statements, rewritten by name, relative
    dates resolved, typed and ranked by rules, checked against `existing`) and a summary of
    the densest sentences within `max_summary_chars`. A fallback only."""
    facts = tuple(_fact(item, index)[0] for index, item in enumerate(offline_facts(messages, existing)))
    summary = offline_summary(messages, max_summary_chars)
    return ExtractionResult(summary or "Small talk only.", facts, extractor=OFFLINE_EXTRACTOR)
