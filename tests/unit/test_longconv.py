"""The context-quality benchmark's dataset generator and scorer (bench/longconv.py, bench/ctx_scoring.py)."""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, date, datetime, timedelta

import pytest

from bench import ctx_scoring as S
from bench import longconv as L

CONVERSATIONS = L.generate(seed=3, conversations=4)
QUESTIONS = [(c, q) for c in CONVERSATIONS for q in c.questions]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def written(d: date) -> str:
    return f"{d.day} {MONTHS[d.month - 1]} {d.year}"


def expected_date(expression: str, said: date) -> str:
    """An independent reading of the relative expressions (not the generator's code)."""
    offsets = {"yesterday": -1, "tomorrow": 1, "two days ago": -2, "three days ago": -3, "four days ago": -4}
    if expression in offsets:
        return written(said + timedelta(days=offsets[expression]))
    m = re.fullmatch(r"(last|next) (\w+day)", expression)
    if m:
        step = -1 if m[1] == "last" else 1
        d = said + timedelta(days=step)
        while DAYS[d.weekday()] != m[2]:
            d += timedelta(days=step)
        return written(d)
    if expression in ("last week", "last weekend", "two weeks ago"):
        lead = {"last week": "the week", "last weekend": "the weekend", "two weeks ago": "two weeks"}[expression]
        return f"{lead} before {written(said)}"
    if expression in ("last month", "next month"):
        first = said.replace(day=1)
        other = first - timedelta(days=1) if expression == "last month" else first + timedelta(days=32)
        return f"{MONTHS[other.month - 1]} {other.year}"
    raise AssertionError(f"unexpected expression {expression!r}")


def test_same_seed_same_conversations_and_another_seed_differs() -> None:
    again = L.generate(seed=3, conversations=4)
    assert [(m.content, m.occurred_at) for m in again[1].messages] == \
        [(m.content, m.occurred_at) for m in CONVERSATIONS[1].messages]
    assert [q.answer for q in again[2].questions] == [q.answer for q in CONVERSATIONS[2].questions]
    other = L.generate(seed=4, conversations=1)[0]
    assert [m.content for m in other.messages[:50]] != [m.content for m in CONVERSATIONS[0].messages[:50]]


def test_shape_long_dated_two_person_conversations() -> None:
    for conv in CONVERSATIONS:
        sessions = {m.session for m in conv.messages}
        assert 15 <= len(sessions) <= 30
        assert len(conv.messages) >= 200
        assert [m.seq for m in conv.messages] == list(range(len(conv.messages)))
        assert {m.role for m in conv.messages} == {"user", "assistant"}
        for m in conv.messages:
            assert m.content.startswith(f"{m.speaker}: ")
            assert m.role == ("user" if m.speaker == conv.user else "assistant")
        times = [m.occurred_at for m in conv.messages]
        assert times == sorted(times)
        assert times[-1] - times[0] > timedelta(days=60)  # months, not one afternoon
        per_session = Counter(m.session for m in conv.messages)
        assert min(per_session.values()) >= 10


def test_every_kind_of_question_is_asked() -> None:
    kinds = Counter(q.kind for _, q in QUESTIONS)
    assert set(kinds) == {"single", "multi", "temporal", "inference"}
    assert all(n >= 8 for n in kinds.values()), kinds
    assert len({q.qid for _, q in QUESTIONS}) == len(QUESTIONS)


@pytest.mark.parametrize("conv_index", range(len(CONVERSATIONS)))
def test_non_temporal_answers_come_from_their_evidence(conv_index: int) -> None:
    conv = CONVERSATIONS[conv_index]
    for q in conv.questions:
        if q.kind == "temporal":
            continue
        evidence = set(S.words(" ".join(conv.messages[seq].content for seq in q.evidence)))
        wanted = S.content_words(q.answer)
        assert wanted, q
        assert set(wanted) <= evidence, (q, [conv.messages[s].content for s in q.evidence])


def test_multi_session_answers_need_more_than_one_session() -> None:
    for conv, q in QUESTIONS:
        if q.kind == "multi":
            assert len({conv.messages[s].session for s in q.evidence}) >= 2, q


@pytest.mark.parametrize("conv_index", range(len(CONVERSATIONS)))
def test_temporal_answers_follow_from_the_message_time_and_its_expression(conv_index: int) -> None:
    conv = CONVERSATIONS[conv_index]
    temporal = [q for q in conv.questions if q.kind == "temporal"]
    assert temporal
    for q in temporal:
        message = conv.messages[q.evidence[0]]
        assert q.expression and f" {q.expression}" in message.text, (q, message.text)
        assert q.answer == expected_date(q.expression, message.occurred_at.date()), (q, message.occurred_at)


@pytest.mark.parametrize("expression, said, answer", [
    ("yesterday", date(2023, 3, 1), "28 February 2023"),
    ("two days ago", date(2024, 1, 1), "30 December 2023"),
    ("last Friday", date(2023, 6, 14), "9 June 2023"),        # a Wednesday
    ("last Wednesday", date(2023, 6, 14), "7 June 2023"),     # a week back, not today
    ("next Monday", date(2023, 6, 14), "19 June 2023"),
    ("last week", date(2023, 6, 9), "the week before 9 June 2023"),
    ("last month", date(2023, 1, 15), "December 2022"),
    ("next month", date(2023, 12, 31), "January 2024"),
])
def test_resolve_table(expression: str, said: date, answer: str) -> None:
    at = datetime(said.year, said.month, said.day, 12, tzinfo=UTC)
    assert L.resolve(expression, at) == answer == expected_date(expression, said)


