"""Retrieval's pure parts: query text, keyword query, relevance per method, ranking, token counting."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from core.settings import RetrievalSettings
from retrieval.scoring import DAY_S
from retrieval.search import SearchRow, search_sql, tsquery_text, vector_literal
from retrieval.service import (
    RetrievalConfig,
    count_lines,
    informativeness,
    query_text,
    rank_all,
    refers_back,
    relevance,
)
from retrieval.tokens import count_tokens
from tests.support import labelled_set

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def row(item_id: str, cosine: float, keyword: float = 0.0, *, importance: int | None = 3, age_days: float = 0,
        kind: str = "fact", words: int = 20) -> SearchRow:
    return SearchRow(kind, item_id, f"content {item_id}", cosine, keyword, True, keyword > 0, None,
                     NOW - timedelta(days=age_days), importance, "other", "fact", "private", doc_lexemes=words)


def test_query_text_puts_the_current_message_first_then_earlier_ones_newest_first():
    text = query_text("Which port was that?", ["oldest", "middle", "newest"])
    assert text.split("\n") == ["Which port was that?", "newest", "middle", "oldest"]


def test_query_text_cuts_each_part_collapses_whitespace_and_drops_repeats():
    config = RetrievalConfig(query_chars=10, context_message_chars=5)
    text = query_text("  a   very long current message ", ["abcdefghij", "a very long current  message"], config)
    assert text.split("\n") == ["a very lon", "abcde"]


@pytest.mark.parametrize(("current", "earlier", "expected"),
                         [(None, [], None), ("   ", [], None), (None, ["only history"], "only history")])
def test_query_text_without_a_message_uses_history_or_nothing(current, earlier, expected):
    assert query_text(current, earlier) == expected


def test_tsquery_text_ors_distinct_lexemes_drops_common_ones_and_quotes():
    assert tsquery_text(["wifi", "problem", "wifi", "router"], common={"problem"}) == "'wifi' | 'router'"
    assert tsquery_text(["one", "two", "three"], max_terms=2) == "'one' | 'two'"
    assert tsquery_text(["o'reilli", "a\\b"]) == "'o''reilli' | 'a\\\\b'"
    assert tsquery_text([], ()) is None and tsquery_text(["the"], {"the"}) is None


def test_relevance_per_method():
    hit = row("a", cosine=0.5, keyword=0.1)
    assert relevance(hit, "vector", 0.3) == 0.5
    assert relevance(hit, "keyword", 0.3) == 0.1
    assert relevance(hit, "hybrid", 0.3) == pytest.approx(0.53)


def test_rank_all_applies_importance_and_recency_and_keys_by_kind():
    rows = [row("old", 0.8, age_days=200), row("fresh", 0.6), row("vip", 0.45, importance=5),
            row("c1", 0.5, kind="chunk", importance=None)]
    ranked = rank_all(rows, NOW.timestamp())
    assert [s.candidate.item_id for s in ranked] == ["fact:vip", "fact:fresh", "chunk:c1", "fact:old"]
    old = ranked[-1].score
    assert (old.similarity, old.recency_weight, old.final) == (0.8, 0.5, pytest.approx(0.4))
    assert ranked[0].score.importance_weight == pytest.approx(5 / 3)
    assert ranked[0].candidate.timestamp == pytest.approx(NOW.timestamp())
    assert abs(ranked[-1].candidate.timestamp - (NOW.timestamp() - 200 * DAY_S)) < 1


def test_config_from_settings_keeps_ef_search_at_least_k():
    config = RetrievalConfig.from_settings(RetrievalSettings(candidate_k=80, ef_search=40, threshold=0.2))
    assert (config.ef_search, config.candidate_k, config.scoring.threshold) == (80, 80, 0.2)


def test_count_lines_equals_the_tokenizer_on_whole_texts():
    rng = random.Random(4)
    words = ["Lisbon", "don't", "192.168.8.2", "naïve", "x", "Grandpa", "(shared)", "-", "[hobby]", "übung"]
    for _ in range(50):
        lines = [" ".join(rng.choices(words, k=rng.randint(0, 12))) for _ in range(rng.randint(1, 6))]
        text = "\n".join(lines)
        assert count_lines(text) == count_tokens(text)


def test_vector_literal_is_pgvector_text():
    assert vector_literal(np.array([0.5, -1.0, 1e-9], dtype=np.float32)) == "[0.5,-1.0,1e-9]"
    vector = np.random.default_rng(3).standard_normal(384).astype(np.float32)
    text = vector_literal(vector)
    assert text.startswith("[") and text.endswith("]") and " " not in text
    assert np.array_equal(np.array(text[1:-1].split(","), dtype=np.float32), vector)  # every float32 exactly


def test_fact_scope_never_admits_other_users_private_or_dead_facts():
    with_subject = search_sql("fact", "s1", vector=True, keyword=True)
    assert "t.visibility = 'shared'" in with_subject and "t.deleted_at IS NULL AND t.valid_to IS NULL" in with_subject
    without = search_sql("fact", None, vector=True, keyword=False)
    assert "shared" not in without and "t.subject_id IS NULL" in without and "tsquery" not in without
    assert "user_id = %(user)s" in search_sql("chunk", "s1", vector=False, keyword=True)


def test_labelled_set_is_consistent_and_recall_counts_fractions():
    labelled_set.validate()
    perfect = {q.id: list(q.relevant) for q in labelled_set.QUERIES}
    assert labelled_set.recall_at_k(perfect, 10) == 1.0
    assert labelled_set.recall_at_k({}, 10) == 0.0
    first_only = {q.id: list(q.relevant[:1]) for q in labelled_set.QUERIES}
    expected = sum(1 / len(q.relevant) for q in labelled_set.QUERIES) / len(labelled_set.QUERIES)
    assert labelled_set.recall_at_k(first_only, 10) == pytest.approx(expected)


def test_a_reply_of_two_words_does_not_outrank_a_sentence_with_the_same_cosine():
    """MiniLM puts "Ana: Good to know." near any question naming Ana: few words, less weight."""
    assert informativeness(20, 6) == informativeness(6, 6) == 1.0
    assert informativeness(3, 6) == pytest.approx((3 / 6) ** 0.5) and informativeness(0, 6) < informativeness(1, 6) + 1e-9
    assert informativeness(2, 0) == 1.0  # switched off
    short, long = row("short", 0.5, words=2), row("long", 0.5, words=9)
    config = RetrievalConfig(informative_lexemes=6)
    assert relevance(short, "hybrid", 0.5, 6) < relevance(long, "hybrid", 0.5, 6) == 0.5
    assert [s.candidate.item_id for s in rank_all([short, long], NOW.timestamp(), config)] == ["fact:long", "fact:short"]


@pytest.mark.parametrize(("message", "follow_up"), [
    ("Which port was that again?", True), ("How is it going so far?", True), ("Was he ever in the army?", True),
    ("What jobs has Oskar had?", False), ("WiFi problem", False), ("How many partitions do the topics have?", False)])
def test_only_a_follow_up_that_refers_back_is_embedded_with_the_earlier_turns(message, follow_up):
    assert refers_back(message) is follow_up


def test_budget_scales_the_candidates_per_search():
    config = RetrievalConfig(candidate_k=20, candidates_per_100_tokens=5, max_candidate_k=200)
    assert config.k_for(100) == 20 and config.k_for(500) == 25 and config.k_for(2000) == 100
    assert config.k_for(8000) == 200


def test_the_search_hands_on_candidates_by_the_budget_and_the_ranking_settings_only_when_asked():
    from retrieval.service import prescore_for

    assert prescore_for(RetrievalConfig(), 500, NOW) is None  # off: every candidate
    config = RetrievalConfig.from_settings(RetrievalSettings(kept_per_100_tokens=16, importance_power=0.3,
                                                             stale_weight=0.7), "vector")
    assert config.kept_for(500) == 80 and config.kept_for(4000) == 640 and config.kept_for(50) == 20
    cut = prescore_for(config, 500, NOW)
    assert (cut.keep, cut.now, cut.method) == (80, NOW, "vector")
    params = cut.params({"lgbtq": 4.0, "group": 1.0})
    assert (params["ps_lexemes"], params["ps_weights"], params["ps_total"]) == (["lgbtq", "group"], [4.0, 1.0], 5.0)
    assert (params["ps_importance_power"], params["ps_stale_weight"], params["ps_kw"]) == (0.3, 0.7, 1.0)


def message_row(seq: int, cosine: float, content: str, reply: str | None = None) -> SearchRow:
    return SearchRow("message", f"c1:{seq}", content, cosine, 0.0, True, False, None, NOW, conversation_id="c1",
                     range_start=seq, range_end=seq + 1, role="user", doc_lexemes=20,
                     reply=reply, reply_role="assistant" if reply else None)


def test_a_question_carries_its_reply_and_the_reply_is_not_shown_twice():
    from retrieval.service import message_text, pair_replies
    config = RetrievalConfig()
    question = message_row(4, 0.6, "Which database should we use?", reply="PostgreSQL: transactional and mature.")
    answer = message_row(5, 0.4, "PostgreSQL: transactional and mature.")
    rows = pair_replies([question, answer, message_row(9, 0.3, "Unrelated.")], config)
    assert [r.item_id for r in rows] == ["c1:4", "c1:9"]
    assert message_text(rows[0], config) == "Which database should we use? → assistant: PostgreSQL: transactional and mature."


def test_a_reply_more_relevant_than_its_question_stands_alone():
    from retrieval.service import message_text, pair_replies
    config = RetrievalConfig()
    question = message_row(0, 0.2, "How was your day?", reply="I adopted a beagle named Biscuit.")
    answer = message_row(1, 0.7, "I adopted a beagle named Biscuit.")
    rows = pair_replies([question, answer], config)
    assert [r.item_id for r in rows] == ["c1:0", "c1:1"]
    assert message_text(rows[0], config) == "How was your day?"


def test_a_pair_is_scored_with_both_words_and_a_question_shown_alone_with_its_own():
    """The search scores a question that carries its reply as the pair (keyword_score covers
    the query's words either holds, own_keyword_score the question's alone): shown with its
    reply it keeps the pair's; shown without it (the reply stands alone, or replies are off) it
    goes back to its own words."""
    from retrieval.service import config_relevance, pair_replies
    config = RetrievalConfig()
    question = replace(message_row(3, 0.4, "Ana: How did you two meet?", reply="Bo: It happened at yoga in the park."),
                       keyword_score=0.9, own_keyword_score=0.3, reply_lexemes=["yoga", "park"])
    [paired] = pair_replies([question], config)
    assert paired.keyword_score == 0.9 and paired.reply is not None
    alone = replace(message_row(4, 0.95, "Bo: It happened at yoga in the park."), keyword_score=0.9)
    assert config_relevance(alone, config) > config_relevance(question, config)
    shown = pair_replies([question, alone], config)
    assert [(r.item_id, r.reply, r.keyword_score) for r in shown] == [("c1:3", None, 0.3), ("c1:4", None, 0.9)]
    [off] = pair_replies([question], RetrievalConfig(reply_chars=0))
    assert (off.reply, off.keyword_score, off.reply_lexemes) == (None, 0.3, None)


def test_a_reply_that_asks_in_turn_stays_the_next_exchanges_row():
    """"See how happy they are? -> How long do you walk them for?" -> "About an hour.": the
    second question is the first one's reply, and the row that carries the answer."""
    from retrieval.service import message_text, pair_replies
    config = RetrievalConfig()
    first = message_row(3, 0.6, "Bo: See how happy they are?", reply="Ana: How long do you walk them for?")
    second = message_row(4, 0.5, "Ana: How long do you walk them for?", reply="Bo: Usually for about an hour.")
    rows = pair_replies([first, second], config)
    assert [r.item_id for r in rows] == ["c1:3", "c1:4"]
    assert message_text(rows[1], config).endswith("→ Bo: Usually for about an hour.")


