"""Measures of the default extraction path on hand-labelled samples (pure; tests and bench use it).

* `gate_accuracy`: seed 001's cheap gate against tests/support/gate_labels.py-style cases.
* `labelled_agreement`: the offline rules' memory type and importance against the labels of
  a set of facts (tests/support/labelled_set.py), beside the constant defaults of
  chunk-facts-v1 (type "fact", importance 3) that they replace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from core.llm.port import ChatMessage
from streams.facts.extraction import heuristic_gate
from streams.facts.offline import _words, category_of, importance_of, memory_type_of, tags_of


@dataclass(frozen=True)
class Agreement:
    n: int
    type_accuracy: float
    type_accuracy_constant: float  # everything "fact"
    importance_exact: float
    importance_exact_constant: float  # everything 3
    importance_within_one: float
    distinct_importance: int
    with_tags: float


def gate_accuracy(cases: Iterable[tuple[bool, Sequence[tuple[str, str]]]]) -> tuple[float, int, list]:
    """(accuracy, n, the misjudged cases) of the heuristic gate."""
    wrong, n = [], 0
    for label, lines in cases:
        n += 1
        verdict, _ = heuristic_gate([ChatMessage(i, role, text) for i, (role, text) in enumerate(lines)])
        if verdict is not label:
            wrong.append((label, lines))
    return (n - len(wrong)) / n if n else 0.0, n, wrong


def labelled_agreement(facts: Sequence[tuple[str, str, int]]) -> Agreement:
    """`facts`: (content, labelled memory type, labelled importance 1-5)."""
    rows = []
    for content, kind, importance in facts:
        category, keyword = category_of(_words(content))
        guessed = memory_type_of(content, category)
        rows.append((kind, importance, guessed, importance_of(content, category, guessed),
                     bool(tags_of(content, keyword, None))))
    n = len(rows) or 1
    return Agreement(
        n=len(rows),
        type_accuracy=sum(r[0] == r[2] for r in rows) / n,
        type_accuracy_constant=sum(r[0] == "fact" for r in rows) / n,
        importance_exact=sum(r[1] == r[3] for r in rows) / n,
        importance_exact_constant=sum(r[1] == 3 for r in rows) / n,
        importance_within_one=sum(abs(r[1] - r[3]) <= 1 for r in rows) / n,
        distinct_importance=len({r[3] for r in rows}),
        with_tags=sum(r[4] for r in rows) / n,
    )
