"""bench/locomo_data.py and bench/locomo_diagnosis.py on a tiny sample written here (the real
development set is CC BY-NC and is never read by tests)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bench import locomo_data as data
from bench import locomo_diagnosis as D

SAMPLE = {
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Ana", "speaker_b": "Bo",
        "session_2_date_time": "9:05 am on 3 June, 2023",
        "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "We adopted a puppy!"}],
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ana", "dia_id": "D1:1", "text": "Look at my garden.", "img_url": ["x"],
                       "blip_caption": "a photo of red tulips"},
                      {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely!"}],
    },
    "qa": [{"question": "What did Bo adopt?", "answer": "a puppy", "evidence": ["D2:1"], "category": 4},
           {"question": "When?", "answer": 2023, "evidence": ["D1:1; D2:1"], "category": 2},
           {"question": "Never said?", "adversarial_answer": "x", "evidence": [], "category": 5}],
}


def test_messages_follow_the_readme_sessions_in_order_one_second_apart_with_captions():
    conv = data.conversation(SAMPLE)
    assert conv.user_id == "ana" and conv.end_seq == 3
    assert [(m.seq, m.role, m.content) for m in conv.messages] == [
        (0, "user", "Ana: Look at my garden. [image: a photo of red tulips]"),
        (1, "assistant", "Bo: Lovely!"), (2, "assistant", "Bo: We adopted a puppy!")]
    assert conv.messages[1].occurred_at == datetime(2023, 5, 8, 13, 56, 1, tzinfo=UTC)
    assert conv.messages[2].occurred_at == datetime(2023, 6, 3, 9, 5, tzinfo=UTC)


def test_questions_of_categories_1_to_4_with_their_evidence_seqs():
    questions = data.conversation(SAMPLE).questions
    assert [(q.kind, q.answer, q.evidence) for q in questions] == [("single", "a puppy", (2,)),
                                                                    ("temporal", "2023", (0, 2))]


@pytest.mark.parametrize("text", ["25:00 pm on 8 May, 2023", "8 May 2023"])
def test_an_unreadable_session_time_is_an_error(text):
    with pytest.raises((ValueError, KeyError)):
        data.session_time(text)


def _item(line: str, tokens: int, span=None) -> dict:
    return {"line": line, "tokens": tokens, "kind": "message", "message_range": span, "conversation_id": "conv-x"}


@pytest.mark.parametrize("score, derived, raw, items, verdict", [
    (1.0, 1.0, 1.0, [], "hit"),
    (0.0, 0.0, 0.5, [], "not_in_memory"),
    (0.0, 1.0, 1.0, [_item("nothing here", 10)], "not_a_candidate"),
    (0.0, 1.0, 1.0, [_item("other", 600), _item("a puppy", 10, (2, 3))], "cut_by_packing"),
    (0.0, 1.0, 1.0, [_item("other", 1200), _item("a puppy", 10, (2, 3))], "ranked_out"),
])
def test_a_missed_answer_is_told_apart(score, derived, raw, items, verdict):
    question = data.conversation(SAMPLE).questions[0]
    wide = {"retrieved": {"items": items, "text": "\n".join(i["line"] for i in items)}}
    row = D.diagnose(question, {"score": score}, wide, 500, derived, raw)
    assert row["verdict"] == verdict
    if verdict in ("cut_by_packing", "ranked_out"):
        assert row["rank_to_answer"] == 2 and row["evidence_found"] == 1.0 and row["evidence_first_rank"] == 2


def test_the_budget_breakdown_packs_in_order_and_finds_a_line_another_already_says():
    from bench import locomo_budget as B

    items = [{"kind": "message", "line": "- Ana: We adopted a puppy named Rex", "content": "Ana: We adopted a puppy named Rex",
              "tokens": 8},
             {"kind": "chunk", "line": "- long", "content": "long", "tokens": 30},
             {"kind": "fact", "line": "- Ana adopted a puppy named Rex", "content": "Ana adopted a puppy named Rex",
              "tokens": 7, "category": "pet"}]
    chosen = B.packed(items, 20)
    assert [i["kind"] for i in chosen] == ["message", "fact"]  # the chunk does not fit, the fact after it does
    assert B.repeated(chosen) == [False, True]  # the fact says what the message said
    parts = B.line_parts({"kind": "message", "line": "- Q? → Bo: yes", "tokens": 9}, lambda text: len(text.split()))
    assert parts == {"message": 7, "message reply": 2}


def test_the_other_sections_are_read_from_the_context_body():
    body = {"summary": {"text": "S"}, "messages": [{"content": "gap"}],
            "active_topic": {"title": "T", "summary": "TS", "messages": [{"content": "m"}],
                             "restored_messages": [{"content": "r1"}, {"content": "r2"}], "restored_truncated": True}}
    assert D.other_sections(body) == {"summary": "S", "gap": "gap", "topic": "T\nTS\nm", "topic_restored": ["r1", "r2"],
                                      "topic_restored_truncated": True}
    assert D.other_sections({"active_topic": {"error": "x"}})["topic"] == ""


def test_a_profile_sample_counts_once_under_the_first_part_its_stack_shows():
    from bench import profile_table as P

    lines = [
        "run (uvicorn/main.py:1);turn_context (api/routes/context.py:9);retrieve (retrieval/service.py:4);"
        "search_items (retrieval/items.py:3);make (retrieval/search.py:2) 7",
        "run (uvicorn/main.py:1);turn_context (api/routes/context.py:9);topic_section (api/sections/topic.py:5) 2",
        "_bootstrap (threading.py:1);embed_sync (core/embeddings/local.py:3) 4",
        "run (uvicorn/main.py:1);RequestResponseCycle.send (uvicorn/protocols/http/httptools_impl.py:5) 1",
        "something (elsewhere.py:1) 1",
        "not a sample line",
    ]
    parts, total = P.table(lines)
    assert total == 15
    assert parts == {"search statement: psycopg, rows": 7, "topic section": 2,
                     "question embedding (ONNX, its thread)": 4, "socket writes, reads (uvicorn)": 1, "other": 1}
    assert "| search statement: psycopg, rows | 46.7 % |" in P.render(parts, total)
