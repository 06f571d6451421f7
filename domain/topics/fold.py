"""Seed 004's topic fold: match, compact, restore and evict per conversation; pure, clock passed in."""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections import OrderedDict
from operator import attrgetter
from collections.abc import Sequence
from typing import Any

import numpy as np

from domain.topics.shift import announces_new_subject

from domain.topics.decay import (
    DEFAULT_CONFIG,
    SECONDS_PER_DAY,
    TopicConfig,
    half_life_seconds,
    memory_type,
    priority,
)
from domain.topics.protocol import (
    ArchiveRestoreRequested,
    AssistantMessage,
    Command,
    CompactionDone,
    CompactionFailed,
    CompactionRequested,
    MessageAssigned,
    MessageUnassigned,
    Observed,
    TopicActivated,
    TopicCreated,
    TopicEvicted,
    UnmatchedUserMessage,
    UserMessage,
)
from domain.topics.state import (
    MAX_WAITING_REPLIES,
    PendingCompaction,
    Topic,
    TopicMessage,
    TopicsState,
    evolve,
    make_topic_id,
)

Stepped = tuple[TopicsState, tuple[Command, ...]]


def unit_vector(values: Sequence[float]) -> np.ndarray:
    """The embedding scaled to length 1; an empty, non-finite or zero vector is a caller bug."""
    vector = as_array(values) if isinstance(values, tuple) else np.asarray(values, dtype=np.float64)
    norm = float(np.linalg.norm(vector)) if vector.ndim == 1 and vector.size else 0.0
    if not math.isfinite(norm) or norm == 0.0:
        raise ValueError("an embedding must be a non-empty, finite, non-zero vector")
    return vector / norm


_ARRAYS: dict[int, tuple[tuple[float, ...], np.ndarray]] = {}
# Each entry holds a tuple of Python floats and its array (~15 KB at 384 dimensions): at most
# ~150 MB. Matching reads the kept centroid rows (_MATRICES), so only the vectors made since the
# conversation's last message are looked up here; forgetting them costs one conversion each.
ARRAYS_KEPT = 10_000


def as_array(centroid: tuple[float, ...]) -> np.ndarray:
    """np.asarray(centroid), remembered per tuple object: an unchanged topic keeps its tuple
    from event to event, and converting 20 x 384 floats for every message is the fold's main cost."""
    hit = _ARRAYS.get(id(centroid))
    if hit is not None and hit[0] is centroid:
        return hit[1]
    if len(_ARRAYS) >= ARRAYS_KEPT:
        _ARRAYS.clear()
    array = np.asarray(centroid, dtype=np.float64)
    _ARRAYS[id(centroid)] = (centroid, array)  # holding the tuple keeps its id from being reused
    return array


def remember_array(values: tuple[float, ...], array: np.ndarray) -> tuple[float, ...]:
    """Record `array` as as_array(values) (it must equal np.asarray(values)): the tuple the fold
    just built from it is matched against at the next message without converting it back."""
    if len(_ARRAYS) >= ARRAYS_KEPT:
        _ARRAYS.clear()
    _ARRAYS[id(values)] = (values, array)
    return values


def _similarity(topic: Topic, unit: np.ndarray, probe: np.ndarray, probe_norm: float,
                background: np.ndarray | None) -> float:
    """The exact cosine best_match reports (the per-topic reference: its values are the ones
    recorded in events and compared with the threshold)."""
    centroid = as_array(topic.centroid)
    if background is None:
        return min(1.0, max(-1.0, float(centroid @ unit)))
    rest = centroid * topic.mean_norm - background
    scale = probe_norm * float(np.linalg.norm(rest))
    return min(1.0, max(-1.0, float(rest @ probe) / scale)) if scale > 1e-12 else 0.0


# Matrix scores within this of the best are taken again exactly, one by one: a matrix product
# sums in another order than a dot product (last-bit differences, ~1e-16), and the winner, its
# cosine and the ties must be the per-topic loop's exactly (replay equivalence). The margin
# is far above those errors and far below any real difference between two topics.
_NEAR = 1e-7
_LOOP_UP_TO = 4  # fewer topics than this: the per-topic loop alone is cheaper