def test_scoring_counts_content_words_and_keeps_months_and_numbers() -> None:
    assert S.content_words("the week before 7 May 2023") == ["week", "7", "may", "2023"]
    assert S.score("7 May 2023", "[7 May 2023] Ana: we adopted a cat") == 1.0
    assert S.score("Lisbon Porto", "moved to porto.") == 0.5
    assert S.score("Pixel", "") == 0.0
    assert S.is_hit(0.8) and not S.is_hit(0.75)
    assert S.score("mustard yellow", "a mustard-yellow bike") == 1.0  # punctuation separates words


def test_bm25_ranks_the_message_that_shares_rare_words_first() -> None:
    docs = ["Ana: the weather is grey again", "Ben: we adopted a cat called Pixel",
            "Ana: the cat next door is loud", "Ben: grey cat, grey day"]
    index = S.BM25(docs)
    assert index.ranked("When did Ben adopt Pixel?")[0] == 1
    assert index.ranked("nothing matches this") == []


def test_pack_keeps_best_first_within_budget() -> None:
    text, used = S.pack(["aaaa", "bbbbbbbbbb", "cc"], 6, len)
    assert text == "aaaa\ncc" and used == 6


def test_summaries_per_kind() -> None:
    rows = [{"kind": "single", "score": 1.0}, {"kind": "single", "score": 0.5}, {"kind": "temporal", "score": 0.8}]
    out = S.summarize(rows, ("single", "temporal", "multi"))
    assert out["single"] == {"n": 2, "score": 0.75, "hit": 0.5}
    assert out["temporal"]["hit"] == 1.0 and out["multi"]["n"] == 0 and out["all"]["n"] == 3


def test_exact_needs_the_date_as_a_phrase() -> None:
    scattered = "[7 June 2023] Ana: hi\n[9 May 2023] Ben: the 2023 one"
    assert S.is_hit(S.score("7 May 2023", scattered)) and not S.exact("7 May 2023", scattered)
    assert S.exact("the week before 9 June 2023", "[9 June 2023] Ben: we moved last week")
    assert S.exact("June 2023", "[2 June 2023] x") and S.exact("Pixel", "a cat called Pixel")


def _row(kind: str, score: float, **extra) -> dict:
    return {"kind": kind, "score": score, "exact": S.is_hit(score), **extra}


def test_report_table_and_aims() -> None:
    from bench import ctx_report as R

    good = [_row(k, 1.0) for k in R.KINDS]
    poor = [_row(k, 0.25) for k in R.KINDS]
    calls = [{"status": 200, "bytes": 1000 + i, "ms": 10.0 + i, "mode": "caught_up", "gap": 3, "tokens_used": 400,
              "error": None} for i in range(4)] + [{"status": 500, "bytes": 70_000, "ms": 90.0, "mode": None,
                                                     "gap": 0, "tokens_used": None, "error": None}]
    result = {"first_turn": S.summarize(good, R.KINDS), "sequential": S.summarize(poor, R.KINDS),
              "bm25_500": S.summarize(poor, R.KINDS), "bm25_2000": S.summarize(good, R.KINDS),
              "ceiling_derived": S.summarize(good, R.KINDS), "ceiling_raw_log": S.summarize(good, R.KINDS),
              "responses": R.response_stats(calls)}
    assert result["responses"]["5xx"] == 1 and result["responses"]["over_64kb"] == 1
    assert result["responses"]["no_response"] == 0
    assert R.response_stats([{**calls[0], "status": 0}])["no_response"] == 1
    assert result["responses"]["latency_ms_p50"] == 12.0 and result["responses"]["bytes_max"] == 70_000
    met = {aim: ok for aim, ok, _ in R.aims(result, 500)}
    assert met["retrieved finds >= 0.10 more answer words than BM25 at 500 tokens"]
    assert not met["sequential within 10% of first-turn"]
    assert not met["no 5xx"] and not met["no response over 64 KB"]
    assert met["single-client p50 under 60 ms"] and met["when-questions hit >= 0.25"]
    table = R.table(result, 500).splitlines()
    assert len(table) == 2 + 6
    assert table[2].startswith("| this project, `retrieved`, first question | 1.00 | 1.00 | 1.00")
    assert "| 0.25 | 0.00 |" in table[3]


def test_ceilings_read_dates_from_the_raw_log_not_from_memory() -> None:
    from bench import ctx_report as R

    conv, q = next((c, q) for c, q in QUESTIONS if q.kind == "temporal" and " before " in q.answer)
    rows = R.ceilings(conv, {"facts": "nothing useful", "chunks": ""})
    by_source = {name: next(r for r in got if r["qid"] == q.qid) for name, got in rows.items()}
    assert by_source["raw_log"]["exact"] and not by_source["derived"]["exact"] and by_source["facts"]["score"] == 0
