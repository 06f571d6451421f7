"""Seed 001's gate accuracy (above 80%) and issue 12's importance/type/tags, on labelled samples."""

from __future__ import annotations

from streams.facts.quality import gate_accuracy, labelled_agreement
from tests.support.gate_labels import GATE_CASES
from tests.support.labelled_set import MEMORIES


def test_gate_accuracy_on_the_labelled_sample_is_above_80_percent():
    accuracy, n, wrong = gate_accuracy(GATE_CASES)
    print(f"gate accuracy {accuracy:.3f} on {n} labelled slices; wrong: {wrong}")
    assert n >= 40 and sum(label for label, _ in GATE_CASES) >= 15  # both kinds represented
    assert accuracy > 0.8, wrong


def test_default_path_fills_importance_type_and_tags_better_than_the_constant_defaults():
    facts = [(m.content, m.memory_type, m.importance) for m in MEMORIES if m.kind == "fact"]
    result = labelled_agreement(facts)
    print(result)
    assert result.n >= 30
    assert result.with_tags == 1.0
    assert result.distinct_importance >= 3  # seed 001's importance weight is no longer always 1.0
    assert result.type_accuracy > result.type_accuracy_constant
    assert result.importance_within_one >= 0.8