def test_the_best_message_line_goes_on_with_the_next_turn_of_its_speaker():
    """"Sapiens" in one reply, "Avalanche" in the same speaker's next turn: of the best message
    lines, one whose row carries that turn shows it; lower lines, and a config with it off, do not."""
    from retrieval.scoring import Candidate, ScoreBreakdown, ScoredItem
    from retrieval.service import continue_best

    def item(seq: int, final: float) -> ScoredItem:
        return ScoredItem(Candidate(f"message:c1:{seq}", "message", f"Bo: line {seq}.", 0.5, 0.0),
                          ScoreBreakdown(final, 1.0, 1.0, final))
    rows = {f"message:c1:{s}": replace(message_row(s, 0.5, f"Bo: line {s}."),
                                       continued=f"Bo: more after {s}.")
            for s in (2, 8)}
    rows["message:c1:5"] = message_row(5, 0.5, "Bo: line 5.")
    kept = [item(5, 0.9), item(2, 0.8), item(8, 0.7)]  # 5 carries no next turn
    shown = continue_best(kept, rows, 2, 400)
    assert [i.candidate.content for i in shown] == ["Bo: line 5.", "Bo: line 2. … Bo: more after 2.", "Bo: line 8."]
    # only the best lines: the third is not continued, nor the second when one line is
    assert [i.candidate.content for i in continue_best(kept, rows, 1, 400)] == [i.candidate.content for i in kept]
    assert [i.score for i in shown] == [i.score for i in kept]
    assert continue_best(kept, rows, 0, 400) == kept


