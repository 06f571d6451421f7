"""Pure parts of retrieval added with message search: snippets, visibility window, repeats
packed last, dates on lines, IDF-weighted coverage, speaker parsing."""

from __future__ import annotations

import pytest

from domain.speakers import split_prefix
from retrieval.keywords import coverage, idf
from retrieval.packing import date_label, day, pack
from retrieval.scoring import Candidate, ScoreBreakdown, ScoredItem, still_visible
from retrieval.snippets import ELLIPSIS, snippet
from retrieval.tokens import count_tokens


def test_split_prefix():
    assert split_prefix("Caroline: I went there.") == ("Caroline", "I went there.")
    assert split_prefix("Mary-Jo O'Neil: hi") == ("Mary-Jo O'Neil", "hi")
    assert split_prefix("Note to self: buy milk") == (None, "Note to self: buy milk")  # not a name
    assert split_prefix("no speaker here") == (None, "no speaker here")
    assert split_prefix("time is 10:30 today")[0] is None


def test_a_long_message_is_cut_to_its_best_sentence_and_neighbours_keeping_the_speaker():
    body = " ".join(f"Sentence number {i} is about nothing much." for i in range(10))
    content = "Ana: " + body.replace("Sentence number 6 is about nothing much.", "We adopted a beagle called Biscuit.")
    cut = snippet(content, ["beagl", "biscuit"], 120)
    assert cut.startswith(f"Ana: {ELLIPSIS} ") and cut.endswith(f" {ELLIPSIS}") and "beagle called Biscuit" in cut
    assert len(cut) <= 120 + 2 * len(ELLIPSIS) + 2
    assert snippet("Ana: short one.", ["x"], 120) == "Ana: short one."
    first = snippet(content, ["unmatched"], 60)  # no query word: the start of the message
    assert first.startswith("Ana: Sentence number 0")


@pytest.mark.parametrize(("seqs", "turn", "visible"), [
    (None, 10, False), ([None, None], 10, False), ([9, None], 10, True), ([10, None], 10, False),
    ([10, 8], 10, True),  # shown at this turn and at an earlier one: a retry still knows the earlier
    ([2, None], 20, False), ([6, None], 20, True), ([25, None], 20, False)])
def test_an_item_is_still_visible_only_if_shown_at_an_earlier_turn_within_the_window(seqs, turn, visible):
    assert still_visible(seqs, turn, 14) is visible


def _item(item_id: str, final: float, content: str) -> ScoredItem:
    return ScoredItem(Candidate(item_id, "fact", content, final, 0.0), ScoreBreakdown(final, 1.0, 1.0, final))


def test_repeats_only_take_the_room_new_items_leave():
    new = [_item("new-low", 0.3, "a new thing")]
    repeats = [_item("seen-high", 0.9, "an old thing"), _item("seen-big", 0.8, "word " * 200)]
    packed = pack(new, 40, count_tokens, (), repeats)
    assert [p.item.candidate.item_id for p in packed.included] == ["new-low", "seen-high"]
    assert [(e.candidate.item_id, e.reason) for e in packed.excluded] == [("seen-big", "already_surfaced")]


def test_dates_are_written_as_people_write_them():
    may_7 = 1683474000.0  # 2023-05-07 15:40 UTC
    assert day(may_7) == "7 May 2023"
    assert date_label(may_7, may_7 + 3600) == "[7 May 2023] "
    assert date_label(may_7 - 86400 * 4, may_7) == "[3 May 2023 - 7 May 2023] "
    assert date_label(None, may_7) == "[7 May 2023] " and date_label(None, None) == ""


def test_coverage_weighs_rare_words_and_is_comparable_across_kinds():
    weights = {"lgbtq": idf(2, 1000), "group": idf(300, 1000)}
    assert weights["lgbtq"] > weights["group"] > 0
    assert coverage({"lgbtq", "group"}, weights) == pytest.approx(1.0)
    assert coverage({"lgbtq"}, weights) > 0.8 > coverage({"group"}, weights)
    assert coverage(set(), weights) == 0 and coverage({"x"}, {}) == 0
    assert idf(5000, 10) >= 0  # a capped count larger than the size estimate stays positive
