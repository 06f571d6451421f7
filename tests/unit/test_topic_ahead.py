"""The topic section's rows read ahead with the context's first reads (api/sections/topic.py):
used only when both statements read the topic the fold's progress row names."""

from datetime import UTC, datetime

from api.sections.topic import TopicAhead
from projections import topic_queries as tq

WHEN = datetime(2023, 5, 7, tzinfo=UTC)
NAMES = [f.name for f in tq.TopicRow.__dataclass_fields__.values()]


def topic_values(topic_id: str) -> tuple:
    row = {name: None for name in NAMES}
    row.update(topic_id=topic_id, title="Dogs", first_seq=1, summary_upto_seq=0, importance=3.0, access_count=0,
               message_count=2, created_at=WHEN, last_active_at=WHEN, active=True, compactions=0,
               active_messages=2, archived_messages=0)
    return tuple(row[name] for name in NAMES)


def test_rows_of_the_named_topic_are_used_with_the_messages_in_order():
    ahead = TopicAhead(NAMES, topic_values("t2"), [("t2", 4, "user", "a dog", WHEN), ("t2", 5, "assistant", "ok", WHEN)])
    row, messages = ahead.for_topic("t2")
    assert row.topic_id == "t2" and row.title == "Dogs"
    assert [(m.seq, m.role, m.content) for m in messages] == [(4, "user", "a dog"), (5, "assistant", "ok")]


def test_a_topic_without_messages_before_the_turn_has_none():
    row, messages = TopicAhead(NAMES, topic_values("t2"), [("t2", None, None, None, None)]).for_topic("t2")
    assert row.topic_id == "t2" and messages == []


def test_another_topic_in_either_statement_or_none_read_means_reading_again():
    assert TopicAhead(NAMES, topic_values("t1"), [("t1", 4, "user", "a", WHEN)]).for_topic("t2") is None
    assert TopicAhead(NAMES, topic_values("t2"), [("t1", 4, "user", "a", WHEN)]).for_topic("t2") is None
    assert TopicAhead(NAMES, None, [("t2", 4, "user", "a", WHEN)]).for_topic("t2") is None
    assert TopicAhead(NAMES, topic_values("t2"), []).for_topic("t2") is None
