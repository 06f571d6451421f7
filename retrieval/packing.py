"""Pack scored facts, chunks and memories into a token budget, one rendered line each."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Callable, Sequence

from domain.speakers import split_prefix
from retrieval.scoring import Exclusion, ScoredItem, rank_key
from retrieval.tokens import TokenCounter, count_tokens

DEFAULT_BUDGET_TOKENS = 500  # seed 001: at most 500 tokens per injection


@dataclass(frozen=True)
class PackedItem:
    item: ScoredItem
    line: str
    tokens: int  # of the line alone


@dataclass(frozen=True)
class Packed:
    included: tuple[PackedItem, ...]  # best first
    excluded: tuple[Exclusion, ...]  # scoring's exclusions, then "over_budget"
    tokens_used: int  # of `text` as a whole, always <= budget
    budget: int

    @property
    def text(self) -> str:
        return "\n".join(p.line for p in self.included)


_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")  # English whatever the locale (strftime('%B') follows it, and is slow)


@lru_cache(maxsize=8192)  # a pure function of the item's time, asked for every candidate's line on every context
def day(ts: float) -> str:
    """A date as people (and answer matching) write it: "7 May 2023" (UTC), never ISO alone."""
    d = datetime.fromtimestamp(ts, UTC)
    return f"{d.day} {_MONTHS[d.month - 1]} {d.year}"


def date_label(start: float | None, end: float | None) -> str:
    """"[7 May 2023] ", "[3 May 2023 - 9 May 2023] " for a range over several days, "" if unknown."""
    if start is None and end is None:
        return ""
    first, last = day(start if start is not None else end), day(end if end is not None else start)
    return f"[{first}] " if first == last else f"[{first} - {last}] "


def render_line(item: ScoredItem) -> str:
    """One prompt line per item, each with the date its source happened:
    "- [7 May 2023] [category] content (shared|personal)" for facts (seed 003),
    "- [3 May 2023 - 9 May 2023] summary" for chunks, "- [7 May 2023] Caroline: text" for messages
    (the role stands in for a speaker name the text does not start with), "- [memory_type]
    content" for memories. Whitespace is collapsed to keep one line."""
    c = item.candidate
    content = " ".join(c.content.split())
    when = date_label(c.occurred_start, c.occurred_end)
    if c.kind == "chunk":
        if not when and c.range_start is not None and c.range_end is not None:
            when = f"(earlier conversation, seq {c.range_start}-{c.range_end - 1}) "
        return f"- {when}{content}"
    if c.kind == "message":
        speaker = "" if split_prefix(content)[0] or not c.role else f"{c.role}: "
        return f"- {when}{speaker}{content}"
    label = f"[{c.category}] " if c.category else ""
    if c.kind == "fact":
        source = "(shared)" if c.visibility == "shared" else "(personal)"
        return f"- {when}{label}{content} {source}"
    return f"- {when}{label}{content}"


_LINES: dict[tuple, str] = {}  # render_line's lines by everything it reads of a candidate, bounded below


def cached_line(item: ScoredItem) -> str:
    """render_line, with a process-wide cache keyed by every field it reads: the same items come
    back context after context, and pack renders every candidate's line (~80 a context) to
    bound its tokens; a lookup costs about a quarter of rendering ("Eleventh round")."""
    c = item.candidate
    key = (c.kind, c.content, c.occurred_start, c.occurred_end, c.category, c.visibility, c.role, c.range_start,
           c.range_end)
    line = _LINES.get(key)
    if line is None:
        if len(_LINES) >= 8192:
            _LINES.clear()
        line = _LINES[key] = render_line(item)
    return line


def forget_lines() -> None:
    """Empty cached_line's cache (it holds memory text: an erasure empties it, api/routes/erasure.py)."""
    _LINES.clear()


_WORD = re.compile(r"[^\W_]+")
# Words that say nothing about what an item is about: pronouns, auxiliaries, articles and the
# like. What is left of an item ("caroline", "went", "lgbtq", "support", "group") is its information.
_FILLER = frozenset("""
a about after again all also am an and any are as at be because been before being both but by can could did do
does doing don for from had has have having he her here hers him his how i if in into is it its just me more most
my no not now of on once only or other our out over own same she so some such than that the their them then there
these they this those through to too under until up very was we were what when where which while who why will with
would you your yes oh wow yeah really so s t d ll m re ve got get
""".split())


# A resolved date in the text ("yesterday (7 May 2023)", "(the week before 9 June 2023)").
_RESOLVED_DATE = re.compile(r"\([^()]*\b\d{4}\)")
_DATE_MARK = "@"  # a date is one piece of information: "@7 may 2023", never three loose words


def information(text: str, dates: Sequence[str] = ()) -> frozenset[str]:
    """The words of an item that carry its information: lowercased, filler words left out, and
    each date it names (a resolved date in its text, the `dates` its line shows) as one whole
    piece: a fact that resolves "yesterday" to a day says more than the message it came from."""
    resolved = [" ".join(_WORD.findall(found.lower())) for found in _RESOLVED_DATE.findall(text)]
    plain = (w for w in _WORD.findall(_RESOLVED_DATE.sub(" ", text).lower()) if w not in _FILLER)
    return frozenset((*plain, *(_DATE_MARK + d for d in resolved),
                      *(_DATE_MARK + " ".join(_WORD.findall(d.lower())) for d in dates if d)))


