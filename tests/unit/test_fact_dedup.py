"""Fact dedup decisions: merge at >= 0.85, supersede contradictions, link or insert the rest."""

from __future__ import annotations

import numpy as np
import pytest

from domain.facts.dedup import (
    DedupConfig,
    FactDecision,
    LlmVerdict,
    Neighbour,
    NewFact,
    contradiction,
    cosine_similarity,
    decide_fact,
)

NOW = 1_700_000_000.0


def new(content: str, category: str = "other", owner: str = "u1", subject: str = "s1", **kw) -> NewFact:
    return NewFact(content, np.ones(4, dtype=np.float32), category, owner, subject, **kw)


def near(fact_id: str, content: str, similarity: float, category: str = "other",
         owner: str = "u1", subject: str = "s1", **kw) -> Neighbour:
    return Neighbour(fact_id, content, category, owner, subject, similarity, **kw)


# --- merge ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("similarity", "action"), [(0.85, "merge"), (0.93, "merge"), (0.849, "insert")])
def test_merge_threshold_is_inclusive_at_0_85(similarity, action):
    decision = decide_fact(new("Enjoys long walks on the beach"),
                           [near("f1", "Likes walking along the beach", similarity)], NOW)
    assert decision.action == action


def test_merge_keeps_max_importance_union_of_tags_and_the_longer_wording_with_history():
    decision = decide_fact(
        new("Plays guitar in a jazz band on Fridays", "hobby", importance=2, tags=("music", "jazz")),
        [near("f1", "Plays guitar", 0.9, "hobby", importance=4, tags=("music",))], NOW)
    assert decision == FactDecision("merge", "f1", None, {
        "importance": 4, "tags": ("music", "jazz"), "updated_at": NOW,
        "content": "Plays guitar in a jazz band on Fridays", "previous_content": "Plays guitar",
    }, decision.reason)


def test_merge_with_a_shorter_wording_keeps_the_existing_text():
    decision = decide_fact(new("Plays guitar", "hobby", importance=5),
                           [near("f1", "Plays guitar in a band", 0.95, "hobby")], NOW)
    assert decision.merged_fields["content"] == "Plays guitar in a band"
    assert "previous_content" not in decision.merged_fields and decision.merged_fields["importance"] == 5


# --- contradictions -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("old", "new_text", "contradicts"),
    [("The user lives in Lisbon", "The user lives in Porto", True),
     ("I have 2 kids", "I have 3 kids", True),
     ("He is married", "He is not married", True),
     ("I live in Lisbon", "I no longer live in Lisbon", True),
     ("I like tea", "I don't like tea", True),
     ("Works as a nurse", "Works as a teacher", True),
     ("The user lives in Lisbon", "The user lives in Lisbon", False),
     ("Lives in Lisbon", "Lives in Lisbon with his wife", False),  # elaboration, not contradiction
     ("My daughter is called Ana", "My son is called Rui", False),  # different people
     ("The user lives in Lisbon", "The user works in Lisbon", False),  # no shared predicate
     ("Lives in Lisbon", "Grew up on a farm near the mountains of the north", False)],
)
def test_contradiction_heuristic(old, new_text, contradicts):
    assert (contradiction(old, new_text) is not None) is contradicts


def test_contradiction_supersedes_even_above_the_merge_threshold():
    decision = decide_fact(new("The user lives in Porto"),
                           [near("f1", "The user lives in Lisbon", 0.91)], NOW)
    assert (decision.action, decision.target_fact_id, decision.link_type) == ("supersede", "f1", "supersedes")
    assert decision.merged_fields == {"valid_to": NOW} and "lisbon" in decision.reason


@pytest.mark.parametrize(
    ("neighbour", "expected_action"),
    [(near("f1", "Lives in Lisbon", 0.55), "insert"),  # below contradiction_threshold
     (near("f1", "Lives in Lisbon", 0.8, category="milestone"), "insert"),  # other category
     (near("f1", "Lives in Lisbon", 0.8, subject="s2"), "insert"),  # other subject: ignored
     (near("f1", "Lives in Lisbon", 0.8), "supersede")],
)
def test_contradiction_needs_same_category_subject_and_similarity(neighbour, expected_action):
    assert decide_fact(new("Lives in Porto"), [neighbour], NOW).action == expected_action


