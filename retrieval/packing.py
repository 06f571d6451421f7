"""Pack scored facts, chunks and memories into a token budget, one rendered line each."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
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


def pack(items: Sequence[ScoredItem], budget: int = DEFAULT_BUDGET_TOKENS,
         count: TokenCounter = count_tokens, excluded: Sequence[Exclusion] = (),
         repeats: Sequence[ScoredItem] = (), *, additive: bool = False,
         lower_bound: Callable[[str], int] | None = None) -> Packed:
    """Greedy by final score: each line is added if the joined text still fits, otherwise it is
    excluded as "over_budget" and smaller, lower-scored lines are still tried. The budget is
    checked on the whole joined text, so separators can never push it over. `repeats` (items
    the model can still see from an earlier turn) only take the room every other item left;
    those that do not fit are excluded as "already_surfaced".

    `additive`: `count` of lines joined by newlines is the sum of their counts (true of the
    WordPiece tokenizer: a newline is whitespace), so each line is counted once, not the whole
    text at every step. `lower_bound` (with `additive`): a cheap count never above `count`; a
    line whose bound does not fit is excluded without being counted (its Exclusion carries the
    line and no tokens: `exclusion_tokens` counts it if someone asks)."""
    if budget < 0:
        raise ValueError("budget must be >= 0")
    if lower_bound is not None and not additive:
        raise ValueError("lower_bound needs an additive count")
    included: list[PackedItem] = []
    dropped = list(excluded)
    used = 0
    for group, reason in ((items, "over_budget"), (repeats, "already_surfaced")):
        for item in sorted(group, key=rank_key):
            line = render_line(item)
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
            else:
                dropped.append(Exclusion(item.candidate, reason, item.score, tokens))
    return Packed(tuple(included), tuple(dropped), used, budget)


def exclusion_tokens(exclusion: Exclusion, count: TokenCounter = count_tokens) -> int | None:
    """The tokens of an excluded item's line: counted by pack, or now for a line pack left
    uncounted (its lower bound alone did not fit); None for exclusions made before packing."""
    if exclusion.tokens is not None or exclusion.line is None:
        return exclusion.tokens
    return count(exclusion.line)
