"""Pure parts of the context-quality benchmark: answer-word scoring, BM25 over messages, packing.

Score of a context for a question = the share of the answer's content words (lowercased,
punctuation stripped, stop words dropped) that occur among the context's words; a hit is at
least 80% of them. Month names and numbers are content words ("may" is not a stop word).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime

from domain.judge import STOP_WORDS as ANSWER_STOP_WORDS

HIT = 0.8
STOP_WORDS = ANSWER_STOP_WORDS  # one list: the judge's labelled score is this scorer (domain/judge.py)
_WORD = re.compile(r"[^\w]+", re.UNICODE)
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")


def words(text: str) -> list[str]:
    """Lowercased words with punctuation (anything not a letter or digit) as separators."""
    return [w for w in _WORD.sub(" ", text.lower().replace("_", " ")).split() if w]


def content_words(text: str) -> list[str]:
    """The answer's words that count: distinct, in order, stop words dropped."""
    seen: dict[str, None] = {}
    for word in words(text):
        if word not in STOP_WORDS:
            seen.setdefault(word, None)
    return list(seen)


def score(answer: str, context: str) -> float:
    """Share of the answer's content words found among the context's words (1.0 if it has none)."""
    wanted = content_words(answer)
    if not wanted:
        return 1.0
    present = set(words(context))
    return sum(w in present for w in wanted) / len(wanted)


_DATE = re.compile(r"(?:\b\d{1,2} )?\b(?:" + "|".join(MONTHS) + r") \d{4}\b")


def exact(answer: str, context: str) -> bool:
    """A stricter hit: the answer's words are found and its date (`7 May 2023`, `May 2023`), if it
    has one, appears as that phrase, not as a day, a month and a year scattered over other lines."""
    if not is_hit(score(answer, context)):
        return False
    found = _DATE.search(answer)
    return found is None or f" {' '.join(words(found[0]))} " in f" {' '.join(words(context))} "


def is_hit(value: float) -> bool:
    return value >= HIT - 1e-9


def date_words(when: datetime) -> str:
    """A message's date the way the answers write dates: `7 May 2023`."""
    return f"{when.day} {MONTHS[when.month - 1]} {when.year}"


def render_line(content: str, when: datetime) -> str:
    return f"[{date_words(when)}] {content}"


def _stem(word: str) -> str:
    """A light suffix stripper, so `adopted` meets `adopt` (the baseline's only language knowledge)."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def bm25_terms(text: str) -> list[str]:
    return [_stem(w) for w in words(text) if w not in STOP_WORDS]


class BM25:
    """Okapi BM25 (k1 = 1.5, b = 0.75) over a fixed list of documents."""

    def __init__(self, documents: Sequence[str], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.docs = [Counter(bm25_terms(d)) for d in documents]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.avg = sum(self.lengths) / len(self.lengths) if self.docs else 0.0
        df = Counter(term for d in self.docs for term in d)
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query: str) -> list[float]:
        terms = set(bm25_terms(query))
        out = []
        for doc, length in zip(self.docs, self.lengths):
            total = 0.0
            for term in terms:
                tf = doc.get(term, 0)
                if tf:
                    norm = tf + self.k1 * (1 - self.b + self.b * length / (self.avg or 1))
                    total += self.idf[term] * tf * (self.k1 + 1) / norm
            out.append(total)
        return out

    def ranked(self, query: str) -> list[int]:
        """Indexes of documents with a positive score, best first (ties: earlier first)."""
        scored = self.scores(query)
        return sorted((i for i, s in enumerate(scored) if s > 0), key=lambda i: (-scored[i], i))


def pack(lines: Sequence[str], budget: int, count: Callable[[str], int]) -> tuple[str, int]:
    """Lines best first into `budget` tokens (a line that does not fit is skipped, later ones may fit);
    returns the text (lines joined by newlines) and the tokens used."""
    chosen, used = [], 0
    for line in lines:
        cost = count(line)
        if used + cost <= budget:
            chosen.append(line)
            used += cost
    return "\n".join(chosen), used


def summarize(rows: Sequence[dict], kinds: Sequence[str]) -> dict:
    """Mean score, hit rate and exact rate (rows' `exact`, when given) per question kind and overall."""
    out = {}
    for kind in (*kinds, "all"):
        chosen = [r for r in rows if kind == "all" or r["kind"] == kind]
        out[kind] = {"n": len(chosen),
                     "score": round(sum(r["score"] for r in chosen) / len(chosen), 3) if chosen else None,
                     "hit": round(sum(is_hit(r["score"]) for r in chosen) / len(chosen), 3) if chosen else None}
        if chosen and all("exact" in r for r in chosen):
            out[kind]["exact"] = round(sum(r["exact"] for r in chosen) / len(chosen), 3)
    return out
