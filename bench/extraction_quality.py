"""Quality of the default (offline) extraction path on hand-labelled samples (docs/facts.md).

    PYTHONPATH=. python bench/extraction_quality.py

Prints seed 001's gate accuracy on tests/support/gate_labels.py, and how the offline rules'
memory type and importance agree with the labels of tests/support/labelled_set.py beside the
constant defaults of chunk-facts-v1 (type "fact", importance 3, no tags). Pure CPU, ~1 s.
"""

from __future__ import annotations

import platform
import time

from streams.facts.quality import gate_accuracy, labelled_agreement
from tests.support.gate_labels import GATE_CASES
from tests.support.labelled_set import MEMORIES


def main() -> None:
    started = time.perf_counter()
    accuracy, n, wrong = gate_accuracy(GATE_CASES)
    agreement = labelled_agreement([(m.content, m.memory_type, m.importance) for m in MEMORIES if m.kind == "fact"])
    print(f"machine: {platform.platform()}, python {platform.python_version()}")
    print(f"gate (heuristic) accuracy: {accuracy:.3f} on {n} labelled slices ({len(wrong)} wrong)")
    for label, lines in wrong:
        print(f"  labelled {label}: {lines}")
    a = agreement
    print(f"labelled facts: {a.n}")
    print(f"  memory type accuracy: {a.type_accuracy:.3f} (constant 'fact': {a.type_accuracy_constant:.3f})")
    print(f"  importance exact: {a.importance_exact:.3f} (constant 3: {a.importance_exact_constant:.3f}),"
          f" within one: {a.importance_within_one:.3f}, distinct values: {a.distinct_importance}")
    print(f"  facts with tags: {a.with_tags:.3f} (chunk-facts-v1: 0.000)")
    print(f"took {time.perf_counter() - started:.2f}s")


if __name__ == "__main__":
    main()
