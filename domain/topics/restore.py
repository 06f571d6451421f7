"""Which messages of a restored archive the turn-start context shows: a bounded, relevant part.

Seed 004 restores a reactivated topic's full history. On long conversations an archive holds
hundreds of messages, and showing all of them (up to `restore_max_messages`) made the topic
section twice the retrieved section's budget for the same share of the answers
(docs/topics.md, "Topics on long conversations"). Here the archive is cut to a token bound:
the messages that share the most words with the current message first (ties: the newest),
without a current message the newest first, each taken while it fits; they are shown in
their order in the conversation. Pure: the token counter is passed in.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable, Sequence, TypeVar

from domain.judge import STOP_WORDS

T = TypeVar("T")
_WORD = re.compile(r"[^\W_]+")
_SUFFIXES = ("ing", "ed", "es", "s")


def stem(word: str) -> str:
    """A light suffix stripper, so "camping" meets "camped" and "dogs" meets "dog"."""
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


@lru_cache(maxsize=8192)  # pure; an archive's messages are asked again at every turn of a restored topic
def words_of(text: str) -> frozenset[str]:
    """The stems of a text's content words (stop words and one- or two-letter words left out,
    numbers kept)."""
    return frozenset(stem(w) for w in _WORD.findall(text.lower())
                     if w not in STOP_WORDS and (len(w) >= 3 or w.isdigit()))


def select(messages: Sequence[T], query: str | None, max_tokens: int, count: Callable[[str], int],
           content: Callable[[T], str] = lambda m: m.content) -> list[T]:  # type: ignore[attr-defined]
    """The messages to show, in their given (seq) order, within `max_tokens` (0: all of them).
    Ranked by the query's words each one holds, then the newest first; a message that does not
    fit the room left is skipped and the smaller ones after it are still tried."""
    if max_tokens <= 0:
        return list(messages)
    wanted = words_of(query or "")
    ranked = sorted(range(len(messages)),
                    key=lambda i: (-len(wanted & words_of(content(messages[i]))) if wanted else 0, -i))
    chosen, used = [], 0
    for i in ranked:
        tokens = count(content(messages[i]))
        if used + tokens <= max_tokens:
            chosen.append(i)
            used += tokens
    return [messages[i] for i in sorted(chosen)]
