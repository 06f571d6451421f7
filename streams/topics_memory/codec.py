"""The topic agent's per-conversation state <-> changelog bytes (orjson; vectors as base64 float32)."""

from __future__ import annotations

import base64
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from domain.topics.fold import as_array
from domain.topics.gaps import GapRecovery
from domain.topics.inbox import Inbox
from domain.topics.state import Topic, TopicsState
from schemas.sealed import open_state, seal_state

FORMAT = 1


@dataclass(frozen=True)
class AgentState:
    """The topic working set, the messages waiting for embeddings, and the decay clock."""

    topics: TopicsState = field(default_factory=TopicsState)
    inbox: Inbox = field(default_factory=Inbox)
    clock: float = 0.0  # newest message event time seen: decay and eviction run on it
    last_rederive: str = ""  # the erasure the topics were last derived again for (redelivery: nothing)
    gaps: GapRecovery = field(default_factory=GapRecovery)  # passed-over seqs read back from the log


_PACKED: dict[int, tuple[Any, str]] = {}


def pack_vector(values: Any) -> str:
    """384 floats as JSON are ~8 KB; as base64 float32 2 KB. Matching needs no more precision.
    Remembered per tuple object: most topics' centroids are unchanged from one event to the next."""
    hit = _PACKED.get(id(values))
    if hit is not None and hit[0] is values:
        return hit[1]
    # The fold's float64 array of the tuple (remembered when it built it) cast as np.asarray(values, "<f4") casts.
    array = as_array(values) if isinstance(values, tuple) else np.asarray(values, dtype=np.float64)
    packed = base64.b64encode(array.astype("<f4").tobytes()).decode("ascii")
    if isinstance(values, tuple):
        if len(_PACKED) >= 50_000:
            _PACKED.clear()
        _PACKED[id(values)] = (values, packed)  # holding the tuple keeps its id from being reused
    return packed


def unpack_vector(text: str) -> tuple[float, ...]:
    return tuple(np.frombuffer(base64.b64decode(text), dtype="<f4").tolist())  # Python floats


_FRAGMENTS: dict[int, tuple[Topic, orjson.Fragment]] = {}
FRAGMENTS_KEPT = 20_000  # ~3 KB each (a packed centroid, the summary, <= 12 messages without text)


def topic_json(topic: Topic) -> orjson.Fragment:
    """One topic's changelog JSON, remembered per Topic object: the states are immutable and
    a message changes one topic, so the others are the very objects serialized last time
    (re-serializing every topic of the working set, centroid and summary, for every input
    was the fold's largest cost: docs/topics.md, "Throughput of the fold")."""
    hit = _FRAGMENTS.get(id(topic))
    if hit is not None and hit[0] is topic:
        return hit[1]
    if len(_FRAGMENTS) >= FRAGMENTS_KEPT:
        _FRAGMENTS.clear()
    fragment = orjson.Fragment(orjson.dumps(topic.to_dict(centroid=pack_vector(topic.centroid))))
    _FRAGMENTS[id(topic)] = (topic, fragment)  # holding the topic keeps its id from being reused
    return fragment


def dumps(state: AgentState, key: bytes | None = None) -> bytes:
    """The changelog value; with the conversation's `key`, sealed when this process seals
    (titles and summaries are its users' words: schemas/sealed.py)."""
    topics = {name: getattr(state.topics, name) for name in TopicsState.__dataclass_fields__}
    topics["topics"] = [topic_json(topic) for topic in state.topics.topics]
    topics["draining"] = [topic_json(topic) for topic in state.topics.draining]
    if not state.topics.waiting_replies:  # nearly always: left out, as TopicsState.to_dict does
        del topics["waiting_replies"]
    if state.topics.background:  # the conversation's mean vector (centred matching), packed as centroids are
        topics["background"] = pack_vector(state.topics.background)
    inbox = state.inbox.to_dict()
    for item in inbox["queue"]:
        if item["embedding"] is not None:
            item["embedding"] = pack_vector(item["embedding"])
    raw = orjson.dumps({"format": FORMAT, "topics": topics, "inbox": inbox, "clock": state.clock,
                        "last_rederive": state.last_rederive, "gaps": state.gaps.to_dict()})
    return raw if key is None else seal_state(key, raw)


def loads(raw: bytes | None, conversation_id: str) -> AgentState:
    """The stored state, or a fresh one for a conversation seen for the first time."""
    if not raw:
        return AgentState(TopicsState(conversation_id=conversation_id))
    data = orjson.loads(raw)
    topics = data.get("topics") or {}
    for topic in (*topics.get("topics", ()), *topics.get("draining", ())):
        if isinstance(topic.get("centroid"), str):
            topic["centroid"] = unpack_vector(topic["centroid"])
    if isinstance(topics.get("background"), str):
        topics["background"] = unpack_vector(topics["background"])
    inbox = data.get("inbox") or {}
    for item in inbox.get("queue", ()):
        if isinstance(item.get("embedding"), str):
            item["embedding"] = unpack_vector(item["embedding"])
    return AgentState(TopicsState.from_dict(topics), Inbox.from_dict(inbox), float(data.get("clock", 0.0)),
                      str(data.get("last_rederive", "")), GapRecovery.from_dict(data.get("gaps")))


class DecodedCache:
    """The decoded states of recently active conversations, valid while the table still holds
    the very bytes they were decoded from (a rebalance or recovery replaces them)."""

    def __init__(self, capacity: int) -> None:
        self._items: OrderedDict[bytes, tuple[bytes, AgentState]] = OrderedDict()
        self._capacity = capacity

    def get(self, key: bytes, raw: bytes | None, conversation_id: str) -> AgentState:
        hit = self._items.get(key)
        if hit is not None and raw is not None and hit[0] is raw:
            self._items.move_to_end(key)
            return hit[1]
        state = loads(open_state(key, raw), conversation_id)  # a state sealed by an erased key: afresh
        if raw is not None:
            self.put(key, raw, state)
        return state

    def put(self, key: bytes, raw: bytes, state: AgentState) -> None:
        self._items[key] = (raw, state)
        self._items.move_to_end(key)
        while len(self._items) > self._capacity:
            self._items.popitem(last=False)