def test_another_owners_fact_is_never_changed_only_linked():
    decision = decide_fact(new("Lives in Porto"), [near("f9", "Lives in Lisbon", 0.95, owner="u2")], NOW)
    assert (decision.action, decision.target_fact_id, decision.link_type) == ("insert", "f9", "contradicts")
    duplicate = decide_fact(new("Lives in Lisbon"), [near("f9", "Lives in Lisbon", 0.99, owner="u2")], NOW)
    assert duplicate.action == "insert" and duplicate.link_type is None


# --- related and unrelated ------------------------------------------------------------------------

def test_related_fact_is_inserted_with_an_elaborates_link_and_unrelated_plainly():
    related = decide_fact(new("Her grandmother taught her to bake bread"),
                          [near("f1", "Loves baking", 0.72), near("f2", "Lives in Lisbon", 0.2)], NOW)
    assert (related.action, related.target_fact_id, related.link_type) == ("insert", "f1", "elaborates")
    unrelated = decide_fact(new("Owns a red bicycle"), [near("f2", "Lives in Lisbon", 0.3)], NOW)
    assert unrelated == FactDecision("insert", None, None, {}, "no close fact")
    assert decide_fact(new("Anything"), [], NOW).action == "insert"


def test_thresholds_are_configurable():
    config = DedupConfig(merge_threshold=0.7)
    assert decide_fact(new("Likes tea"), [near("f1", "Enjoys tea", 0.75)], NOW, config).action == "merge"


# --- explicit LLM verdicts ------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("relation", "action", "link"),
    [("duplicate", "merge", None), ("contradicts", "supersede", "supersedes"),
     ("elaborates", "insert", "elaborates"), ("unrelated", "insert", None)],
)
def test_llm_verdict_wins_over_the_heuristics(relation, action, link):
    neighbours = [near("f1", "Has a dog", 0.5), near("f2", "The user lives in Lisbon", 0.9)]
    decision = decide_fact(new("The user lives in Porto"), neighbours, NOW, verdict=LlmVerdict(relation, "f1"))
    assert (decision.action, decision.link_type) == (action, link)
    assert decision.target_fact_id == (None if relation == "unrelated" else "f1")


def test_llm_verdict_about_an_unknown_fact_falls_back_to_the_heuristics():
    decision = decide_fact(new("The user lives in Porto"), [near("f2", "The user lives in Lisbon", 0.9)],
                           NOW, verdict=LlmVerdict("duplicate", "nope"))
    assert decision.action == "supersede"


def test_cosine_similarity():
    a, b = np.array([1.0, 0.0]), np.array([1.0, 1.0])
    assert cosine_similarity(a, b) == pytest.approx(2 ** -0.5)
    assert cosine_similarity(a, a) == pytest.approx(1.0) and cosine_similarity(a, np.zeros(2)) == 0.0


def test_the_same_event_on_another_date_is_neither_a_change_nor_a_duplicate():
    from domain.facts.dedup import contradiction

    old = "Melanie went hiking yesterday (7 May 2023)."
    new = "Melanie went hiking yesterday (14 May 2023)."
    assert contradiction(old, new) is None
    assert contradiction("Caroline lives in Lisbon (since March 2023).", "Caroline lives in Porto.") is not None
    near = [Neighbour("f1", old, "hobby", "u", "s", 0.97)]
    decision = decide_fact(NewFact(new, np.ones(3), "hobby", "u", "s"), near, 0.0)
    assert (decision.action, decision.link_type, decision.target_fact_id) == ("insert", "elaborates", "f1")
    same = decide_fact(NewFact(old, np.ones(3), "hobby", "u", "s"), near, 0.0)
    assert same.action == "merge"
