"""Packing scored items into the token budget: greedy by score, never over budget."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from retrieval.packing import cached_line, pack, render_line
from retrieval.scoring import Candidate, Exclusion, ScoreBreakdown, ScoredItem
from retrieval.tokens import count_tokens

MAY_7 = datetime(2023, 5, 7, 18, 30, tzinfo=UTC).timestamp()
DAY = 86_400.0


def item(item_id: str, final: float, content: str = "content", kind: str = "fact", **kw) -> ScoredItem:
    candidate = Candidate(item_id, kind, content, final, 0.0, **kw)
    return ScoredItem(candidate, ScoreBreakdown(final, 1.0, 1.0, final))


@pytest.mark.parametrize(
    ("scored", "line"),
    [(item("f", 1, "Loves  sailing\nin summer", category="hobby", visibility="shared"),
      "- [hobby] Loves sailing in summer (shared)"),
     (item("f", 1, "Lives in Lisbon", category="other", visibility="private"),
      "- [other] Lives in Lisbon (personal)"),
     (item("c", 1, "They planned a trip.", kind="chunk", range_start=20, range_end=40),
      "- (earlier conversation, seq 20-39) They planned a trip."),
     (item("m", 1, "Chose Postgres over SQLite", kind="memory", category="decision"),
      "- [decision] Chose Postgres over SQLite"),
     # Every item with an event time shows it as people write dates ("7 May 2023", UTC).
     (item("f", 1, "Lives in Lisbon", category="other", occurred_start=MAY_7, occurred_end=MAY_7),
      "- [7 May 2023] [other] Lives in Lisbon (personal)"),
     (item("c", 1, "They planned a trip.", kind="chunk", range_start=20, range_end=40, occurred_start=MAY_7 - 4 * DAY,
           occurred_end=MAY_7 + 3600), "- [3 May 2023 - 7 May 2023] They planned a trip."),
     (item("c", 1, "Same day.", kind="chunk", occurred_start=MAY_7, occurred_end=MAY_7 + 3600),
      "- [7 May 2023] Same day."),
     (item("x", 1, "Caroline: I went to the support group.", kind="message", role="user", occurred_start=MAY_7,
           occurred_end=MAY_7), "- [7 May 2023] Caroline: I went to the support group."),
     (item("x", 1, "Sure, 8 pm works.", kind="message", role="assistant", occurred_start=MAY_7,
           occurred_end=MAY_7), "- [7 May 2023] assistant: Sure, 8 pm works.")],
)
def test_render_lines_follow_seed_003_prompt_format(scored, line):
    assert render_line(scored) == line
    assert cached_line(scored) == line and cached_line(scored) == line  # rendered, then from the cache


def test_the_cached_line_changes_with_every_field_the_line_shows():
    base = dict(category="other", visibility="private", occurred_start=MAY_7, occurred_end=MAY_7)
    first = cached_line(item("f", 1, "Lives in Lisbon", **base))
    for change in ({"category": "home"}, {"visibility": "shared"}, {"occurred_start": MAY_7 - 4 * DAY},
                   {"occurred_end": MAY_7 + 2 * DAY}):
        changed = item("f", 1, "Lives in Lisbon", **{**base, **change})
        assert cached_line(changed) == render_line(changed) != first
    assert cached_line(item("f", 1, "Lives in Porto", **base)) == "- [7 May 2023] [other] Lives in Porto (personal)"
    spoken = item("x", 1, "Sure, 8 pm works.", kind="message", role="user", occurred_start=MAY_7, occurred_end=MAY_7)
    assert cached_line(spoken) == "- [7 May 2023] user: Sure, 8 pm works."
    assert cached_line(item("x", 1, "Sure, 8 pm works.", kind="message", role="assistant", occurred_start=MAY_7,
                            occurred_end=MAY_7)) == "- [7 May 2023] assistant: Sure, 8 pm works."


def test_prefers_higher_scores_and_skips_what_does_not_fit_but_keeps_smaller_ones():
    long = "word " * 40
    items = [item("small-low", 0.5, "tea"), item("big-mid", 0.8, long), item("top", 0.9, "Lives in Lisbon")]
    budget = count_tokens(render_line(items[2])) + count_tokens(render_line(items[0])) + 2
    packed = pack(items, budget=budget)
    assert [p.item.candidate.item_id for p in packed.included] == ["top", "small-low"]
    assert [(e.candidate.item_id, e.reason) for e in packed.excluded] == [("big-mid", "over_budget")]
    assert packed.excluded[0].tokens == count_tokens(render_line(items[1]))
    assert packed.tokens_used == count_tokens(packed.text) <= budget


def test_scoring_exclusions_are_carried_through():
    below = Exclusion(item("x", 0.1).candidate, "below_threshold", item("x", 0.1).score)
    packed = pack([item("a", 0.9)], excluded=[below])
    assert [e.reason for e in packed.excluded] == ["below_threshold"]
    assert len(packed.included) == 1 and packed.budget == 500


@pytest.mark.parametrize("budget", [0, 1, 7, 50, 120, 500])
def test_never_exceeds_the_budget_on_random_items(budget):
    rng = random.Random(budget)
    words = ["Lisbon", "guitar", "daughter", "Ana", "postgres", "replication", "tea", "hiking", "xylophonist"]
    items = [item(f"i{n}", rng.random(), " ".join(rng.choices(words, k=rng.randint(1, 30))),
                  category="other", visibility="shared") for n in range(40)]
    packed = pack(items, budget=budget)
    assert packed.tokens_used == count_tokens(packed.text) <= budget
    assert len(packed.included) + len(packed.excluded) == 40
    finals = [p.item.score.final for p in packed.included]
    assert finals == sorted(finals, reverse=True)


def test_nothing_fits_in_a_zero_budget_and_negative_budgets_are_refused():
    packed = pack([item("a", 0.9)], budget=0)
    assert packed.included == () and packed.tokens_used == 0 and packed.text == ""
    with pytest.raises(ValueError):
        pack([], budget=-1)


def test_a_custom_counter_can_be_injected():
    packed = pack([item("a", 0.9, "x" * 30), item("b", 0.8, "y")], budget=25, count=len)
    assert [p.item.candidate.item_id for p in packed.included] == ["b"]
    assert packed.tokens_used == len(packed.text) <= 25


def test_additive_packing_with_a_lower_bound_packs_exactly_as_counting_the_joined_text():
    """The service's packing (each line counted once, lines whose lower bound cannot fit not
    counted at all) includes and excludes the same items, with the same token counts, as
    counting the whole joined text at every step."""
    from retrieval.packing import exclusion_tokens
    from retrieval.tokens import min_tokens

    rng = random.Random(3)
    words = "the a Ana moved to Lisbon in May and adopted two cats named Pip and Tom, café naïve 東京".split()
    for _ in range(60):
        items = [item(f"i{n}", rng.random(), " ".join(rng.choice(words) for _ in range(rng.randrange(1, 40))))
                 for n in range(rng.randrange(0, 40))]
        repeats = [item(f"r{n}", rng.random(), " ".join(rng.choice(words) for _ in range(rng.randrange(1, 30))))
                   for n in range(rng.randrange(0, 5))]
        budget = rng.choice([0, 10, 60, 200, 500])
        counted: list[str] = []

        def count(line: str) -> int:
            counted.append(line)
            return count_tokens(line)

        plain = pack(items, budget, count_tokens, (), repeats)
        fast = pack(items, budget, count, (), repeats, additive=True, lower_bound=min_tokens)
        assert fast.included == plain.included and fast.tokens_used == plain.tokens_used
        assert [(e.candidate, e.reason, e.score) for e in fast.excluded] == \
               [(e.candidate, e.reason, e.score) for e in plain.excluded]
        assert [exclusion_tokens(e) for e in fast.excluded] == [e.tokens for e in plain.excluded]
        assert all("\n" not in line for line in counted)  # one line at a time
    # once the budget is full, the long candidates left are not counted at all
    long_ones = [item(f"l{n}", 0.5 - n / 100, "word " * 30) for n in range(20)]
    counted.clear()
    fast = pack([item("best", 0.9, "word " * 25), *long_ones], 40, count, additive=True, lower_bound=min_tokens)
    assert [p.item.candidate.item_id for p in fast.included] == ["best"]
    assert len(counted) == 1 and all(e.tokens is None and e.line for e in fast.excluded)


def test_a_lower_bound_needs_an_additive_count():
    with pytest.raises(ValueError):
        pack([item("a", 0.9)], 10, count_tokens, lower_bound=len)


# No budget spent twice on the same information (issue 24).

def test_a_fact_after_its_message_is_a_duplicate_and_its_room_goes_to_the_next_item():
    message = item("message:c:3", 0.9, "Caroline: I went to the LGBTQ support group, it was powerful.",
                   kind="message", role="user", occurred_start=MAY_7, occurred_end=MAY_7)
    fact = item("fact:1", 0.8, "Caroline went to the LGBTQ support group.", occurred_start=MAY_7,
                occurred_end=MAY_7)
    other = item("fact:2", 0.7, "Melanie paints sunrises by the lake.")
    budget = count_tokens(render_line(message)) + count_tokens(render_line(fact))
    assert count_tokens(render_line(other)) <= count_tokens(render_line(fact))
    without = pack([message, fact, other], budget, additive=True)
    assert [p.item.candidate.item_id for p in without.included] == ["message:c:3", "fact:1"]
    packed = pack([message, fact, other], budget, additive=True, duplicate_overlap=0.8)
    assert [p.item.candidate.item_id for p in packed.included] == ["message:c:3", "fact:2"]
    assert [(e.candidate.item_id, e.reason) for e in packed.excluded] == [("fact:1", "duplicate")]


def test_a_fact_that_resolves_a_date_is_news_beside_its_message_and_takes_its_place():
    # The message's "yesterday" is resolved in the fact: that day is information the message's
    # line does not show, so the fact stays; the message, whose words the fact holds, goes.
    message = item("message:c:3", 0.9, "Caroline: I went to the LGBTQ support group yesterday!",
                   kind="message", role="user", occurred_start=MAY_7 + DAY, occurred_end=MAY_7 + DAY)
    fact = item("fact:1", 0.8, "Caroline went to the LGBTQ support group yesterday (7 May 2023).",
                occurred_start=MAY_7 + DAY, occurred_end=MAY_7 + DAY)
    packed = pack([message, fact], 500, additive=True, duplicate_overlap=0.8)
    assert [p.item.candidate.item_id for p in packed.included] == ["fact:1"]
    assert "7 May 2023" in packed.text
    assert [(e.candidate.item_id, e.reason) for e in packed.excluded] == [("message:c:3", "duplicate")]


def test_the_same_words_on_another_day_are_not_a_duplicate():
    first = item("message:c:3", 0.9, "Melanie: We went camping at the lake.", kind="message", role="user",
                 occurred_start=MAY_7, occurred_end=MAY_7)
    again = item("message:c:90", 0.8, "Melanie: We went camping at the lake.", kind="message", role="user",
                 occurred_start=MAY_7 + 40 * DAY, occurred_end=MAY_7 + 40 * DAY)
    same_day = item("fact:1", 0.7, "Melanie went camping at the lake.", occurred_start=MAY_7, occurred_end=MAY_7)
    packed = pack([first, again, same_day], 500, additive=True, duplicate_overlap=0.8)
    assert [p.item.candidate.item_id for p in packed.included] == ["message:c:3", "message:c:90"]
    assert [(e.candidate.item_id, e.reason) for e in packed.excluded] == [("fact:1", "duplicate")]


def test_an_included_fact_gives_way_to_its_fuller_message_ranked_below_it():
    fact = item("fact:1", 0.9, "Caroline went to the support group.")
    message = item("message:c:3", 0.8, "Caroline: I went to the support group yesterday and met Ana there.",
                   kind="message", role="user")
    packed = pack([fact, message], 500, additive=True, duplicate_overlap=0.8)
    assert [p.item.candidate.item_id for p in packed.included] == ["message:c:3"]
    assert packed.tokens_used == count_tokens(packed.text)
    (dropped,) = packed.excluded
    assert (dropped.candidate.item_id, dropped.reason, dropped.tokens) == (
        "fact:1", "duplicate", count_tokens(render_line(fact)))


@pytest.mark.parametrize("additive", [True, False])
def test_different_information_is_never_a_duplicate_and_zero_turns_it_off(additive):
    items = [item("a", 0.9, "Caroline adopted a cat named Luna."), item("b", 0.8, "Caroline adopted a dog named Max."),
             item("c", 0.7, "Caroline adopted a cat named Luna!")]
    on = pack(items, 500, additive=additive, duplicate_overlap=0.8)
    assert [p.item.candidate.item_id for p in on.included] == ["a", "b"]
    assert on.tokens_used == count_tokens(on.text)
    assert [p.item.candidate.item_id for p in pack(items, 500, additive=additive).included] == ["a", "b", "c"]
