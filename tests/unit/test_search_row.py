"""The frozen rows and candidates of every context made without the dataclass's __init__ (retrieval.scoring.frozen_maker)."""

import dataclasses
from datetime import UTC, datetime

import pytest

from retrieval.scoring import Candidate, candidate_of
from retrieval.search import SearchRow, row_of


def test_a_row_made_from_its_values_is_the_dataclass_row_equal_and_frozen():
    values = ("message", "c1:4", "Caroline: I adopted a puppy.", 0.52, 0.3, True, False, [3, None],
              datetime(2023, 5, 7, tzinfo=UTC), 3, None, None, None, "caroline", "c1", 4, 5,
              datetime(2023, 5, 7, tzinfo=UTC), datetime(2023, 5, 7, tzinfo=UTC), "user", ["puppi"], 5,
              "Aww, what is its name?", "assistant", ["name"], 0.2, None, "Biscuit!")
    assert len(values) == len(dataclasses.fields(SearchRow))
    row, expected = row_of(values), SearchRow(*values)
    assert row == expected and repr(row) == repr(expected)
    assert dataclasses.replace(row, cosine=0.1) == dataclasses.replace(expected, cosine=0.1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.cosine = 0.0  # type: ignore[misc]


def test_a_candidate_made_from_its_values_is_the_dataclass_candidate_equal_hashed_alike_and_frozen():
    values = ("message:c1:4", "message", "Caroline: I adopted a puppy.", 0.61, 1.68e9, 3, None, None, 4, 5,
              1.68e9, 1.68e9, "user")
    assert len(values) == len(dataclasses.fields(Candidate))
    made, expected = candidate_of(*values), Candidate(*values)
    assert made == expected and hash(made) == hash(expected) and repr(made) == repr(expected)
    assert dataclasses.replace(made, content="x") == dataclasses.replace(expected, content="x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.content = ""  # type: ignore[misc]


def test_a_question_alone_is_what_replace_makes():
    from retrieval.service import alone

    values = ("message", "c1:4", "Caroline: I adopted a puppy.", 0.52, 0.3, True, False, [3, None],
              datetime(2023, 5, 7, tzinfo=UTC), 3, None, None, None, "caroline", "c1", 4, 5,
              datetime(2023, 5, 7, tzinfo=UTC), datetime(2023, 5, 7, tzinfo=UTC), "user", ["puppi"], 5,
              "Aww, what is its name?", "assistant", ["name"], 0.2, None, "Biscuit!")
    row = dataclasses.replace(SearchRow(*values), own_keyword_score=0.25)
    question = alone(row)
    expected = dataclasses.replace(row, reply=None, reply_role=None, reply_lexemes=None, keyword_score=0.25,
                                   own_keyword_score=None)
    assert question == expected and repr(question) == repr(expected)
    assert row.reply == "Aww, what is its name?" and row.keyword_score == 0.3  # the row itself unchanged
    assert alone(dataclasses.replace(row, own_keyword_score=None)).keyword_score == 0.3  # no own score: the pair's
    with pytest.raises(dataclasses.FrozenInstanceError):
        question.cosine = 0.0  # type: ignore[misc]
