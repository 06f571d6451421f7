"""The judge's pure parts (issue 26): the foresight signal, the comparison, the gate, the pacing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from domain import judge as J
from retrieval.search import SearchRow
from api.judge import as_of
from runtime.judge import Pacer


def side(text: str, items: dict[str, int] | None = None, summary: str | None = None, **by_kind: str) -> J.Side:
    return J.Side(items or {}, summary, text, by_kind)


def test_terms_drop_stop_words_filler_short_words_and_the_query():
    assert J.terms("Yeah I think Marta really loved the violin in Lisbon, 2019!") == {
        "marta", "loved", "violin", "lisbon", "2019"}
    assert J.terms("Marta's violin", drop={"violin"}) == {"marta"}


def test_named_things_are_capitalised_inside_a_sentence_or_numbers():
    assert J.named("Yesterday Marta flew to Lisbon. She paid 300 euros.") == {"marta", "lisbon", "300"}


def test_foresight_is_the_share_of_what_came_next_that_the_context_held():
    continuation = "Marta took the violin to Lisbon on Thursday."
    full = J.foresight("Marta took her violin; she lives in Lisbon and practises on Thursday.", continuation)
    half = J.foresight("Marta plays the violin.", continuation)
    none = J.foresight("We talked about the weather.", continuation)
    assert full.score == 1.0 and none.score == 0.0 and 0 < half.score < 1
    assert (half.wanted, half.held) == (5, 2)  # marta took violin lisbon thursday; marta violin
    assert (half.named_score, full.named_score) == (0.0, 1.0)  # Lisbon, Thursday (not Marta: sentence start)


def test_words_the_turn_itself_says_are_not_foresight():
    score = J.foresight("", "Marta took the violin", query="Did Marta bring the violin?")
    assert (score.wanted, score.score) == (1, 0.0)  # only "took" is left to foresee


def test_nothing_to_foresee_is_no_signal_not_a_perfect_score():
    assert J.foresight("anything", "Yeah, thanks!").score is None


def test_a_turn_compares_items_tokens_and_summaries():
    a = side("Marta violin", {"fact:1": 10, "message:c:3": 20}, "0-5")
    b = side("Marta violin Lisbon", {"fact:1": 10, "chunk:9": 30}, "2-15")
    t = J.judge_turn("c", 16, a, b, "Marta Lisbon", None)
    assert (t.kept, t.lost, t.gained) == (["fact:1"], ["message:c:3"], ["chunk:9"])
    assert (t.tokens_a, t.tokens_b, t.summary_a, t.summary_b) == (30, 40, "0-5", "2-15")
    assert t.foresight_a.score == 0.5 and t.foresight_b.score == 1.0


def test_the_overall_verdict_and_counts():
    better = J.judge_turn("c", 1, side("marta"), side("marta lisbon"), "marta lisbon", None)
    same = J.judge_turn("c", 2, side("kayak"), side("kayak"), "kayak", None)
    silent = J.judge_turn("c", 3, side("x"), side("y"), "thanks", None)
    overall = J.summarize([better, same, silent], margin=0.01)
    assert overall["scored_turns"] == 2 and overall["turns"] == 3
    assert (overall["foresight_a"], overall["foresight_b"], overall["delta"]) == (0.75, 1.0, 0.25)
    assert (overall["turns_better"], overall["turns_worse"], overall["turns_same"]) == (1, 0, 1)
    assert overall["verdict"] == "better"
    assert J.summarize([same], margin=0.01)["verdict"] == "same"
    assert J.summarize([silent])["verdict"] == "no signal"


@pytest.mark.parametrize(("delta", "margin", "allowed"), [(-0.2, 0.01, False), (-0.005, 0.01, True),
                                                           (0.1, 0.01, True), (-0.02, 0.05, True)])
def test_the_gate_refuses_worse_beyond_the_margin_and_says_by_how_much(delta, margin, allowed):
    overall = {"delta": delta, "foresight_a": 0.5, "foresight_b": 0.5 + delta, "scored_turns": 40}
    decision = J.gate(overall, margin)
    assert decision.allowed is allowed
    if not allowed:
        assert f"{-delta:.3f} worse" in decision.message and "40 judged turns" in decision.message
    assert not J.gate({"delta": None}, margin).allowed


def test_questions_score_answer_words_and_hits_per_kind():
    sides = {"a": side("Marta lives in Lisbon", fact="Marta lives in Lisbon", gap=""),
             "b": side("nothing here", summary_text="nothing")}
    scores = J.question_scores("Lisbon", sides)
    assert scores["a"] == {"score": 1.0, "hit": True, "hits_by_kind": {"fact": True}}
    assert scores["b"]["hit"] is False
    total = J.summarize_questions([{"scores": scores}], ["a", "b"])
    assert total["a"]["hits"] == 1 and total["a"]["hits_by_kind"] == {"fact": 1} and total["b"]["hits"] == 0


def test_the_pacer_keeps_to_its_share_of_a_core():
    assert Pacer(0.5).pause_after(0.2) == pytest.approx(0.2)  # busy half the time
    assert Pacer(0.25).pause_after(0.1) == pytest.approx(0.3)
    assert Pacer(1.0).pause_after(0.1) == 0.0


def _row(kind: str, conversation: str, range_end: int | None, occurred: datetime) -> SearchRow:
    return SearchRow(kind=kind, item_id="x", content="", cosine=0.0, keyword_score=0.0, in_vector=True,
                     in_keyword=False, surfaced_seqs=None, timestamp=occurred, conversation_id=conversation,
                     range_end=range_end, occurred_start=occurred, occurred_end=occurred)


def test_as_of_keeps_only_what_existed_at_the_turn():
    turn_time = datetime(2026, 1, 1, tzinfo=timezone.utc)
    keep = as_of("c", 20, turn_time)
    earlier, later = turn_time - timedelta(days=1), turn_time + timedelta(seconds=1)
    assert keep(_row("chunk", "c", 20, earlier)) and not keep(_row("chunk", "c", 24, earlier))
    assert keep(_row("fact", "other", None, earlier)) and not keep(_row("fact", "other", None, later))
    assert keep(_row("message", "other", 5, turn_time)) and not keep(_row("chunk", "other", 8, later))


def test_a_generations_overrides_apply_on_top_of_the_given_settings_not_the_environment():
    from core.settings import Settings
    from runtime.judge import settings_with

    base = Settings(generation="g1", postgres={"dsn": "postgresql://elsewhere/db"})
    read = settings_with(base, {"MEMORY_RETRIEVAL__THRESHOLD": "5", "MEMORY_SYSTEMS": '["window"]',
                                "MEMORY_WINDOW__CONTEXT_MAX_GAP_MESSAGES": "0", "PATH": "/bin"})
    assert read.retrieval.threshold == 5.0 and read.window.context_max_gap_messages == 0
    assert list(read.systems) == ["window"] and read.postgres.dsn == "postgresql://elsewhere/db"
    with pytest.raises(ValueError):
        settings_with(base, {"MEMORY_NOPE__X": "1"})