class _Rows:
    """The centroids of one conversation's topics as matrix rows, kept from message to message:
    a message changes one topic's centroid, so one row is copied, not the whole working set."""

    __slots__ = ("centroids", "matrix")

    def __init__(self) -> None:
        self.centroids: list[tuple[float, ...]] = []  # held: a row is valid while its tuple `is` the topic's
        self.matrix = np.empty((0, 0))


_MATRICES: OrderedDict[str, _Rows] = OrderedDict()
MATRICES_KEPT = 512  # conversations (20 topics x 384 float64 = 60 KB each)


def _matrix(conversation_id: str, topics: tuple[Topic, ...]) -> np.ndarray:
    """np.stack of the topics' centroid arrays (a view of the conversation's kept rows)."""
    rows = _MATRICES.get(conversation_id)
    if rows is None:
        rows = _MATRICES[conversation_id] = _Rows()
        while len(_MATRICES) > MATRICES_KEPT:
            _MATRICES.popitem(last=False)
    else:
        _MATRICES.move_to_end(conversation_id)
    centroids, size = rows.centroids, len(topics)
    dimensions = len(topics[0].centroid)
    if rows.matrix.shape[1:] != (dimensions,) or rows.matrix.shape[0] < size:
        rows.matrix = np.empty((max(size, 2 * rows.matrix.shape[0]), dimensions))
        centroids.clear()
    for index, topic in enumerate(topics):
        if index >= len(centroids):
            centroids.append(topic.centroid)
        elif centroids[index] is topic.centroid:
            continue
        else:
            centroids[index] = topic.centroid
        rows.matrix[index] = as_array(topic.centroid)
    del centroids[size:]
    return rows.matrix[:size]


def best_match(state: TopicsState, unit: np.ndarray, active_bonus: float = 0.0,
               background: np.ndarray | None = None) -> tuple[Topic | None, float]:
    """The working-set topic with the highest cosine similarity (the earliest on ties), the
    active topic's raised by `active_bonus`; the similarity returned is the bonus-free cosine.
    With a `background` (the conversation's mean vector), the cosine is taken between the
    message and the topics' mean vectors with the background taken off both.

    All topics are scored with one matrix product; only those within _NEAR of the best are
    scored again exactly (docs/topics.md, "The topic fold's CPU")."""
    topics = state.topics
    for topic in topics:
        if len(topic.centroid) != unit.size or unit.ndim != 1:
            raise ValueError(f"embedding has {unit.size} dimensions, topic {topic.topic_id} {len(topic.centroid)}")
    probe = unit if background is None else unit - background
    probe_norm = 1.0 if background is None else float(np.linalg.norm(probe))  # only centred matching uses it
    candidates: Sequence[int] = range(len(topics))
    if len(topics) > _LOOP_UP_TO:
        matrix = _matrix(state.conversation_id, topics)
        forced: list[int] = []
        if background is None:
            scores = (matrix @ unit).tolist()
        else:
            # |rest_i|^2 and rest_i . probe from two products with the unit centroid rows m_i
            # (rest_i = m_i * n_i - background): no n x d temporaries. Cancellation leaves
            # ~1e-14 / (|rest_i| |probe|) of error, so a short one is always looked at exactly.
            norms = np.array([t.mean_norm for t in topics])
            along_probe, along_background = matrix @ probe, matrix @ background
            squares = (norms * (norms - 2 * along_background) + float(background @ background)).tolist()
            scores = (norms * along_probe - float(background @ probe)).tolist()
            for index, square in enumerate(squares):
                scale = math.sqrt(square) * probe_norm if square > 0.0 else 0.0
                if scale > 1e-4:
                    scores[index] /= scale
                else:
                    scores[index] = 0.0
                    forced.append(index)
        if active_bonus:
            for index, topic in enumerate(topics):
                if topic.topic_id == state.active_topic_id:
                    scores[index] += active_bonus
        top = max(scores) - _NEAR
        candidates = [index for index, score in enumerate(scores) if score >= top or index in forced]
    best, best_score, best_similarity = None, -math.inf, -math.inf
    for index in candidates:
        topic = topics[index]
        similarity = _similarity(topic, unit, probe, probe_norm, background)
        score = similarity + (active_bonus if topic.topic_id == state.active_topic_id else 0.0)
        if score > best_score:
            best, best_score, best_similarity = topic, score, similarity
    return best, best_similarity


