"""Cut a long message to its best sentence and neighbours, so a long turn costs few tokens."""

from __future__ import annotations

import re
from typing import Sequence

from domain.speakers import split_prefix

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"\w+")
ELLIPSIS = "…"


def sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(" ".join(text.split())) if s]


def _hits(sentence: str, stems: Sequence[str]) -> int:
    """Query words in the sentence: a word counts if it starts with a query lexeme's stem
    (PostgreSQL's English stems are prefixes of most inflections: "support" of "supporting")."""
    words = [w.lower() for w in _WORD.findall(sentence)]
    return sum(1 for stem in stems if any(w.startswith(stem) for w in words))


def snippet(content: str, lexemes: Sequence[str], max_chars: int) -> str:
    """`content` if it fits in `max_chars`; otherwise the sentence with the most query words
    (the first one when none matches), grown by its neighbours (next first, then previous)
    while it fits, with "…" where text was left out. A leading "Name: " is kept."""
    if len(content) <= max_chars or max_chars <= 0:
        return content
    name, body = split_prefix(content)
    speaker = f"{name}: " if name else ""
    parts = sentences(body)
    if not parts:
        return content[:max_chars]
    stems = [lexeme[: max(3, len(lexeme) - 1)] if len(lexeme) > 4 else lexeme for lexeme in lexemes]
    best = max(range(len(parts)), key=lambda i: (_hits(parts[i], stems), -i))
    first = last = best
    size = len(speaker) + len(parts[best])
    grew = True
    while grew:
        grew = False
        for candidate in (last + 1, first - 1):
            if 0 <= candidate < len(parts) and not first <= candidate <= last \
                    and size + 1 + len(parts[candidate]) <= max_chars:
                size += 1 + len(parts[candidate])
                first, last = min(first, candidate), max(last, candidate)
                grew = True
    text = " ".join(parts[first:last + 1])
    if len(speaker) + len(text) > max_chars:  # one sentence longer than the limit
        text = text[: max(1, max_chars - len(speaker) - 1)].rstrip() + ELLIPSIS
    return (speaker + (ELLIPSIS + " " if first > 0 else "") + text
            + (" " + ELLIPSIS if last < len(parts) - 1 else ""))
