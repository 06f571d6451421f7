"""Relative time expressions resolved against when a message was written (pure, table-driven).

"I went there yesterday", said on 8 May 2023, becomes "I went there yesterday (7 May 2023)":
memory derived from a message keeps the date even when the message only said "yesterday".
Dates are written "7 May 2023" (day, month name, year) so a reader and a word-matching
scorer both see the day, the month and the year.

Covered: today/tonight/this morning, yesterday/last night, tomorrow, the day before
yesterday / after tomorrow, N days|weeks|months|years ago, in N days|weeks|months|years,
last|this|next week|weekend|month|year, last|this|next <weekday>, "on <weekday>" or
"<weekday> morning/evening/..." (the one before when the sentence is in the past tense,
else the next one; a weekday alone, as in "Friday deploys", is left alone),
last|this|next <month name>, last|this|next <season>. Numbers may be digits or words
("two", "a", "a couple of", "a few" = about 3). Anything else is left as it was; the
resolver never guesses a year from a bare month name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
SEASONS = {"spring": (3, 4, 5), "summer": (6, 7, 8), "autumn": (9, 10, 11), "fall": (9, 10, 11),
           "winter": (12, 1, 2)}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "couple of": 2,
            "a few": 3, "few": 3, "several": 3}
_NUM = r"(?P<n>\d{1,3}|a couple of|couple of|a few|few|several|an|a|one|two|three|four|five|six|seven|eight|nine" \
       r"|ten|eleven|twelve)"
_UNIT = r"(?P<unit>day|week|month|year)s?"
_WEEKDAY = r"(?P<wd>monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_MONTH = r"(?P<mon>january|february|march|april|may|june|july|august|september|october|november|december)"
_SEASON = r"(?P<season>spring|summer|autumn|fall|winter)"
# Past-tense cues that make a bare weekday ("on Friday") the one before, not the next one.
_PAST = re.compile(r"\b(?:was|were|did|had|went|got|came|saw|made|took|met|said|told|bought|ran|won|lost|"
                   r"felt|found|gave|left|ago|last|yesterday|\w+ed)\b", re.IGNORECASE)

# (kind, pattern): the first alternative that matches at a position wins, so longer phrases
# come before their prefixes ("the day before yesterday" before "yesterday").
_TABLE: tuple[tuple[str, str], ...] = (
    ("day-2", r"the day before yesterday"),
    ("day+2", r"the day after tomorrow"),
    ("day-1", r"yesterday|last night"),
    ("day+1", r"tomorrow"),
    ("day0", r"today|tonight|this (?:morning|afternoon|evening)|earlier today"),
    ("ago", _NUM + r" " + _UNIT + r" ago"),
    ("in", r"in " + _NUM + r" " + _UNIT),
    ("rel-weekend", r"(?P<rel>last|this|next|this past|this coming) weekend"),
    ("rel-unit", r"(?P<rel>last|this|next|this past|this coming) (?P<unit>week|month|year)"),
    ("rel-weekday", r"(?P<rel>last|this|next|this past|this coming) " + _WEEKDAY),
    ("rel-month", r"(?P<rel>last|this|next|this past|this coming) " + _MONTH),
    ("rel-season", r"(?P<rel>last|this|next|this past|this coming) " + _SEASON),
    ("weekday", r"on " + _WEEKDAY + r"|" + _WEEKDAY.replace("wd>", "wd2>") + r"(?= (?:morning|afternoon|evening|night))"),
)
_PATTERN = re.compile(
    r"\b(?:" + "|".join(f"(?P<k{i}>{p.replace('(?P<', f'(?P<g{i}_')})" for i, (_, p) in enumerate(_TABLE)) + r")\b"
    r"(?!\s*\(|['\u2019]s\b)",  # already annotated, or possessive ("yesterday's news"): leave it
    re.IGNORECASE)


@dataclass(frozen=True)
class Resolved:
    """One relative expression found in a text: where, what it said, and the date it means."""

    start: int
    end: int
    phrase: str
    when: str  # "7 May 2023", "the week before 8 May 2023", "April 2023", "2022", ...


def format_date(day: date) -> str:
    """7 May 2023 (no leading zero; the month spelled out)."""
    return f"{day.day} {MONTHS[day.month - 1]} {day.year}"


def format_month(year: int, month: int) -> str:
    return f"{MONTHS[month - 1]} {year}"


def _add_months(year: int, month: int, delta: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + delta
    return index // 12, index % 12 + 1


def _shift(day: date, unit: str, n: int) -> str:
    if unit == "day":
        return format_date(day + timedelta(days=n))
    if unit == "week":
        return format_date(day + timedelta(weeks=n))
    if unit == "month":
        return format_month(*_add_months(day.year, day.month, n))
    return str(day.year + n)


def _count(text: str) -> int:
    text = " ".join(text.lower().split())
    return int(text) if text.isdigit() else _NUMBERS[text]


def _weekday(day: date, target: int, rel: str, past: bool) -> date:
    if rel in ("last", "this past") or (rel == "" and past):
        back = (day.weekday() - target) % 7 or 7
        return day - timedelta(days=back)
    if rel == "this":
        return day + timedelta(days=target - day.weekday())  # the one of this week (Mon-Sun)
    ahead = (target - day.weekday()) % 7 or 7
    return day + timedelta(days=ahead)


def _relative_unit(day: date, unit: str, rel: str) -> str:
    step = -1 if rel in ("last", "this past") else 1 if rel in ("next", "this coming") else 0
    if unit == "week":
        if step == 0:
            return f"the week of {format_date(day)}"
        return f"the week {'before' if step < 0 else 'after'} {format_date(day)}"
    if unit == "month":
        return format_month(*_add_months(day.year, day.month, step))
    return str(day.year + step)


def _weekend(day: date, rel: str) -> str:
    if rel in ("last", "this past"):
        saturday = day - timedelta(days=(day.weekday() - 5) % 7 or 7)
        if day.weekday() == 6:
            saturday -= timedelta(days=7)  # said on a Sunday: the weekend before this one
    elif rel == "next":
        saturday = day + timedelta(days=(5 - day.weekday()) % 7 or 7)  # the coming one
    else:
        saturday = day + timedelta(days=(5 - day.weekday()) % 7) if day.weekday() != 6 else day - timedelta(days=1)
    return f"the weekend of {format_date(saturday)}"


def _named_month(day: date, month: int, rel: str) -> str:
    if rel in ("last", "this past"):
        year = day.year if month < day.month else day.year - 1
    elif rel in ("next", "this coming"):
        year = day.year if month > day.month else day.year + 1
    else:
        year = day.year
    return format_month(year, month)


def _season(day: date, name: str, rel: str) -> str:
    """Seasons are named by the year they start in ("winter 2022" = Dec 2022 - Feb 2023)."""
    months = SEASONS[name]
    label = "autumn" if name == "fall" else name
    # The year of the season occurrence that contains `day`, or else the next one to start.
    if name == "winter":
        current = day.year if day.month == 12 else day.year - 1 if day.month <= 2 else None
        upcoming = day.year
    else:
        current = day.year if day.month in months else None
        upcoming = day.year if day.month < months[0] else day.year + 1
    if rel in ("last", "this past"):
        year = (current if current is not None else upcoming) - 1
    elif rel in ("next", "this coming"):
        year = upcoming if current is None else current + 1
    else:
        year = current if current is not None else upcoming
    return f"{label} {year}"


def _when(kind: str, groups: dict[str, str | None], day: date, sentence: str) -> str | None:
    rel = " ".join((groups.get("rel") or "").lower().split())
    if kind.startswith("day"):
        return format_date(day + timedelta(days=int(kind[3:])))
    if kind in ("ago", "in"):
        n = _count(groups["n"] or "1") * (-1 if kind == "ago" else 1)
        return _shift(day, groups["unit"].lower(), n)
    if kind == "rel-unit":
        return _relative_unit(day, groups["unit"].lower(), rel)
    if kind == "rel-weekend":
        return _weekend(day, rel)
    if kind in ("rel-weekday", "weekday"):
        target = WEEKDAYS.index((groups.get("wd") or groups["wd2"]).lower())
        return format_date(_weekday(day, target, rel, bool(_PAST.search(sentence))))
    if kind == "rel-month":
        return _named_month(day, MONTHS.index(groups["mon"].capitalize()) + 1, rel)
    if kind == "rel-season":
        return _season(day, groups["season"].lower(), rel)
    return None


# Every expression of _TABLE contains one of these words or word parts ("day" covers today,
# yesterday and the weekdays; the numbered forms need a unit): a text with none of them has
# nothing to resolve, and most messages are skipped without running _PATTERN over them.
_CUES = ("day", "last", "next", "this", "tonight", "tomorrow", "week", "month", "year")
# IGNORECASE also matches these non-ASCII letters to ASCII ones (re's case folding; str.lower()
# alone would miss them): folded first, so the cue test never skips a text _PATTERN matches.
_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})


def might_have_dates(text: str) -> bool:
    """False only when _PATTERN cannot match `text` (a necessary condition, cheap)."""
    folded = (text if text.isascii() else text.translate(_FOLD)).lower()
    return any(cue in folded for cue in _CUES)


def find(text: str, at: datetime | date) -> list[Resolved]:
    """Every relative expression in `text`, resolved against `at` (the message's time)."""
    if not might_have_dates(text):
        return []
    day = at.date() if isinstance(at, datetime) else at
    found = []
    for match in _PATTERN.finditer(text):
        index = next(int(name[1:]) for name, value in match.groupdict().items()
                     if value is not None and name.startswith("k"))
        prefix = f"g{index}_"
        groups = {name[len(prefix):]: value for name, value in match.groupdict().items() if name.startswith(prefix)}
        kind = _TABLE[index][0]
        if kind == "rel-month" and (groups.get("mon") or "").lower() == "may" \
                and (groups.get("rel") or "").lower() == "this":
            continue  # "this may be": the verb, not the month
        when = _when(kind, groups, day, text)
        if when is not None:
            found.append(Resolved(match.start(), match.end(), match.group(0), when))
    return found


def annotate(text: str, at: datetime | date | None) -> str:
    """`text` with each relative expression followed by its date: "yesterday (7 May 2023)"."""
    if at is None or not text:
        return text
    out, last = [], 0
    for item in find(text, at):
        out.append(text[last:item.end])
        out.append(f" ({item.when})")
        last = item.end
    out.append(text[last:])
    return "".join(out)
