"""Per-conversation topic working set (seed 004): frozen, JSON-serialisable for a changelog table."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

_T = TypeVar("_T")


def evolve(obj: _T, **changes: Any) -> _T:
    """dataclasses.replace for the fold's frozen dataclasses (no slots, no __post_init__), 3-5x
    faster: the fold makes ~8 per input, and dataclasses.replace's field loop and __init__ were
    a fifth of its CPU (docs/topics.md, "Throughput of the fold"). A misspelled field is an error,
    as with replace."""
    fields = obj.__dataclass_fields__  # type: ignore[attr-defined]
    if not changes.keys() <= fields.keys():
        raise TypeError(f"{type(obj).__name__} has no field {sorted(changes.keys() - fields.keys())}")
    new = object.__new__(type(obj))
    values = new.__dict__
    values.update(obj.__dict__)
    values.update(changes)
    return new


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """Only the fields `cls` has, so states stored by an older or newer version still load."""
    return {k: v for k, v in data.items() if k in cls.__dataclass_fields__}


@dataclass(frozen=True)
class TopicMessage:
    seq: int
    role: str
    content: str
    timestamp: float
    # TopicsState.placements when the message was placed. A compaction takes only the messages
    # placed by the time it was decided, so a late message (one the fold passed over and placed
    # afterwards, below a decided cutoff) never changes a decided compaction.
    placed_at: int = field(default=-1, compare=False)  # -1: placed before any (older states)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TopicMessage:
        return cls(int(data["seq"]), str(data["role"]), str(data["content"]), float(data["timestamp"]),
                   int(data.get("placed_at", -1)))


@dataclass(frozen=True)
class PendingCompaction:
    """A summary request in flight: its messages stay active until CompactionDone.
    `asked_seq`: the seq of the message whose placement decided the compaction (the request's
    envelope seq, which tells the read model whether it comes after a restore); `decided_at`:
    TopicsState.placements then. Both None in older states."""

    upto_seq: int
    requested_at: float
    attempt: int = 1
    asked_seq: int | None = None
    decided_at: int | None = None


@dataclass(frozen=True)
class Topic:
    topic_id: str
    title: str
    centroid: tuple[float, ...]  # unit length; running mean of the user messages' embeddings
    created_at: float
    last_active_at: float  # the LRU timer: decay is measured from here
    importance: float = 0.5
    access_count: int = 0  # matches after creation (drives the half-life)
    message_count: int = 0  # every message ever assigned: active + archived
    embedding_count: int = 1  # user messages folded into the centroid
    mean_norm: float = 1.0  # length of the mean before normalising: keeps the running mean exact
    messages: tuple[TopicMessage, ...] = ()  # active messages, oldest first
    summary: str | None = None
    summary_upto_seq: int = -1  # summary and archive cover this topic's messages <= this seq
    archived_count: int = 0  # messages moved to the read model's compressed archive
    archived_first_seq: int | None = None
    compaction: PendingCompaction | None = None
    compaction_not_before: float = 0.0  # backoff after a failed compaction
    compaction_failures: int = 0
    # Compactions decided but not asked for yet, oldest first: (upto_seq, asked_seq, decided_at)
    # each (PendingCompaction says what they mean). A
    # compaction is decided the moment the messages above the previous decided cutoff exceed
    # max_messages_per_topic, whether or not the one before it has come back, and asked for
    # when it has: so which messages each compaction covers depends on the log only, never on
    # when summaries arrive (a replay, stream or batch, asks for exactly the same ones).
    due: tuple[tuple[int, int, int], ...] = ()

    def covered(self, upto_seq: int, decided_at: int | None) -> tuple[TopicMessage, ...]:
        """The active messages a compaction up to `upto_seq`, decided after `decided_at`
        placements, archives: those at or below the cutoff placed by then."""
        return tuple(m for m in self.messages
                     if m.seq <= upto_seq and (decided_at is None or m.placed_at <= decided_at))

    @property
    def cutoff(self) -> int:
        """The newest seq any compaction covers, decided, in flight or done (-1: none)."""
        if self.due:
            return self.due[-1][0]
        if self.compaction is not None:
            return max(self.compaction.upto_seq, self.summary_upto_seq)
        return self.summary_upto_seq

    @property
    def archived_range(self) -> tuple[int, int] | None:
        """(first, last) seq of the archived messages, or None when nothing is archived."""
        if self.archived_first_seq is None:
            return None
        return self.archived_first_seq, self.summary_upto_seq

    def to_dict(self, centroid: Any = None) -> dict[str, Any]:
        """`centroid`: what to store in its place (the changelog codec's packed form), else a list."""
        # Field by field: dataclasses.asdict deep-copies every float of the centroid (~100x slower).
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["centroid"] = list(self.centroid) if centroid is None else centroid
        data["messages"] = [dict(vars(m)) for m in self.messages]
        data["compaction"] = dict(vars(self.compaction)) if self.compaction is not None else None
        data["due"] = [list(d) for d in self.due]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Topic:
        known = _known(cls, data)
        centroid = known.get("centroid", ())
        known["centroid"] = centroid if isinstance(centroid, tuple) else tuple(map(float, centroid))
        known["messages"] = tuple(TopicMessage.from_dict(m) for m in known.get("messages", ()))
        if known.get("compaction") is not None:
            known["compaction"] = PendingCompaction(**_known(PendingCompaction, known["compaction"]))
        known["due"] = tuple((int(d[0]), int(d[1]), int(d[2]) if len(d) > 2 else -1) for d in known.get("due", ()))
        return cls(**known)


MAX_SKIPPED = 64  # seq ranges passed over that a topic fold remembers (the oldest are forgotten)
MAX_WAITING_REPLIES = 16  # replies left unassigned awaiting a passed-over user message (the oldest are forgotten)


@dataclass(frozen=True)
class TopicsState:
    conversation_id: str = ""
    topics: tuple[Topic, ...] = ()  # the working set, in creation order
    active_topic_id: str | None = None
    next_topic_number: int = 1  # topic ids come from this counter, so replays repeat them
    last_seq: int = -1  # highest message seq placed: at or below it, a message is a redelivery...
    # ...unless it falls in one of these (first, last) seq ranges the fold passed over without
    # seeing them (a producer's gap, or a takeover that delivered later messages first): such a
    # message is placed when it comes. The newest MAX_SKIPPED ranges are kept.
    skipped: tuple[tuple[int, int], ...] = ()
    placements: int = 0  # messages placed (or seen) so far: orders placements, late ones included
    evicted_count: int = 0
    unassigned_count: int = 0
    # Evicted topics whose compactions were decided and not answered yet: their requests go on
    # (as they would have, had the answers come sooner) and they leave once all are answered.
    draining: tuple[Topic, ...] = ()
    # The running mean of every user-message vector of the conversation (TopicConfig.
    # center_on_conversation) and how many it holds; () until the first one.
    background: tuple[float, ...] = ()
    background_count: int = 0
    # Replies placed "unassigned" (no active topic) while a seq below them was still passed
    # over: their turn's user message may come late (issue 22). Each (seq, timestamp, turn_seq,
    # turn_topic_id): the newest user message placed below the reply since, and its topic
    # (-1, "" before one). The newest MAX_WAITING_REPLIES are kept.
    waiting_replies: tuple[tuple[int, float, int, str], ...] = ()

    def topic(self, topic_id: str | None) -> Topic | None:
        for t in self.topics:  # a plain loop: called several times per input, a generator costs 2x
            if t.topic_id == topic_id:
                return t
        return None

    def compacting(self, topic_id: str) -> Topic | None:
        """A working-set topic, or an evicted one still draining its compactions."""
        return self.topic(topic_id) or next((t for t in self.draining if t.topic_id == topic_id), None)

    @property
    def active_topic(self) -> Topic | None:
        return self.topic(self.active_topic_id)

    def with_topic(self, topic: Topic) -> TopicsState:
        """Replace the topic with the same id (a draining one stays draining until it has no
        compaction left), or append a new one."""
        if any(t.topic_id == topic.topic_id for t in self.draining):
            if topic.compaction is None and not topic.due:  # drained: it leaves
                return evolve(self, draining=tuple(t for t in self.draining if t.topic_id != topic.topic_id))
            return evolve(self, draining=tuple(topic if t.topic_id == topic.topic_id else t for t in self.draining))
        if self.topic(topic.topic_id) is None:
            return evolve(self, topics=self.topics + (topic,))
        return evolve(self, topics=tuple(topic if t.topic_id == topic.topic_id else t for t in self.topics))

    def never_placed(self, seq: int) -> bool:
        """A seq the fold has not placed (nor seen): above its position, or in a range it skipped."""
        return seq > self.last_seq or any(first <= seq <= last for first, last in self.skipped)

    def placing(self, seq: int) -> TopicsState:
        """The position after placing `seq` (one never placed): a newer seq moves it on and
        remembers the seqs passed over; an older one (late) is taken out of its skipped range."""
        if seq > self.last_seq:
            skipped = self.skipped + (((self.last_seq + 1, seq - 1),) if seq > self.last_seq + 1 else ())
            return evolve(self, last_seq=seq, skipped=skipped[-MAX_SKIPPED:], placements=self.placements + 1)
        skipped: list[tuple[int, int]] = []
        for first, last in self.skipped:
            if first <= seq <= last:
                skipped += [r for r in ((first, seq - 1), (seq + 1, last)) if r[0] <= r[1]]
            else:
                skipped.append((first, last))
        return evolve(self, skipped=tuple(skipped[-MAX_SKIPPED:]), placements=self.placements + 1)

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["topics"] = [t.to_dict() for t in self.topics]
        data["draining"] = [t.to_dict() for t in self.draining]
        if not self.waiting_replies:  # nearly always: left out, so stored states keep their bytes
            del data["waiting_replies"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TopicsState:
        known = _known(cls, data)
        known["topics"] = tuple(Topic.from_dict(t) for t in known.get("topics", ()))
        known["draining"] = tuple(Topic.from_dict(t) for t in known.get("draining", ()))
        known["skipped"] = tuple((int(first), int(last)) for first, last in known.get("skipped", ()))
        known["waiting_replies"] = tuple((int(seq), float(timestamp), int(turn), str(topic))
                                         for seq, timestamp, turn, topic in known.get("waiting_replies", ()))
        background = known.get("background", ())
        known["background"] = background if isinstance(background, tuple) else tuple(map(float, background))
        return cls(**known)


def make_topic_id(conversation_id: str, number: int) -> str:
    """Deterministic: the same conversation replayed gives the same ids."""
    return f"{conversation_id}:topic-{number}"