def covered_by(words: frozenset[str], other: frozenset[str], overlap: float) -> bool:
    """True when every date of `words` is among `other`'s and at least `overlap` of its other
    words are too (and it has some): an item that names a date the other does not is news."""
    dates = {w for w in words if w.startswith(_DATE_MARK)}
    if not dates <= other:
        return False
    plain = len(words) - len(dates)
    return plain > 0 and len((words - dates) & other) >= overlap * plain - 1e-9


def line_dates(candidate) -> tuple[str, ...]:
    """The days an item's line shows (date_label), as information."""
    return tuple(day(t) for t in {candidate.occurred_start, candidate.occurred_end} if t is not None)


def pack(items: Sequence[ScoredItem], budget: int = DEFAULT_BUDGET_TOKENS,
         count: TokenCounter = count_tokens, excluded: Sequence[Exclusion] = (),
         repeats: Sequence[ScoredItem] = (), *, additive: bool = False,
         lower_bound: Callable[[str], int] | None = None, duplicate_overlap: float = 0.0,
         render: Callable[[ScoredItem], str] = render_line) -> Packed:
    """Greedy by final score: each line is added if the joined text still fits, otherwise it is
    excluded as "over_budget" and smaller, lower-scored lines are still tried. The budget is
    checked on the whole joined text, so separators can never push it over. `repeats` (items
    the model can still see from an earlier turn) only take the room every other item left;
    those that do not fit are excluded as "already_surfaced".

    `additive`: `count` of lines joined by newlines is the sum of their counts (true of the
    WordPiece tokenizer: a newline is whitespace), so each line is counted once, not the whole
    text at every step. `lower_bound` (with `additive`): a cheap count never above `count`; a
    line whose bound does not fit is excluded without being counted (its Exclusion carries the
    line and no tokens: `exclusion_tokens` counts it if someone asks).

    `duplicate_overlap` (0 < x <= 1; 0: off): no budget is spent twice on the same information.
    An item whose information words (`information`) are at least that share of one included
    item's is excluded as "duplicate" (a fact and the message it came from, two near-identical
    facts); an included item that a later, fuller one covers that way (the fact, once its
    message is in) is taken out again as "duplicate" and its tokens go to the items after.
    `render`: each item's line (render_line, or the same with a cache: cached_line)."""
    if budget < 0:
        raise ValueError("budget must be >= 0")
    if lower_bound is not None and not additive:
        raise ValueError("lower_bound needs an additive count")
    included: list[PackedItem] = []
    words: list[frozenset[str]] = []  # of each included item, when deduplicating
    dropped = list(excluded)
    used = 0
    for group, reason in ((items, "over_budget"), (repeats, "already_surfaced")):
        for item in sorted(group, key=rank_key):
            info = (information(item.candidate.content, line_dates(item.candidate)) if duplicate_overlap > 0
                    else frozenset())
            if info and any(covered_by(info, shown, duplicate_overlap) for shown in words):
                dropped.append(Exclusion(item.candidate, "duplicate", item.score))
                continue
            line = render(item)
            if lower_bound is not None and used + lower_bound(line) > budget:
                dropped.append(Exclusion(item.candidate, reason, item.score, None, line))
                continue
            tokens = count(line)
            if additive:
                trial = used + tokens
            else:
                trial = count("\n".join([p.line for p in included] + [line])) if included else tokens
            if trial <= budget:
                included.append(PackedItem(item, line, tokens))
                used = trial
                if duplicate_overlap > 0:
                    words.append(info)
                    used = _drop_covered(included, words, dropped, duplicate_overlap, used, count, additive)
            else:
                dropped.append(Exclusion(item.candidate, reason, item.score, tokens))
    return Packed(tuple(included), tuple(dropped), used, budget)


def _drop_covered(included: list[PackedItem], words: list[frozenset[str]], dropped: list[Exclusion],
                  overlap: float, used: int, count: TokenCounter, additive: bool) -> int:
    """Take out the included items that the newest one covers; returns the tokens now used."""
    newest = words[-1]
    keep = [i for i in range(len(included) - 1) if not covered_by(words[i], newest, overlap)]
    if len(keep) == len(included) - 1:
        return used
    keep.append(len(included) - 1)
    for i in range(len(included)):
        if i not in keep:
            p = included[i]
            dropped.append(Exclusion(p.item.candidate, "duplicate", p.item.score, p.tokens))
    included[:] = [included[i] for i in keep]
    words[:] = [words[i] for i in keep]
    if additive:
        return sum(p.tokens for p in included)
    return count("\n".join(p.line for p in included))


def exclusion_tokens(exclusion: Exclusion, count: TokenCounter = count_tokens) -> int | None:
    """The tokens of an excluded item's line: counted by pack, or now for a line pack left
    uncounted (its lower bound alone did not fit); None for exclusions made before packing."""
    if exclusion.tokens is not None or exclusion.line is None:
        return exclusion.tokens
    return count(exclusion.line)