def background_of(state: TopicsState, config: TopicConfig) -> np.ndarray | None:
    """The conversation's mean user-message vector, shrunk while it rests on few messages;
    None when matching is not centred (the seed) or before the first message."""
    if not config.center_on_conversation or not state.background_count:
        return None
    n = state.background_count
    return as_array(state.background) * (n / (n + config.background_warmup))


def _with_background(state: TopicsState, unit: np.ndarray, config: TopicConfig) -> TopicsState:
    if not config.center_on_conversation:
        return state
    n = state.background_count
    mean = unit if not n else (as_array(state.background) * n + unit) / (n + 1)
    # Kept at float32 precision, as the changelog stores it: a state read back matches exactly.
    stored = mean.astype(np.float32)
    background = remember_array(tuple(stored.tolist()), stored.astype(np.float64))
    return evolve(state, background=background, background_count=n + 1)


def _after_pause(state: TopicsState, now: float, config: TopicConfig) -> bool:
    """The conversation paused for a session gap since the active topic's last message."""
    active = state.active_topic
    return (config.session_gap_seconds > 0 and active is not None
            and now - active.last_active_at >= config.session_gap_seconds)


# The active messages are kept in seq order: bisect on this key.
BY_SEQ = attrgetter("seq")

_OPENERS = re.compile(r"^(?:(?:hi|hello|hey|ok|okay|so|well|thanks|thank you|please|um|uh)\b[\s,.!:;-]*)+", re.I)
_SENTENCE_END = re.compile(r"(?<=[.?!])\s")


def make_title(content: str, limit: int) -> str:
    """The topic's first message as a title: its first sentence (greetings and fillers like
    "Hi," or "So," left out), cut at a word boundary with "…" when longer than `limit`."""
    text = " ".join(content.split())
    stripped = _OPENERS.sub("", text)
    if stripped and stripped != text:
        text = stripped[0].upper() + stripped[1:]
    first = _SENTENCE_END.split(text, maxsplit=1)[0]
    if len(first) >= 12:  # "Yes." alone says nothing: then keep the following text too
        text = first
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0] if " " in text[: limit - 1] else text[: limit - 1]
    return cut.rstrip(" ,;:-") + "…"


def topic_priority(topic: Topic, now: float, config: TopicConfig = DEFAULT_CONFIG) -> float:
    return priority(topic.importance, now - topic.last_active_at, topic.access_count, config)


def _importance(value: float | None, fallback: float) -> float:
    if value is None or not math.isfinite(value):
        return fallback
    return min(1.0, max(0.0, float(value)))


def _activate(state: TopicsState, topic: Topic) -> Stepped:
    if state.active_topic_id == topic.topic_id:
        return state, ()
    commands: tuple[Command, ...] = (TopicActivated(topic.topic_id, state.active_topic_id),)
    if topic.archived_count or topic.compaction is not None or topic.due:  # archived, or on its way there
        commands += (ArchiveRestoreRequested(topic.topic_id),)
    return evolve(state, active_topic_id=topic.topic_id), commands


def _on_user(state: TopicsState, msg: UserMessage, now: float, config: TopicConfig, late: bool = False) -> Stepped:
    """Join the best topic or start one; it becomes the active topic, unless the message is
    late (older than the fold's position) and a newer turn's topic is active."""
    unit = unit_vector(msg.embedding)
    # No follow-up bonus for a message that announces a change of subject, nor for the first
    # one after a pause as long as a session gap (docs/topics.md, "Topics on long conversations").
    shift = announces_new_subject(msg.content) or _after_pause(state, now, config)
    best, similarity = best_match(state, unit, 0.0 if shift else config.active_topic_bonus,
                                  background_of(state, config))
    state = _with_background(state, unit, config)
    entry = TopicMessage(msg.seq, "user", msg.content, msg.timestamp, state.placements)
    created: tuple[Command, ...] = ()
    # Seed 004: join when cosine > threshold. The conversation's current topic gets
    # `active_topic_bonus` (a follow-up rarely repeats its subject's words; 0 = the seed).
    # ...unless the message itself says the subject changes ("Different subject: ...", "Back to ...").
    favoured = best is not None and best.topic_id == state.active_topic_id and not shift
    bonus = config.active_topic_bonus if favoured else 0.0
    if best is not None and similarity + bonus > config.similarity_threshold:
        # Running mean of the members' unit embeddings; matching uses its direction.
        count = best.embedding_count + 1
        mean = (as_array(best.centroid) * best.mean_norm * best.embedding_count + unit) / count
        norm = float(np.linalg.norm(mean))
        direction = mean / norm
        topic = evolve(best, centroid=remember_array(tuple(direction.tolist()), direction),
                        embedding_count=count, mean_norm=norm,
                        messages=_with_message(best.messages, entry), message_count=best.message_count + 1,
                        last_active_at=now, access_count=best.access_count + 1,
                        importance=_importance(msg.importance, best.importance))
        joined_with: float | None = similarity
    else:
        number = state.next_topic_number
        title = make_title(msg.content, config.title_chars)
        topic = Topic(make_topic_id(state.conversation_id, number), title, remember_array(tuple(unit.tolist()), unit),
                      created_at=now, last_active_at=now, message_count=1, messages=(entry,),
                      importance=_importance(msg.importance, config.default_importance))
        state = evolve(state, next_topic_number=number + 1)
        created, joined_with = (TopicCreated(topic.topic_id, title, msg.seq),), None
    if late and state.active_topic is not None:
        state, activation = state.with_topic(topic), ()
    else:
        state, activation = _activate(state.with_topic(topic), topic)
    return state, created + activation + (MessageAssigned(topic.topic_id, msg.seq, joined_with),)


