"""The demo's report (pure rendering): every section, and the retrieved memory's score breakdown."""

from __future__ import annotations

from datetime import UTC, datetime

from memory_agent.demo import Observed, expected_chunks, sample_messages, sessions, summary_trigger
from memory_agent.demo_render import render_report

SCORE = {"similarity": 0.47, "importance_weight": 1.0, "recency_weight": 0.9, "final": 0.42, "cosine": 0.46,
         "keyword_score": 0.01, "found_by": ["vector", "keyword"]}


def _observed() -> Observed:
    return Observed(
        summaries=[{"memory_id": 1, "start_sequence": 0, "end_sequence": 5, "base_memory_id": None,
                    "status": "completed", "model": "extractive-v1", "memory_text": "We chose FastAPI."},
                   {"memory_id": 2, "start_sequence": 6, "end_sequence": 19, "base_memory_id": 1,
                    "status": "processing", "model": "extractive-v1", "memory_text": None}],
        chunks=[{"message_range_start": 0, "message_range_end": 20, "content": "user: I work in Lyon."}],
        facts=[{"owner_user_id": "demo-user", "category": "occupation", "content": "I work in Lyon.",
                "importance": 4, "memory_type": "fact", "visibility": "private", "tags": ["work"]}],
        topics={"active_topic_id": "t2", "topics": [
            {"topic_id": "t1", "topic_title": "Bookshop API", "total_messages": 20, "memory_type": "long-term",
             "priority": 0.5},
            {"topic_id": "t2", "topic_title": "Half marathon", "total_messages": 12, "memory_type": "short-term",
             "priority": 0.9}]},
        context={"mode": "caught_up", "watermark": {"summary_end_seq": 5, "last_seq": 7},
                 "summary": {"memory_id": 1, "start_seq": 0, "end_seq": 5, "text": "We chose FastAPI."},
                 "messages": [{"seq": 6, "role": "user", "content": "hi"}, {"seq": 7, "role": "assistant",
                                                                          "content": "hello"}],
                 "retrieved": {"items": [{"kind": "fact", "content": "I work in Lyon.", "line": "- [occupation] I work"
                               " in Lyon. (personal)", "score": SCORE}], "candidates": 3, "tokens_used": 12,
                               "budget_tokens": 500, "threshold": 0.25, "excluded": []},
                 "active_topic": {"title": "Half marathon", "messages": [{}], "summary": None}},
    )


def test_report_has_every_section_in_order() -> None:
    text = render_report(_observed(), "where do I work?", "http://x", "c", "k")
    order = [text.index(h) for h in ("Summary chain", "Chunks and facts", "Topics", "Turn-start context")]
    assert order == sorted(order)
    assert "#2   seq  6-19  processing base #1" in text and "newest summary (#1, seq 0-5)" in text
    assert "chunk seq 0-19" in text and "- [occupation] I work in Lyon." in text and "tags: work" in text
    assert "  * Half marathon" in text and "    Bookshop API" in text
    assert "retrieved: 1 of 3 candidate(s), 12/500 tokens" in text
    assert ("final 0.42 = similarity 0.47 (cosine 0.46, keyword 0.01) x importance 1.00 x recency 0.90"
            "  [vector+keyword]") in text
    assert "active topic: Half marathon" in text and "X-API-Key: k" in text


def test_a_score_part_the_api_does_not_send_is_shown_as_unknown() -> None:
    observed = _observed()
    observed.context["retrieved"]["items"][0]["score"] = {"final": 0.3}
    assert "final 0.30 = similarity ? (cosine ?" in render_report(observed, "q", "u", "c", "k")


def test_sample_is_four_dated_sessions_long_enough_for_chunks() -> None:
    messages = sample_messages(datetime.now(UTC))
    assert [m["seq"] for m in messages] == list(range(len(messages)))
    assert len(sessions(messages)) == 4 and 40 <= len(messages) <= 60
    assert messages[-1]["occurred_at"] < datetime.now(UTC)
    assert all(a["occurred_at"] < b["occurred_at"] for a, b in zip(messages, messages[1:]))
    assert expected_chunks(len(messages), 30, 20) == 2 and expected_chunks(31, 30, 20) == 1
    assert expected_chunks(20, 30, 20) == 0
    assert [summary_trigger(s, 5) for s in sessions(messages)][0] == 5
