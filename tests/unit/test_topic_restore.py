"""domain/topics/restore.py: the part of a restored archive the turn-start context shows."""

from __future__ import annotations

from domain.topics.restore import select, words_of

ARCHIVE = [
    "Ana: We went camping by the lake last summer.",  # 0
    "Bo: Nice, how was the weather?",  # 1
    "Ana: Rainy, but the kids loved the tent.",  # 2
    "Bo: My dog hates rain.",  # 3
    "Ana: We camped again in the mountains in August, no rain at all this time.",  # 4
]


def words(text: str) -> int:
    return len(text.split())


def test_no_bound_shows_the_whole_archive_in_order():
    assert select(ARCHIVE, "camping?", 0, words, content=lambda m: m) == ARCHIVE


def test_the_messages_sharing_the_question_s_words_come_first_shown_in_conversation_order():
    # 9 + 14 words fit in 25; the two camping messages are chosen, whatever their age.
    assert select(ARCHIVE, "Where has Ana camped?", 25, words, content=lambda m: m) == [ARCHIVE[0], ARCHIVE[4]]


def test_without_a_question_the_newest_that_fit():
    assert select(ARCHIVE, None, 20, words, content=lambda m: m) == [ARCHIVE[3], ARCHIVE[4]]  # 5 + 14


def test_a_message_that_does_not_fit_is_skipped_and_smaller_ones_still_tried():
    # "camping" ranks message 4 (14 words) first; it does not fit 10, message 0 (9 words) does.
    assert select(ARCHIVE, "camping in August", 10, words, content=lambda m: m) == [ARCHIVE[0]]


def test_words_are_light_stems_without_stop_words():
    assert words_of("The dogs were camping") == {"dog", "camp"}
    assert words_of("in 2023 at 5") == {"2023", "5"}
