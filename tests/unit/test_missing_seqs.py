"""Missing seqs of the watermark from the seqs already read (projections/queries.py), no I/O."""

from __future__ import annotations

from projections.queries import expand_ranges, missing_in


def test_gaps_and_the_tail_are_missing():
    assert missing_in([0, 1, 2, 3], 3) == []
    assert missing_in([0, 2, 5], 7) == [1, 3, 4, 6, 7]
    assert missing_in([], 3) == [0, 1, 2, 3]
    assert missing_in([3, 4, 9], 5, after_seq=2) == [5]  # seqs outside the range are ignored


def test_a_hostile_range_is_listed_up_to_the_cap_without_a_series():
    missing = missing_in([5, 6], 2**31 - 1, after_seq=4)
    assert missing[:2] == [7, 8] and len(missing) == 1000 and missing[-1] == 1006
    assert expand_ranges([(1, 2), (10, 2**31)], 4) == [1, 2, 10, 11]