def _join_active(state: TopicsState, msg: AssistantMessage | UnmatchedUserMessage, now: float) -> Stepped:
    """A reply joins the topic of its turn; so does a user message that could not be matched."""
    topic = state.active_topic
    if topic is None:
        reason = msg.reason if isinstance(msg, UnmatchedUserMessage) else "no active topic"
        state = evolve(state, unassigned_count=state.unassigned_count + 1)
        if isinstance(msg, AssistantMessage) and any(first < msg.seq for first, _ in state.skipped):
            # Its turn's user message may still come (passed over): remember the reply (issue 22).
            waiting = state.waiting_replies + ((msg.seq, msg.timestamp, -1, ""),)
            state = evolve(state, waiting_replies=waiting[-MAX_WAITING_REPLIES:])
        return state, (MessageUnassigned(msg.seq, reason),)
    role = "user" if isinstance(msg, UnmatchedUserMessage) else "assistant"
    entry = TopicMessage(msg.seq, role, msg.content, msg.timestamp, state.placements)
    topic = evolve(topic, messages=_with_message(topic.messages, entry), message_count=topic.message_count + 1,
                    last_active_at=now)
    return state.with_topic(topic), (MessageAssigned(topic.topic_id, msg.seq, None),)


def _passed_over_between(state: TopicsState, low: int, high: int) -> bool:
    """A seq strictly between `low` and `high` the fold passed over and has not placed."""
    return any(first < high and last > low for first, last in state.skipped)


def _place_waiting(state: TopicsState, observed: Observed, commands: tuple[Command, ...], now: float) -> Stepped:
    """After a late placement: a late user message becomes the turn of the waiting replies
    above it (the newest user message below each); a reply whose turn has no passed-over seq
    left before it joins its turn's topic, with the events of a placement (issue 22)."""
    topic_id = next((c.topic_id for c in commands if isinstance(c, MessageAssigned) and c.seq == observed.seq), None)
    if isinstance(observed, UserMessage) and topic_id is not None:
        waiting = tuple((seq, timestamp, observed.seq, topic_id) if turn < observed.seq < seq
                        else (seq, timestamp, turn, topic)
                        for seq, timestamp, turn, topic in state.waiting_replies)
        state = evolve(state, waiting_replies=waiting)
    placed: list[Command] = []
    kept: list[tuple[int, float, int, str]] = []
    for seq, timestamp, turn, topic_id in state.waiting_replies:
        if turn < 0 or _passed_over_between(state, turn, seq):
            kept.append((seq, timestamp, turn, topic_id))
            continue
        topic = state.topic(topic_id)
        if topic is None:  # its topic was evicted meanwhile: the reply stays unassigned
            continue
        entry = TopicMessage(seq, "assistant", "", timestamp, state.placements)
        state = state.with_topic(evolve(topic, messages=_with_message(topic.messages, entry),
                                        message_count=topic.message_count + 1, last_active_at=now))
        state = evolve(state, unassigned_count=max(0, state.unassigned_count - 1))
        placed.append(MessageAssigned(topic_id, seq, None))
    return evolve(state, waiting_replies=tuple(kept)), tuple(placed)


