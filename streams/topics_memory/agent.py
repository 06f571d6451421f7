"""Shell of the topic fold: one decoded event in, new state and topic events out (no I/O)."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from core.settings import Settings
from schemas import topic_events as te
from schemas.codec import Event
from schemas.envelope import Envelope
from schemas.erasure_events import REDERIVE_REQUESTED
from schemas.registry import MESSAGE_APPENDED
from domain.topics import gaps
from domain.topics import inbox as box
from streams.topics_memory.codec import AgentState
from domain.topics.decay import TopicConfig
from streams.topics_memory.emit import Cause, assigned, to_event
from domain.topics.fold import BY_SEQ, step
from domain.topics.inbox import InboxConfig, Waiting
from domain.topics.protocol import (
    AssistantMessage,
    CompactionDone,
    CompactionFailed,
    Observed,
    Tick,
    UnmatchedUserMessage,
    UserMessage,
)
from domain.topics.state import TopicsState, evolve

# Everything else on the two topics is skipped before the state is even loaded.
RELEVANT = frozenset({MESSAGE_APPENDED, te.TOPIC_MESSAGE_EMBEDDED, te.TOPIC_EMBEDDING_FAILED,
                      te.TOPIC_COMPACTED, te.TOPIC_COMPACTION_FAILED, te.TOPIC_TICKED,
                      te.TOPIC_MESSAGE_RECALLED, te.TOPIC_BACKLOG_READ, REDERIVE_REQUESTED})
PLACED_ROLES = ("user", "assistant")  # system and tool messages belong to no topic


@dataclass(frozen=True)
class Embedded:
    """A user message's embedding, computed before the fold saw the message (the slice's
    `prepare`, or the batch replay): its unit vector, or why it has none (`gave_up`: the fold
    places the message unmatched, as after a failed embedding request)."""

    vector: tuple[float, ...] | None
    gave_up: str | None = None


def wants_embedding(state: AgentState, event: Event) -> bool:
    """Whether the fold would hold this message and needs its vector: a user message not placed,
    held or deferred yet (a redelivered or deferred one is not embedded again here)."""
    if event.type != MESSAGE_APPENDED or event.payload.role != "user":
        return False
    seq, inbox = event.envelope.seq, state.inbox
    return (state.topics.never_placed(seq) and not inbox.knows(seq)
            and (inbox.backlog is None or seq < inbox.backlog.first_seq))


@dataclass(frozen=True)
class AgentConfig:
    fold: TopicConfig
    inbox: InboxConfig
    prompt_version: str  # of the compaction summaries, recorded in the requests
    model: str
    gaps: gaps.GapConfig = gaps.GapConfig()  # passed-over seqs: read back after the embedding timeout

    @classmethod
    def from_settings(cls, settings: Settings, *, model: str, prompt_version: str) -> AgentConfig:
        topics = settings.topics
        return cls(TopicConfig.from_settings(topics),
                   InboxConfig(topics.embedding_timeout_s, topics.embedding_max_attempts, topics.max_waiting_messages,
                               topics.max_waiting_chars, topics.backlog_batch),
                   prompt_version, model,
                   gaps.GapConfig(topics.embedding_timeout_s, topics.embedding_max_attempts, topics.backlog_batch))


def _importance(metadata: dict) -> float | None:
    value = metadata.get("importance")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _observed(item: Waiting) -> Observed:
    if item.role == "assistant":
        return AssistantMessage(item.seq, item.content, item.timestamp)
    if item.gave_up is not None:
        return UnmatchedUserMessage(item.seq, item.content, item.timestamp, item.gave_up)
    return UserMessage(item.seq, item.content, item.embedding, item.timestamp, item.importance)


def _cause(e: Envelope, seq: int | None = None, user_id: str | None = None, subject_id: str | None = None) -> Cause:
    return Cause(e.tenant_id, e.conversation_id, user_id or e.user_id,
                 subject_id if user_id is not None else e.subject_id, seq if seq is not None else e.seq)


def handle(config: AgentConfig, state: AgentState, event: Event, wall: float,
           embedded: Embedded | None = None) -> tuple[AgentState, list[Envelope]]:
    """Apply one event of the conversation; `wall` times requests, event time drives decay.

    `embedded`: a user message's embedding computed before this call (the live processor and the
    batch replay always pass it): the message is ready at once and no `topic.embedding_requested`
    goes out. Without it the fold asks for it through the log, as it did before (the answers,
    `topic.message_embedded` / `embedding_failed`, of an older log are still applied)."""
    e, p, out = event.envelope, event.payload, []
    emit = dict(prompt_version=config.prompt_version, model=config.model)
    inbox, requests = state.inbox, ()
    if event.type == REDERIVE_REQUESTED:
        if p.erasure_event_id == state.last_rederive:
            return state, []
        state = rederived(state, p.erasure_event_id)
        inbox = state.inbox
    elif event.type == MESSAGE_APPENDED:
        if p.role not in PLACED_ROLES:  # seen, never placed: not a gap to read back later
            if state.topics.never_placed(e.seq):
                state = evolve(state, topics=state.topics.placing(e.seq))
            return state, []
        if not state.topics.never_placed(e.seq) or inbox.find(e.seq) is not None:
            return state, _reassert(state, e)
        ready = embedded if embedded is not None and p.role == "user" else Embedded(None)
        item = Waiting(e.seq, p.role, p.content, e.occurred_at.timestamp(), e.user_id, e.subject_id,
                       _importance(p.metadata), embedding=ready.vector, gave_up=ready.gave_up)
        inbox, requests = box.admit(inbox, item, wall, config.inbox)  # held, or deferred to the backlog
    elif event.type == te.TOPIC_MESSAGE_RECALLED:
        vector = tuple(p.embedding) if p.embedding is not None else None
        gave_up = None if vector is not None or p.role != "user" else (p.error or "no embedding")[:500]
        item = Waiting(p.seq, p.role, p.content, p.occurred_at.timestamp(), e.user_id, e.subject_id,
                       p.importance, embedding=vector, gave_up=gave_up)
        if passed_over(state, p.seq):  # read back by a gap read: placed like a late message
            inbox = box.recovered(inbox, item)
        else:
            inbox = box.recalled(inbox, item, p.after_seq)
    elif event.type == te.TOPIC_BACKLOG_READ:
        if p.gap:
            state = evolve(state, gaps=gaps.settled(state.gaps, p.from_seq, p.through_seq, p.missing, wall))
        else:
            inbox = box.read_done(inbox, p.last_recalled_seq, p.through_seq)
    elif event.type == te.TOPIC_MESSAGE_EMBEDDED:
        inbox = box.embedded(inbox, p.seq, tuple(p.embedding))
    elif event.type == te.TOPIC_EMBEDDING_FAILED:
        inbox, requests = box.failed(inbox, p.seq, p.attempt, p.error, p.retryable, wall, config.inbox)
    elif event.type in (te.TOPIC_COMPACTED, te.TOPIC_COMPACTION_FAILED, te.TOPIC_TICKED):
        if event.type == te.TOPIC_TICKED:
            inbox, requests = box.sweep(inbox, wall, config.inbox)
            observed = Tick()
        elif event.type == te.TOPIC_COMPACTED:
            observed = CompactionDone(p.topic_id, p.upto_seq, p.summary)
        else:
            observed = CompactionFailed(p.topic_id, p.upto_seq, p.error)
        topics, commands = step(state.topics, observed, state.clock, config.fold, wall=wall)
        state = evolve(state, topics=topics)
        # Not caused by a message: these carry the fold's position (the newest message placed).
        cause = _cause(e, seq=topics.last_seq if topics.last_seq >= 0 else None)
        out += [to_event(c, cause, topics, state.clock, **emit) for c in commands]
    else:
        return state, []
    out += [to_event(r, _cause(e, r.seq), state.topics, state.clock, **emit) for r in requests]
    inbox, ready = box.release(inbox)
    inbox, reads = box.next_read(inbox, wall, config.inbox)  # all held are placed: the next deferred
    state = evolve(state, inbox=inbox)
    for item in ready:
        cause = _cause(e, item.seq, item.user_id, item.subject_id)
        if not state.topics.never_placed(item.seq):  # placed meanwhile (or passed over too long ago)
            continue
        clock = max(state.clock, item.timestamp)  # monotone, even if producers' clocks disagree
        topics, commands = step(state.topics, _observed(item), clock, config.fold, wall=wall)
        state = evolve(state, topics=_without_text(topics, item.seq), clock=clock)
        out += [to_event(c, cause, topics, clock, message=item, **emit) for c in commands]
    recovery, gap_read = gaps.step(state.gaps, state.topics.skipped, wall, config.gaps)
    if recovery != state.gaps:
        state = evolve(state, gaps=recovery)
    reads += (gap_read,) if gap_read is not None else ()
    out += [to_event(r, _cause(e, state.topics.last_seq if state.topics.last_seq >= 0 else None), state.topics,
                     state.clock, **emit) for r in reads]
    return state, out


def passed_over(state: AgentState, seq: int) -> bool:
    """A seq the fold placed later messages over and has not placed (nor holds) since."""
    topics, inbox = state.topics, state.inbox
    return (seq < topics.last_seq and topics.never_placed(seq) and inbox.find(seq) is None
            and not (inbox.backlog is not None and inbox.backlog.holds(seq)))


def rederived(state: AgentState, erasure_id: str) -> AgentState:
    """After an erasure deleted this conversation's topics (another user's messages in it were
    erased): the topics are derived again from the messages that remain. The working set
    starts afresh (topic numbers go on, so no id is reused) and every message seen so far
    becomes the inbox's backlog: the recall stage reads the remaining ones back from the
    projected log, in order, with their embeddings, and the fold places them as if they had
    just arrived. Messages arriving meanwhile queue behind them (the backlog keeps log order)."""
    seen = max([state.topics.last_seq] + [w.seq for w in state.inbox.queue]
               + ([state.inbox.backlog.last_seq] if state.inbox.backlog is not None else []))
    topics = TopicsState(conversation_id=state.topics.conversation_id,
                         next_topic_number=state.topics.next_topic_number)
    inbox = box.Inbox(backlog=box.Backlog(0, seen)) if seen >= 0 else box.Inbox()
    return AgentState(topics, inbox, clock=0.0, last_rederive=erasure_id)


def _without_text(topics: TopicsState, seq: int) -> TopicsState:
    """The placed message keeps seq, role and time in the fold's state, not its text: the
    events carry the text, the stages read it from the projected log, and the changelog row
    stays small (20 topics x 12 messages of up to 32k characters would not fit a Kafka record)."""
    for newest_only in (True, False):  # nearly always the newest message of its topic: looked at first
        for topic in topics.topics:
            # The active messages are in seq order: the newest, or a late one found by bisection
            # (a topic holds thousands while a burst outruns its compactions).
            at = len(topic.messages) - 1 if newest_only else bisect_left(topic.messages, seq, key=BY_SEQ)
            if 0 <= at < len(topic.messages):
                message = topic.messages[at]
                if message.seq == seq and message.content:
                    messages = topic.messages[:at] + (evolve(message, content=""),) + topic.messages[at + 1:]
                    return topics.with_topic(evolve(topic, messages=messages))
    return topics



def _reassert(state: AgentState, e: Envelope) -> list[Envelope]:
    """A redelivered message still in the working set: say again where it went. The state may
    have been saved before the events that placed it were sent (crash between the two); the
    projector ignores what it already has, and takes the text from the projected log."""
    for topic in state.topics.topics:
        for message in topic.messages:
            if message.seq == e.seq:
                return [assigned(_cause(e), topic, message.seq, message.role, "", message.timestamp, None, True,
                                 content_from_log=True)]
    return []


def needs_tick(state: AgentState, wall: float, config: AgentConfig) -> bool:
    """An embedding or compaction that never came back, or a failed compaction due a retry."""
    if box.looks_stuck(state.inbox, wall, config.inbox) or gaps.due(state.gaps, state.topics.skipped, wall,
                                                                     config.gaps):
        return True
    fold = config.fold
    for topic in state.topics.topics + state.topics.draining:
        flight = topic.compaction
        if flight is not None and wall - flight.requested_at > fold.compaction_timeout_seconds:
            return True
        if flight is None and wall >= topic.compaction_not_before:
            if topic.due:
                return True
            if len(topic.messages) > fold.max_messages_per_topic:
                cutoff = topic.cutoff
                if sum(m.seq > cutoff for m in topic.messages) > fold.max_messages_per_topic:
                    return True
    return False