def test_replies_can_be_turned_off():
    from retrieval.service import message_text, pair_replies
    config = RetrievalConfig(reply_chars=0)
    question = message_row(4, 0.6, "Which database?", reply="PostgreSQL.")
    assert message_text(pair_replies([question], config)[0], config) == "Which database?"
    assert RetrievalConfig.from_settings(RetrievalSettings(reply_chars=0)).reply_chars == 0


def test_a_long_item_gets_less_keyword_credit_than_a_message_that_covers_the_same_words():
    """A chunk of ~80 distinct words covers a question's words spread over ten messages by its
    length alone: its coverage counts (35 / words) ** 0.75; an item of up to 35 words keeps it."""
    from retrieval.scoring import length_weight

    assert length_weight(10, 35, 0.75) == length_weight(35, 35, 0.75) == 1.0
    assert length_weight(70, 35, 0.75) == pytest.approx(0.5 ** 0.75)
    assert length_weight(70, 0, 0.75) == 1.0  # switched off
    message, chunk = row("message", 0.5, 1.0, words=12, kind="message"), row("chunk", 0.5, 1.0, words=80, kind="chunk")
    config = RetrievalConfig()
    assert (config.keyword_length_lexemes, config.keyword_length_power) == (35, 0.75)
    assert relevance(message, "hybrid", 1.0, 6, 0.5, 35, 0.75) == pytest.approx(1.5)
    assert relevance(chunk, "hybrid", 1.0, 6, 0.5, 35, 0.75) == pytest.approx(0.5 + (35 / 80) ** 0.75)
    assert relevance(chunk, "hybrid", 1.0, 6, 0.5, 0) == pytest.approx(1.5)  # off: the same credit
    assert [s.candidate.item_id for s in rank_all([chunk, message], NOW.timestamp(), config)] == [
        "message:message", "chunk:chunk"]
    settings = RetrievalConfig.from_settings(RetrievalSettings(keyword_length_lexemes=20, keyword_length_power=1.0))
    assert (settings.keyword_length_lexemes, settings.keyword_length_power) == (20, 1.0)


