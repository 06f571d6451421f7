"""The changelog codec's per-topic JSON cache (streams/topics_memory/codec.py, issue 14): the
bytes are those of serializing the whole state afresh, a changed topic is serialized again."""

from __future__ import annotations

from dataclasses import replace

import orjson

from domain.topics.state import TopicMessage
from streams.topics_memory import codec
from tests.unit.test_topic_agent import DIM, Driver, axis


def fresh(state: codec.AgentState) -> bytes:
    """The state serialized without any cache: every topic dict built and packed now."""
    topics = state.topics.to_dict()
    for topic, data in zip(state.topics.topics, topics["topics"]):
        data["centroid"] = codec.base64.b64encode(
            codec.np.asarray(topic.centroid, dtype="<f4").tobytes()).decode("ascii")
    if topics["background"]:
        topics["background"] = codec.base64.b64encode(
            codec.np.asarray(state.topics.background, dtype="<f4").tobytes()).decode("ascii")
    inbox = state.inbox.to_dict()
    for item in inbox["queue"]:
        if item["embedding"] is not None:
            item["embedding"] = codec.pack_vector(tuple(item["embedding"]))
    return orjson.dumps({"format": codec.FORMAT, "topics": topics, "inbox": inbox, "clock": state.clock,
                         "last_rederive": state.last_rederive, "gaps": state.gaps.to_dict()})


def test_the_cached_topic_json_gives_the_bytes_of_a_fresh_serialization():
    d = Driver()
    d.turn(0, axis(0))
    d.turn(2, axis(3))
    d.say(4, "user", "waiting")
    assert codec.dumps(d.state) == fresh(d.state)
    assert codec.dumps(d.state) == fresh(d.state)  # from the cache now
    again = codec.loads(codec.dumps(d.state), "c")
    assert codec.dumps(again) == codec.dumps(d.state)  # equal topics, other objects: same bytes


def test_a_changed_topic_is_serialized_again_the_others_come_from_the_cache():
    d = Driver()
    d.turn(0, axis(0))
    d.turn(2, axis(3))
    first, second = d.state.topics.topics
    codec.dumps(d.state)
    changed = replace(second, summary="a new summary", messages=second.messages + (TopicMessage(9, "user", "", 1.0),))
    state = replace(d.state, topics=d.state.topics.with_topic(changed))
    assert codec.topic_json(first) is codec.topic_json(first)
    assert codec.dumps(state) == fresh(state) and b"a new summary" in codec.dumps(state)
    assert codec.loads(codec.dumps(state), "c").topics.topics[1].summary == "a new summary"
    assert len(codec.loads(codec.dumps(state), "c").topics.topics[0].centroid) == DIM


def test_evolve_is_dataclasses_replace_for_the_fold_s_states():
    import dataclasses

    import pytest

    from domain.topics.gaps import GapRecovery
    from domain.topics.state import Topic, TopicsState, evolve
    from domain.topics.inbox import Inbox

    topic = Topic("c:topic-1", "title", (1.0, 0.0), 1.0, 2.0, messages=(TopicMessage(1, "user", "", 1.0),))
    for obj, changes in ((topic, {"summary": "s", "access_count": 3}), (TopicsState(), {"last_seq": 4}),
                         (Inbox(), {"queue": ()}), (GapRecovery(), {"cursor": 7})):
        new = evolve(obj, **changes)
        assert new == dataclasses.replace(obj, **changes) and type(new) is type(obj) and new is not obj
        assert obj == dataclasses.replace(obj)  # the original is unchanged
    with pytest.raises(TypeError):
        evolve(topic, sumary="a misspelled field")
    with pytest.raises(dataclasses.FrozenInstanceError):
        evolve(topic, summary="s").summary = "frozen still"
