"""Relative dates resolved against the message's time (domain/dates.py), table-driven."""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest

from domain.dates import annotate, find, format_date

MONDAY = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)  # Monday 8 May 2023
SUNDAY = date(2023, 5, 14)


@pytest.mark.parametrize("text, at, expected", [
    ("I went to a support group yesterday.", MONDAY, "7 May 2023"),
    ("last night was fun", MONDAY, "7 May 2023"),
    ("the day before yesterday", MONDAY, "6 May 2023"),
    ("Today I start.", MONDAY, "8 May 2023"),
    ("tonight we eat out", MONDAY, "8 May 2023"),
    ("this morning I ran", MONDAY, "8 May 2023"),
    ("see you tomorrow", MONDAY, "9 May 2023"),
    ("the day after tomorrow", MONDAY, "10 May 2023"),
    ("I ran a charity race two weeks ago", MONDAY, "24 April 2023"),
    ("3 days ago", MONDAY, "5 May 2023"),
    ("a week ago", MONDAY, "1 May 2023"),
    ("a couple of days ago", MONDAY, "6 May 2023"),
    ("a few days ago", MONDAY, "5 May 2023"),
    ("two months ago", MONDAY, "March 2023"),
    ("a year ago", MONDAY, "2022"),
    ("five years ago", date(2023, 1, 3), "2018"),
    ("in 3 days", MONDAY, "11 May 2023"),
    ("in two weeks", MONDAY, "22 May 2023"),
    ("in a month", date(2023, 12, 20), "January 2024"),
    ("last week", MONDAY, "the week before 8 May 2023"),
    ("this week", MONDAY, "the week of 8 May 2023"),
    ("next week", MONDAY, "the week after 8 May 2023"),
    ("next month", MONDAY, "June 2023"),
    ("last month", date(2023, 1, 15), "December 2022"),
    ("this month", MONDAY, "May 2023"),
    ("last year", MONDAY, "2022"),
    ("next year", MONDAY, "2024"),
    ("last Friday", MONDAY, "5 May 2023"),
    ("last Monday", MONDAY, "1 May 2023"),  # not today
    ("next Friday", MONDAY, "12 May 2023"),
    ("this Wednesday", MONDAY, "10 May 2023"),
    ("On Saturday I went hiking.", MONDAY, "6 May 2023"),  # past tense: the one before
    ("I will go on Friday.", MONDAY, "12 May 2023"),  # otherwise the next one
    ("Saturday night we danced", MONDAY, "6 May 2023"),
    ("last weekend", MONDAY, "the weekend of 6 May 2023"),
    ("last weekend", SUNDAY, "the weekend of 6 May 2023"),
    ("next weekend", MONDAY, "the weekend of 13 May 2023"),
    ("last May", MONDAY, "May 2022"),
    ("last April", MONDAY, "April 2023"),
    ("next January", MONDAY, "January 2024"),
    ("last summer", MONDAY, "summer 2022"),
    ("last summer", date(2023, 10, 1), "summer 2023"),
    ("next summer", MONDAY, "summer 2023"),
    ("this winter", date(2023, 1, 10), "winter 2022"),
])
def test_expression_resolves_to(text, at, expected):
    found = find(text, at)
    assert [r.when for r in found] == [expected]


@pytest.mark.parametrize("text", [
    "this may be true", "I may go", "I like fridays", "the weekly meeting", "a sunday roast recipe",
    "yesterday (7 May 2023) again", "yesterday's news",
    "Friday deploys were banned", "I play chess on Sundays",
])
def test_not_a_date_or_already_annotated(text):
    assert annotate(text, MONDAY) == text


def test_annotation_keeps_the_text_and_adds_each_date():
    assert annotate("Yesterday I adopted Oscar; next month we move.", MONDAY) == (
        "Yesterday (7 May 2023) I adopted Oscar; next month (June 2023) we move.")
    assert annotate("no time words", MONDAY) == "no time words"
    assert annotate("yesterday", None) == "yesterday"


def test_format_is_day_month_year():
    assert format_date(date(2023, 5, 7)) == "7 May 2023"


def test_the_cue_test_never_skips_a_text_the_pattern_matches():
    """`might_have_dates` is a shortcut: over texts built from the pattern's own words, upper
    case, and the non-ASCII letters re's IGNORECASE folds to ASCII, every text _PATTERN finds
    something in passes it, and `find` gives what the pattern alone gives."""
    import random

    from domain import dates

    parts = ["the day before yesterday", "yesterday", "Last night", "tomorrow", "TODAY", "tonight",
             "this morning", "earlier today", "two weeks ago", "3 days ago", "in a couple of months",
             "in 2 years", "next weekend", "this past week", "last Friday", "on Monday", "Sunday evening",
             "next May", "this coming winter", "last fall", "thıs morning", "ſunday night", "yesterdaY",
             "THİS week", "on ſaturday", "a", "the", "I", "went", "there", "(", ")", "'s", "’", ",", ".",
             "é", "ü", "K", "k", "Week", "mONTH", "year", "plan", "chess", "lunch", "2023", " "]
    rng = random.Random(20261126)
    at = date(2023, 5, 8)
    matched = 0
    for _ in range(5000):
        text = " ".join(rng.choice(parts) for _ in range(rng.randint(1, 6)))
        if rng.random() < 0.3:
            text = text.upper() if rng.random() < 0.5 else text.title()
        found = list(dates._PATTERN.finditer(text))
        matched += bool(found)
        assert dates.might_have_dates(text) or not found, text
    assert matched > 1000  # the texts do exercise the pattern
    assert find("message 12 of c3: a sentence of ordinary chat length about the project plan", at) == []
    assert annotate("ok, see you thıs morning", datetime(2023, 5, 8, tzinfo=timezone.utc)) \
        == "ok, see you thıs morning (8 May 2023)"