def _with_message(messages: tuple[TopicMessage, ...], entry: TopicMessage) -> tuple[TopicMessage, ...]:
    """The active messages stay in seq order (compaction takes the oldest): a late one goes in its place."""
    if not messages or messages[-1].seq < entry.seq:
        return messages + (entry,)
    at = bisect_right(messages, entry.seq, key=BY_SEQ)
    return messages[:at] + (entry,) + messages[at:]


def _on_result(state: TopicsState, result: CompactionDone | CompactionFailed, now: float,
               config: TopicConfig) -> TopicsState:
    """Only the answer to the compaction in flight counts, or a summary of the next one due
    (an earlier attempt's failure can come back after a re-ask, and the re-ask's summary after
    it); anything else is stale or a duplicate."""
    topic = state.compacting(result.topic_id)
    if topic is None:
        return state
    flight = topic.compaction
    if flight is not None and flight.upto_seq == result.upto_seq:
        asked, decided_at, due = flight.asked_seq, flight.decided_at, topic.due
    elif (flight is None and isinstance(result, CompactionDone) and topic.due
          and topic.due[0][0] == result.upto_seq):
        (_, asked, decided_at), due = topic.due[0], topic.due[1:]
        decided_at = decided_at if decided_at >= 0 else None
    else:
        return state
    if isinstance(result, CompactionFailed):  # the same compaction is asked for again after the backoff
        again = (flight.upto_seq, asked if asked is not None else state.last_seq,
                 decided_at if decided_at is not None else -1)
        return state.with_topic(evolve(topic, compaction=None, compaction_failures=topic.compaction_failures + 1,
                                        compaction_not_before=now + config.compaction_retry_seconds,
                                        due=(again,) + due))
    archived = topic.covered(result.upto_seq, decided_at)
    first = topic.archived_first_seq if topic.archived_first_seq is not None else (
        archived[0].seq if archived else None)
    gone = {m.seq for m in archived}
    return state.with_topic(evolve(
        topic, messages=tuple(m for m in topic.messages if m.seq not in gone), summary=result.summary,
        summary_upto_seq=max(result.upto_seq, topic.summary_upto_seq),
        archived_count=topic.archived_count + len(archived), archived_first_seq=first, compaction=None,
        compaction_failures=0, compaction_not_before=0.0, due=due))


def _decide(topic: Topic, config: TopicConfig, at_seq: int, placements: int) -> Topic:
    """Decide a compaction once the messages above the newest decided cutoff exceed
    max_messages_per_topic: all of them but the newest `recent_message_keep`. Only the log
    decides (not when summaries come back): the same history always gives the same cutoffs."""
    if len(topic.messages) <= config.max_messages_per_topic:
        return topic
    # The active messages are in seq order (_with_message): the first above the cutoff is found
    # by bisection, not by a scan per step (a topic holds thousands while a burst outruns its
    # compactions, and this runs for every topic at every step).
    first_above = bisect_right(topic.messages, topic.cutoff, key=BY_SEQ)
    above = len(topic.messages) - first_above
    count = above - config.recent_message_keep
    if above <= config.max_messages_per_topic or count <= 0:
        return topic
    return evolve(topic, due=topic.due + ((topic.messages[first_above + count - 1].seq, at_seq, placements),))



def _compactions(state: TopicsState, now: float, config: TopicConfig, at_seq: int) -> Stepped:
    """Decide the compactions of overfull topics, ask for the oldest decided one of each topic
    (one in flight each: request k carries summary k-1), re-ask a stuck one. Evicted topics
    still draining their decided compactions are asked for too."""
    commands: list[Command] = []
    for topic in state.topics + state.draining:
        decided = _decide(topic, config, at_seq, state.placements)
        flight = decided.compaction
        if flight is not None:
            if now - flight.requested_at <= config.compaction_timeout_seconds:
                if decided is not topic:
                    state = state.with_topic(decided)
                continue
            upto_seq, asked, decided_at = flight.upto_seq, flight.asked_seq, flight.decided_at
            attempt, due = flight.attempt + 1, decided.due
        elif decided.due and now >= decided.compaction_not_before:
            (upto_seq, asked, decided_at), due, attempt = decided.due[0], decided.due[1:], 1
            decided_at = decided_at if decided_at >= 0 else None
        else:
            if decided is not topic:
                state = state.with_topic(decided)
            continue
        old = decided.covered(upto_seq, decided_at)
        commands.append(CompactionRequested(decided.topic_id, old, decided.summary, upto_seq, attempt, asked))
        state = state.with_topic(evolve(decided, due=due, compaction=PendingCompaction(
            upto_seq, now, attempt, asked, decided_at)))
    return state, tuple(commands)


