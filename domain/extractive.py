"""Offline, non-LLM summaries: sentences chosen for what they carry (names, numbers, places,
dates) and for how central they are (TF-IDF), within a length budget."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from domain.dates import MONTHS, WEEKDAYS, annotate, format_date
from domain.speakers import speaker_of
from core.llm.port import ChatMessage, SummaryOutput

MODEL = "extractive-v2"
PROMPT_VERSION = "extractive-v2"  # no prompt: the algorithm's version stands in for it

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
# A summary line this summarizer wrote: "[12] user: text", "[12] Caroline (8 May 2023): text"
# (the seq lets it drop exactly what slid out of the window; the day is kept with the line).
_LINE = re.compile(r"^\[(\d+)\] ([^:\[\]()]+?)(?: \(([^()]*)\))?: (.*)$")
_STOPWORDS = frozenset(
    "a an and are as at be but by can could did do does for from had has have he her him his"
    " how i i'm if in into is it it's its just me my no not of on or our she so than that the"
    " their them then there these they this to too up us was we were what when where which"
    " who will with would you your yes ok okay thanks thank please sure hi hello hey also"
    " about all any been being more most some such very".split()
)
_MAX_SENTENCE_SHARE = 0.45  # no single sentence may take more of the budget than this
_REDUNDANT = 0.8  # cosine above which a sentence repeats one already chosen
_RECENCY_WEIGHT = 1.0  # newest sentence scores up to (1 + this) times the oldest


@dataclass(frozen=True, slots=True)
class _Sentence:
    seq: int  # -1: from a previous summary without seq tags (e.g. an LLM one)
    role: str  # the speaker's name when the message had a "Name: " prefix
    text: str
    order: int  # position in conversation order, for output order and ties
    day: str | None = None  # "8 May 2023": when the message was written, if known


class ExtractiveSummarizer:
    """A documented fallback, never LLM quality: rows record model and prompt_version
    "extractive-v2" (the algorithm's version; there is no prompt).

    Candidates are the sentences of the previous summary still inside the window plus the
    sentences of the new messages; they are scored by TF-IDF centrality (similarity to the
    rest) weighted towards recent seqs, chosen greedily without near-duplicates within
    `max_chars`, and written in conversation order as "[seq] role: sentence" lines.
    Deterministic: the same input always gives the same text.
    """

    def __init__(self, *, max_chars: int = 600) -> None:
        if max_chars < 80:
            raise ValueError("max_chars must be at least 80")
        self._max_chars = max_chars

    @property
    def model(self) -> str:
        return MODEL

    @property
    def prompt_version(self) -> str:
        return PROMPT_VERSION

    async def summarize_window(
        self,
        previous_summary: str | None,
        new_messages: list[ChatMessage],
        window_start_seq: int,
        window_end_seq: int,
    ) -> SummaryOutput:
        text = self.summarize(previous_summary, new_messages, window_start_seq, window_end_seq)
        return SummaryOutput(text=text, model=MODEL, prompt_version=PROMPT_VERSION)

    async def aclose(self) -> None:
        return None

    def summarize(
        self,
        previous_summary: str | None,
        new_messages: list[ChatMessage],
        window_start_seq: int,
        window_end_seq: int,
    ) -> str:
        """The synchronous core (pure; cheap enough to call inline)."""
        candidates = _previous_sentences(previous_summary, window_start_seq)
        for message in sorted(new_messages, key=lambda m: m.seq):
            spoken = speaker_of(message.role, message.content)
            if spoken is None or not window_start_seq <= message.seq <= window_end_seq:
                continue  # system and tool messages are left out of memory
            at = message.occurred_at
            label = spoken.speaker if spoken.named else message.role
            day = format_date(at) if at is not None else None
            for text in _split(annotate(spoken.text, at)):
                candidates.append(_Sentence(message.seq, label, text, len(candidates), day))
        if not candidates:
            return ""
        limit = int(self._max_chars * _MAX_SENTENCE_SHARE)
        candidates = [
            _Sentence(c.seq, c.role, _clip(c.text, limit), c.order, c.day) for c in candidates
        ]
        chosen = _choose(candidates, self._max_chars, window_start_seq, window_end_seq)
        return _render(chosen)


def _previous_sentences(summary: str | None, window_start: int) -> list[_Sentence]:
    sentences: list[_Sentence] = []
    for line in (summary or "").splitlines():
        line = line.strip()
        if not line:
            continue
        tagged = _LINE.match(line)
        if tagged is None:  # untagged text (another summarizer's): keep, as the oldest
            sentences.extend(_Sentence(-1, "", s, len(sentences)) for s in _split(line))
            continue
        seq, role, day, text = int(tagged.group(1)), tagged.group(2), tagged.group(3), tagged.group(4)
        if seq < window_start:
            continue  # the window slid past it: dropped, as seed 000 requires
        for s in _split(text):
            sentences.append(_Sentence(seq, role, s, len(sentences), day))
    return sentences


def _split(text: str) -> list[str]:
    return [s for s in (" ".join(p.split()) for p in _SENTENCE_END.split(text)) if s]


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0] or text[: limit - 1]
    return cut + "…"


def _tfidf(sentences: list[_Sentence]) -> np.ndarray:
    docs = [[w for w in _WORD.findall(s.text.lower()) if w not in _STOPWORDS] for s in sentences]
    vocab = {w: i for i, w in enumerate(sorted({w for d in docs for w in d}))}
    matrix = np.zeros((len(docs), max(len(vocab), 1)), dtype=np.float64)
    for row, words in enumerate(docs):
        for w in words:
            matrix[row, vocab[w]] += 1.0
    df = np.count_nonzero(matrix, axis=0)
    idf = np.log((1 + len(docs)) / (1 + df)) + 1.0
    matrix = np.log1p(matrix) * idf
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


def _choose(
    sentences: list[_Sentence], max_chars: int, window_start: int, window_end: int
) -> list[_Sentence]:
    vectors = _tfidf(sentences)
    similarity = vectors @ vectors.T
    n = len(sentences)
    # Centrality: mean similarity to the others, plus a floor so that a lone sentence or
    # one sharing no words still counts by its own content.
    content = np.linalg.norm(vectors, axis=1) > 0
    centrality = (similarity.sum(axis=1) - np.diag(similarity)) / max(n - 1, 1)
    centrality = centrality + 0.1 * content
    span = max(window_end - window_start, 1)
    recency = np.array(
        [0.0 if s.seq < 0 else min(max((s.seq - window_start) / span, 0.0), 1.0) for s in sentences]
    )
    # What a sentence carries (names, numbers, dates) counts as much as how central it is.
    dense = np.array([density(s.text) for s in sentences])
    dense = dense / dense.max() if dense.max() > 0 else dense
    central = centrality / centrality.max() if centrality.max() > 0 else centrality
    score = (0.5 * central + dense) * (1.0 + _RECENCY_WEIGHT * recency)
    ranking = sorted(range(n), key=lambda i: (-round(float(score[i]), 12), -sentences[i].order))
    chosen: list[int] = []
    for i in ranking:
        if (not content[i] or dense[i] == 0) and chosen:
            continue  # "ok", "thanks!", "Aww!": only if nothing better exists
        if any(similarity[i, j] > _REDUNDANT for j in chosen):
            continue
        trial = sorted(chosen + [i], key=lambda k: sentences[k].order)
        if len(_render([sentences[k] for k in trial])) <= max_chars:
            chosen = trial
    return [sentences[k] for k in chosen]


def _render(sentences: list[_Sentence]) -> str:
    lines: list[str] = []
    untagged: list[str] = []
    last_key: tuple[int, str] | None = None
    for s in sentences:
        if s.seq < 0:
            untagged.append(s.text)
            continue
        if (s.seq, s.role) == last_key:
            lines[-1] += " " + s.text
        else:
            day = f" ({s.day})" if s.day else ""
            lines.append(f"[{s.seq}] {s.role}{day}: {s.text}")
            last_key = (s.seq, s.role)
    if untagged:
        lines.insert(0, " ".join(untagged))
    return "\n".join(lines)


# --- information density: what a summary must not lose ----------------------------------

_DATE_NOTE = re.compile(r"\((?:[^()]*\d{4}[^()]*)\)")
_CAPITALISED = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-zA-Z'\-]+")
_NUMBER = re.compile(r"\b\d[\d.,:/]*\b")
_QUOTED = re.compile(r"\"[^\"]{2,60}\"|'[^']{2,60}'")
_FILLER = frozenset(
    "hi hey hello bye goodbye wow aww oh ah ok okay cool great awesome amazing lovely nice sure yes yeah yep no nope"
    " thanks thank lol haha omg see ya soon good glad sounds sound fun that's it's what's how's really so totally"
    " true agree".split())
_TIME_WORDS = frozenset(m.lower() for m in MONTHS) | frozenset(WEEKDAYS) | frozenset(
    "yesterday today tomorrow week weekend month year ago last next summer winter spring autumn".split())


def split_sentences(text: str) -> list[str]:
    """Sentences of a message, whitespace normalised (the shared splitter of the offline paths)."""
    return _split(text)


def density(text: str) -> float:
    """What a sentence carries per character: names and other capitalised words (not the
    first word, not "I"), numbers, dates, quoted titles, and content words; a question
    counts half. Filler ("ok, thanks!") scores 0."""
    words = [w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS]
    names = [w for w in _CAPITALISED.findall(text) if w not in ("I", "I'm", "I've", "I'd", "I'll")]
    called = {n.lower() for n in names}
    if not any(w not in _FILLER and w not in called for w in words):
        return 0.0  # "Wow, that's cool, Caroline!": a name alone carries nothing
    info = (1.5 * min(len(names), 4) + 1.5 * min(len(_NUMBER.findall(text)), 3)
            + 2.0 * min(len(_DATE_NOTE.findall(text)), 2) + 1.0 * min(len(_QUOTED.findall(text)), 2)
            + 0.7 * min(sum(w in _TIME_WORDS for w in words), 2) + 0.35 * min(len(words), 12))
    if text.rstrip().endswith("?"):
        info *= 0.5
    return info / math.sqrt(len(text) / 80 + 1)


@dataclass(frozen=True, slots=True)
class DatedSentence:
    """One sentence for `dense_summary`: who said it, the text, and the day it was said."""

    speaker: str
    text: str
    day: str | None = None


def dense_summary(items: Sequence[DatedSentence], max_chars: int) -> str:
    """The densest sentences (see `density`) that fit in `max_chars`, near-duplicates dropped,
    written in conversation order: one line per run of a speaker, the day at each change of
    day ("Caroline (8 May 2023): ... "). Deterministic."""
    scored = [(density(item.text), i) for i, item in enumerate(items)]
    candidates = [i for score, i in sorted(scored, key=lambda p: (-round(p[0], 9), p[1])) if score > 0]
    if not candidates:
        candidates = [i for _, i in scored][:1]
    vectors = _tfidf([_Sentence(0, "", items[i].text, i) for i in range(len(items))]) if items else None
    limit = max(int(max_chars * _MAX_SENTENCE_SHARE), 40)
    clipped = [_clip(item.text, limit) for item in items]
    chosen: list[int] = []
    for i in candidates:
        if vectors is not None and any(float(vectors[i] @ vectors[j]) > _REDUNDANT for j in chosen):
            continue
        trial = sorted(chosen + [i])
        if len(_render_dated(items, clipped, trial)) <= max_chars:
            chosen = trial
    return _render_dated(items, clipped, chosen)


def _render_dated(items: Sequence[DatedSentence], texts: Sequence[str], chosen: Sequence[int]) -> str:
    lines: list[str] = []
    speaker = day = None
    for i in chosen:
        item = items[i]
        if item.day != day and item.day is not None:
            lines.append(f"{item.speaker} ({item.day}): {texts[i]}")
        elif item.speaker != speaker or not lines:
            lines.append(f"{item.speaker}: {texts[i]}")
        else:
            lines[-1] += " " + texts[i]
        speaker, day = item.speaker, item.day if item.day is not None else day
    return "\n".join(lines)