def test_a_long_reply_keeps_the_sentence_that_answers_though_it_shares_no_word_with_the_question():
    """Cut to 240 characters on the question's words, this reply kept its first sentences (the
    ones that echo "pottery break") and lost the answer; a reply is now cut like a message (400)."""
    from retrieval.service import message_text
    reply = ("Bob: Thanks for asking about my pottery break! The pottery break has been long, and I miss the"
             " pottery studio a lot, honestly more than I expected when the break started. The doctor says"
             " a few more weeks. Meanwhile I have been reading a novel about sailors and painting"
             " watercolour landscapes every evening.")
    assert 240 < len(reply) <= 400
    question = message_row(4, 0.6, "Ana: What do you do during your pottery break?", reply=reply)
    assert RetrievalConfig().reply_chars == RetrievalSettings().reply_chars == 400
    assert "watercolour" in message_text(question, RetrievalConfig(), ["pottery", "break"])
    assert "watercolour" not in message_text(question, RetrievalConfig(reply_chars=240), ["pottery", "break"])


@pytest.mark.parametrize("method", ["hybrid", "vector", "keyword"])
def test_to_candidates_gives_each_row_exactly_its_relevance_and_key(method):
    from retrieval.service import config_relevance, to_candidates
    config = RetrievalConfig(method=method)
    rng = random.Random(7)
    rows = [row(f"r{i}", rng.uniform(-0.2, 0.9), rng.choice([0.0, rng.random()]), words=words, kind=kind)
            for i, (words, kind) in enumerate([(0, "fact"), (1, "chunk"), (5, "fact"), (6, "chunk"), (40, "fact")])]
    candidates = to_candidates(rows, config)
    assert [c.similarity for c in candidates] == [  # the same floats, bit for bit
        config_relevance(r, config) for r in rows]
    assert [c.item_id for c in candidates] == [f"{r.kind}:{r.item_id}" for r in rows]
    assert [c.timestamp for c in candidates] == [r.timestamp.timestamp() for r in rows]


def test_the_row_factory_puts_columns_in_field_order_and_scores_coverage_only_from_matches():
    from dataclasses import fields
    from types import SimpleNamespace
    from retrieval.search import rows_with_coverage
    names = [f.name for f in fields(SearchRow)]
    shuffled = names[::-1]  # the statement's column order need not be the dataclass's
    # the names as libpq's result gives them (retrieval.search.column_names)
    cursor = SimpleNamespace(pgresult=SimpleNamespace(nfields=len(shuffled), fname=lambda i: shuffled[i].encode()))
    make = rows_with_coverage({"wifi": 2.0, "router": 1.0})(cursor)
    base = row("a", 0.4)
    values = {**{n: getattr(base, n) for n in names}, "keyword_score": 99.0}
    for matched, expected_score in [(["wifi"], 2 / 3), (["wifi", "router", "wifi"], 1.0), ([], 0.0), (None, 0.0)]:
        made = make([{**values, "lexemes": matched}[n] for n in shuffled])
        assert made == SearchRow(**{**values, "lexemes": matched, "keyword_score": expected_score})
    assert rows_with_coverage({})(cursor)([{**values, "lexemes": ["wifi"]}[n] for n in shuffled]).keyword_score == 0.0