def _evictions(state: TopicsState, now: float, config: TopicConfig) -> Stepped:
    """Seed 004: over max_topics, forget every topic below eviction_priority, lowest first,
    never the active one; then (capacity_eviction) the next lowest until max_topics remain."""
    if len(state.topics) <= config.max_topics:
        return state, ()
    ranked = sorted((topic_priority(t, now, config), t.last_active_at, index, t)
                    for index, t in enumerate(state.topics) if t.topic_id != state.active_topic_id)
    decayed = [(p, t) for p, _, _, t in ranked if p < config.eviction_priority]
    chosen = [TopicEvicted(t.topic_id, p, "decayed") for p, t in decayed]
    excess = len(state.topics) - len(decayed) - config.max_topics
    if config.capacity_eviction and excess > 0:
        chosen += [TopicEvicted(t.topic_id, p, "capacity") for p, _, _, t in ranked[len(decayed):][:excess]]
    gone = {c.topic_id for c in chosen}
    # A leaver with compactions decided and not answered keeps them going (answered sooner,
    # they would have been done before it left: a replay must not depend on that).
    draining = tuple(t for t in state.topics if t.topic_id in gone and (t.compaction is not None or t.due))
    return evolve(state, topics=tuple(t for t in state.topics if t.topic_id not in gone),
                   draining=state.draining + draining,
                   evicted_count=state.evicted_count + len(chosen)), tuple(chosen)


def step(state: TopicsState, observed: Observed, now: float, config: TopicConfig = DEFAULT_CONFIG,
         wall: float | None = None) -> Stepped:
    """The one call per input: new state plus the commands to emit, in order.

    `now` is the decay clock (LRU timer, eviction); `wall` (default: `now`) times the
    compaction requests in flight and the retry backoff, so the agent can run decay on event
    time (replays repeat it) and timeouts on the wall clock.
    """
    wall = now if wall is None else wall
    commands: tuple[Command, ...] = ()
    if isinstance(observed, (UserMessage, AssistantMessage, UnmatchedUserMessage)):
        if not state.never_placed(observed.seq):  # redelivery: already applied
            return state, ()
        late = observed.seq < state.last_seq
        state = state.placing(observed.seq)  # a late seq (one passed over) joins its topic in seq order
        if isinstance(observed, UserMessage):
            state, commands = _on_user(state, observed, now, config, late)
        else:
            state, commands = _join_active(state, observed, now)
        if late and state.waiting_replies:
            state, placed = _place_waiting(state, observed, commands, now)
            commands += placed
    elif isinstance(observed, (CompactionDone, CompactionFailed)):
        state = _on_result(state, observed, wall, config)
    state, evicted = _evictions(state, now, config)  # first, so no compaction is asked for a leaver
    at_seq = observed.seq if isinstance(observed, (UserMessage, AssistantMessage, UnmatchedUserMessage)) \
        else state.last_seq
    state, compactions = _compactions(state, wall, config, at_seq)
    return state, commands + evicted + compactions


def topic_stats(state: TopicsState, topic_id: str | None, now: float,
                config: TopicConfig = DEFAULT_CONFIG) -> dict[str, Any] | None:
    """Seed 004's get_topic_stats fields (plus the current priority); None for an unknown topic.
    topic_id None means the active topic."""
    topic = state.topic(state.active_topic_id if topic_id is None else topic_id)
    if topic is None:
        return None
    return {
        "topic_id": topic.topic_id, "topic_title": topic.title,
        "active_messages": len(topic.messages), "compressed_messages": topic.archived_count,
        "total_messages": topic.message_count, "has_summary": topic.summary is not None,
        "importance_score": topic.importance, "access_count": topic.access_count,
        "memory_type": memory_type(topic.access_count, config),
        "half_life_days": half_life_seconds(topic.access_count, config) / SECONDS_PER_DAY,
        "age_seconds": now - topic.created_at, "inactive_seconds": now - topic.last_active_at,
        "priority": topic_priority(topic, now, config),
    }
