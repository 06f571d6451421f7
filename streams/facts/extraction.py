"""Chunk summary + fact extraction (seeds 003, 001): strict JSON parsing, gates, offline rules."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

CATEGORIES = ("personality", "hobby", "relationship", "milestone", "occupation", "preference", "habit", "other")
MEMORY_TYPES = ("decision", "insight", "fact", "preference", "project", "conversation", "general")
DEFAULT_IMPORTANCE = 3
OFFLINE_EXTRACTOR = "offline-rules-v1"  # recorded on rows so they never claim LLM quality

_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_TRUE, _FALSE = {"true", "yes"}, {"false", "no"}


class MalformedExtraction(ValueError):
    """The model's answer is not the required shape; `reason` says what is wrong."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Turn(Protocol):
    """Any message with a role and text (memory_agent.llm ChatMessage fits)."""

    role: str
    content: str


@dataclass(frozen=True)
class ExtractedFact:
    category: str
    content: str
    importance: int = DEFAULT_IMPORTANCE
    tags: tuple[str, ...] = ()
    memory_type: str = "fact"


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
    return ExtractedFact(category if remapped is None else "other", " ".join(content.split()),
                         _importance(item.get("importance"), where), _tags(item.get("tags"), where),
                         kind if kind in MEMORY_TYPES else "general"), remapped


def parse_extraction(raw: str | bytes | Mapping[str, Any]) -> ExtractionResult:
    """Seed 003's {"summary", "facts": [{"category", "content"}]} plus seed 001's optional
    importance (1-5, default 3, clamped), tags and memory_type. Raises MalformedExtraction."""
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


# --- offline rules: a documented fallback, never LLM quality -------------------------------

_FIRST_PERSON = re.compile(
    r"^(?:i|we)\s+(?:was|have|had|live|lived|work|worked|like|love|enjoy|prefer|hate|dislike|"
    r"play|usually|always|never|often|moved|grew|studied|graduated|retired|own|drink|eat|speak|"
    r"run|cook|teach|started|finished|bought|met|married|visited|adopted|lost|won|built|founded|"
    r"joined|quit|became)\b"
    r"|^(?:i'm|i am|we're|we are)\s+(?:a|an|from|married|single|divorced|allergic|vegetarian|vegan|"
    r"retired|learning|working|studying|living|training|moving|expecting|\d)\b"
    r"|^(?:i've|we've)\s+(?:been|lived|worked|had|always|never)\b"
    r"|^(?:my|our)\s+\w+")
_NOT_A_FACT = re.compile(  # questions, requests and conversational filler are not facts
    r"\?$|^(?:i|we) (?:was|were) (?:wondering|just|going)\b|^(?:i|we) have (?:a|another) question"
    r"|^(?:my|our) (?:question|point|bad|pleasure|apologies)\b")
_RULES = tuple((category, frozenset(words.split())) for category, words in (
    # first match wins; the order resolves overlaps ("my daughter was born" is a milestone)
    ("milestone", "born graduated graduation retired promoted anniversary birthday moved died"
                  " passed engaged founded"),
    ("relationship", "daughter son wife husband mother mom mum father dad brother sister friend"
                     " partner girlfriend boyfriend married divorced family kids children cousin"
                     " aunt uncle grandmother grandfather grandma grandpa"),
    ("occupation", "work worked working job engineer developer teacher doctor nurse company"
                   " office career boss colleague colleagues profession"),
    ("habit", "usually always every daily weekly routine habit often"),
    ("hobby", "play playing hobby guitar piano painting hiking running cycling chess garden"
              " gardening football soccer tennis climbing photography knitting reading"),
    ("preference", "prefer like love enjoy hate dislike favorite favourite rather"),
    ("personality", "shy introvert introverted extrovert patient anxious curious organised"
                    " organized calm stubborn"),
))
_NOISE = frozenset(
    "hi hello hey thanks thank you ok okay sure yes no yeah yep nope cool great nice good bye"
    " goodbye see ya got it alright right fine lol haha welcome a an the and or but to of in on"
    " at for with is are was that this be so i me my we you your do did".split())


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def _category(words: list[str]) -> tuple[str, str | None]:
    for category, keywords in _RULES:
        for word in words:
            if word in keywords:
                return category, word
    return "other", None


def _fact_sentences(messages: Sequence[Turn]) -> list[str]:
    found = []
    for message in messages:
        if message.role != "user":  # only what the user said about themselves
            continue
        for sentence in _sentences(message.content):
            lowered = sentence.lower().replace("\u2019", "'")
            words = _WORD.findall(lowered)  # "I like it" has nothing to remember after the verb
            if _FIRST_PERSON.match(lowered) and not _NOT_A_FACT.search(lowered) \
                    and any(w not in _NOISE for w in words[2:]):
                found.append(sentence if sentence[-1] in ".!" else sentence + ".")
    return found


def heuristic_gate(messages: Sequence[Turn], min_content_words: int = 6) -> tuple[bool, str]:
    """Worth extracting if a user sentence is a first-person statement, or a user message
    has at least `min_content_words` words that are neither chatter nor stopwords."""
    if _fact_sentences(messages):
        return True, "user made a first-person statement"
    for message in (m for m in messages if m.role == "user"):
        content = [w for w in _WORD.findall(message.content.lower()) if w not in _NOISE]
        if len(content) >= min_content_words:
            return True, f"user message with {len(content)} content words"
    return False, "only greetings, acknowledgements or short chatter"


def extract_offline(messages: Sequence[Turn], max_summary_sentences: int = 3) -> ExtractionResult:
    """Keyword-rule facts (the user's first-person sentences, verbatim, importance 3) and a
    summary of up to `max_summary_sentences` sentences in conversation order, chosen by
    (is a fact sentence, words that are neither chatter nor stopwords). A fallback only."""
    found = _fact_sentences(messages)
    facts, seen = [], set()
    for sentence in found:
        category, keyword = _category(_WORD.findall(sentence.lower()))
        if sentence.casefold() not in seen:
            seen.add(sentence.casefold())
            facts.append(ExtractedFact(category, sentence, tags=(keyword,) if keyword else ()))
    pairs = [(m.role, s) for m in messages for s in _sentences(m.content)]
    ranked = sorted(range(len(pairs)), key=lambda i: (
        -(pairs[i][1] in found or pairs[i][1] + "." in found),
        -len([w for w in _WORD.findall(pairs[i][1].lower()) if w not in _NOISE]), i))
    chosen = sorted(i for i in ranked[:max_summary_sentences]
                    if any(w not in _NOISE for w in _WORD.findall(pairs[i][1].lower())))
    summary = " ".join(f"{pairs[i][0]}: {pairs[i][1]}" for i in chosen)
    return ExtractionResult(summary or "Small talk only.", tuple(facts), extractor=OFFLINE_EXTRACTOR)
