"""Pack scored facts, chunks and memories into a token budget, one rendered line each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

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


def render_line(item: ScoredItem) -> str:
    """Seed 003's prompt lines: "- [category] content (shared|personal)" for facts,
    "- (earlier conversation, seq a-b) summary" for chunks (b inclusive here, for readers),
    "- [memory_type] content" for memories. Whitespace is collapsed to keep one line."""
    c = item.candidate
    content = " ".join(c.content.split())
    if c.kind == "chunk":
        first = c.range_start if c.range_start is not None else "?"
        last = c.range_end - 1 if c.range_end is not None else "?"
        return f"- (earlier conversation, seq {first}-{last}) {content}"
    label = f"[{c.category}] " if c.category else ""
    if c.kind == "fact":
        source = "(shared)" if c.visibility == "shared" else "(personal)"
        return f"- {label}{content} {source}"
    return f"- {label}{content}"


def pack(items: Sequence[ScoredItem], budget: int = DEFAULT_BUDGET_TOKENS,
         count: TokenCounter = count_tokens, excluded: Sequence[Exclusion] = ()) -> Packed:
    """Greedy by final score: each line is added if the joined text still fits, otherwise it is
    excluded as "over_budget" and smaller, lower-scored lines are still tried. The budget is
    checked on the whole joined text, so separators can never push it over."""
    if budget < 0:
        raise ValueError("budget must be >= 0")
    included: list[PackedItem] = []
    dropped = list(excluded)
    used = 0
    for item in sorted(items, key=rank_key):
        line = render_line(item)
        tokens = count(line)
        trial = count("\n".join([p.line for p in included] + [line])) if included else tokens
        if trial <= budget:
            included.append(PackedItem(item, line, tokens))
            used = trial
        else:
            dropped.append(Exclusion(item.candidate, "over_budget", item.score, tokens))
    return Packed(tuple(included), tuple(dropped), used, budget)
