"""The rows the topics and topic-lineage projectors leave, computed in memory (the batch replay).

`TopicRows.apply` folds decoded topic events, in log order, into the rows that the projectors'
per-event statements (projections/topics.py `_APPLY`, projections/lineage.py `_TOPIC_APPLY`)
would leave in tables that held no row of these conversations; `copy` writes them with one
`COPY` per table. The batch replay (memory_agent/batch_replay/topics.py) uses it for a
partition's derived topic events instead of projecting them event by event; the live stream
keeps the projectors. Compared row for row with the projectors by
tests/integration/test_topic_rows.py.

What the statements read from other tables: a re-sent assignment without its text
(`content_from_log`) and a compaction of a message whose assignment was lost take the message
from `messages`; those rows are read first (`wanted`, then `messages=`), so applying is pure.
The tombstone triggers of an erased conversation (migration 0016) see the `COPY`'s inserts as
they would see the projectors'.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import psycopg

from domain.topics.archive import pack_bytes
from domain.topics.state import TopicMessage
from schemas import topic_events as te
from schemas.codec import Event

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (tenant, conversation)
# (role, content, occurred_at) of a projected message, by (tenant, conversation, seq)
LogMessages = Mapping[tuple[str, str, int], tuple[str, str, datetime]]

TOPIC_COLUMNS = ("tenant_id", "conversation_id", "topic_id", "title", "first_seq", "summary", "summary_upto_seq",
                 "summary_model", "summary_prompt_version", "importance", "access_count", "message_count",
                 "snapshot_seq", "created_at", "last_active_at", "active", "restored_at_seq", "restore_cleared_seq",
                 "compaction_status", "compaction_attempt", "compaction_error", "compactions", "evicted_at",
                 "evicted_priority", "evicted_reason", "created_event_id")
MESSAGE_COLUMNS = ("tenant_id", "conversation_id", "seq", "topic_id", "role", "content", "occurred_at", "similarity",
                   "matched", "event_id")
ARCHIVE_COLUMNS = ("tenant_id", "conversation_id", "topic_id", "archive", "message_count", "first_seq", "last_seq",
                   "json_bytes", "gzip_bytes")
UNASSIGNED_COLUMNS = ("tenant_id", "conversation_id", "seq", "reason", "event_id")
CONVERSATION_COLUMNS = ("tenant_id", "conversation_id", "active_topic_id", "activated_seq", "last_seq")
ASSIGNMENT_COLUMNS = ("tenant_id", "conversation_id", "seq", "topic_id", "matched", "similarity", "event_id")
ACTIVATION_COLUMNS = ("tenant_id", "conversation_id", "seq", "topic_id", "event_id")
COMPACTION_COLUMNS = ("tenant_id", "conversation_id", "topic_id", "upto_seq", "archived_seqs", "summary",
                      "prompt_version", "model", "generation_time_ms", "event_id")
# Children before the topics they reference (deletes), the reverse for inserts.
TABLES = ("topic_messages", "topic_archives", "topic_unassigned", "topic_conversations", "topic_assignments",
          "topic_activations", "topic_compactions", "topics")


def _topic_row(tenant: str, conversation: str, topic: str, title: str, first_seq: int, importance: float,
               created_at, last_active_at) -> dict:
    """A new `topics` row with the table's defaults."""
    return {"tenant_id": tenant, "conversation_id": conversation, "topic_id": topic, "title": title,
            "first_seq": first_seq, "summary": None, "summary_upto_seq": -1, "summary_model": None,
            "summary_prompt_version": None, "importance": importance, "access_count": 0, "message_count": 0,
            "snapshot_seq": -1, "created_at": created_at, "last_active_at": last_active_at, "active": False,
            "restored_at_seq": None, "restore_cleared_seq": -1, "compaction_status": None,
            "compaction_attempt": None, "compaction_error": None, "compactions": 0, "evicted_at": None,
            "evicted_priority": None, "evicted_reason": None, "created_event_id": None}


@dataclass
class TopicRows:
    """The eight topic tables' rows of some conversations, as dicts keyed like their primary keys
    (insertion order: the order the rows are written)."""

    topics: dict[tuple[str, str, str], dict] = field(default_factory=dict)
    messages: dict[tuple[str, str, int], dict] = field(default_factory=dict)
    archives: dict[tuple[str, str, str], list[TopicMessage]] = field(default_factory=dict)
    unassigned: dict[tuple[str, str, int], tuple[str, str]] = field(default_factory=dict)
    conversations: dict[Key, dict] = field(default_factory=dict)
    assignments: dict[tuple[str, str, int], tuple] = field(default_factory=dict)
    activations: dict[tuple[str, str, int], tuple] = field(default_factory=dict)
    compactions: dict[tuple[str, str, str, int], tuple] = field(default_factory=dict)
    missing: set[tuple[str, str, int]] = field(default_factory=set)  # `messages` rows it read and was not given
    # Each conversation's topics (keys of `topics`, in insertion order): an activation visits its
    # conversation's topics, not every topic of the partition.
    by_conversation: dict[Key, list[tuple[str, str, str]]] = field(default_factory=dict)

    @staticmethod
    def wanted(events: Iterable[Event]) -> set[tuple[str, str, int]]:
        """The `messages` rows applying `events` reads for sure: the re-sent assignments' (a
        compaction reads one only when the topic's own row of the seq is missing: `missing`)."""
        return {(event.envelope.tenant_id, event.envelope.conversation_id, event.payload.seq) for event in events
                if event.type == te.TOPIC_MESSAGE_ASSIGNED and event.payload.content_from_log}

    def apply(self, events: Iterable[Event], messages: LogMessages | None = None) -> TopicRows:
        """Every event as both projectors' statements would apply it, in order."""
        messages = messages or {}
        for event in events:
            handler = _APPLY.get(event.type)
            if handler is not None:
                handler(self, event, messages)
        return self

    # -- the topics projector ------------------------------------------------------------------

    def _created(self, event: Event, _messages: LogMessages) -> None:
        e, p = event.envelope, event.payload
        key = (e.tenant_id, e.conversation_id, p.topic_id)
        if key not in self.topics:  # ON CONFLICT DO NOTHING
            row = _topic_row(*key, p.title, p.seq, p.importance, p.created_at, p.created_at)
            row["created_event_id"] = e.event_id
            self._add_topic(key, row)

    def _assigned(self, event: Event, messages: LogMessages) -> None:
        e, p, t = event.envelope, event.payload, event.payload.topic
        key = (e.tenant_id, e.conversation_id, p.topic_id)
        row = self.topics.get(key)
        # The message's insert sees the topics table as before the statement (one snapshot).
        summarized = row is not None and row["summary_upto_seq"] >= p.seq
        if row is None:
            row = self._add_topic(key, _topic_row(*key, t.title, p.seq, t.importance, t.created_at, t.last_active_at))
            row.update(access_count=t.access_count, message_count=t.message_count, snapshot_seq=p.seq)
        elif (row["message_count"], row["snapshot_seq"]) < (t.message_count, p.seq):
            row.update(importance=t.importance, access_count=t.access_count, message_count=t.message_count,
                       last_active_at=t.last_active_at, snapshot_seq=p.seq)
        at = (e.tenant_id, e.conversation_id, p.seq)
        if not summarized and at not in self.messages:
            if not p.content_from_log:
                self.messages[at] = {"topic_id": p.topic_id, "role": p.role, "content": p.content,
                                     "occurred_at": p.occurred_at, "similarity": p.similarity, "matched": p.matched,
                                     "event_id": e.event_id}
            elif at in messages:
                role, content, occurred_at = messages[at]
                self.messages[at] = {"topic_id": p.topic_id, "role": role, "content": content,
                                     "occurred_at": occurred_at, "similarity": None, "matched": True,
                                     "event_id": e.event_id}
            else:
                self.missing.add(at)
        self._placed(e.tenant_id, e.conversation_id, p.seq)
        if p.content_from_log:
            self.unassigned.pop(at, None)
        self.assignments.setdefault(at, (p.topic_id, p.matched, p.similarity, e.event_id))

    def _add_topic(self, key: tuple[str, str, str], row: dict) -> dict:
        self.topics[key] = row
        self.by_conversation.setdefault(key[:2], []).append(key)
        return row

    def _placed(self, tenant: str, conversation: str, seq: int) -> None:
        held = self.conversations.get((tenant, conversation))
        if held is None:
            self.conversations[(tenant, conversation)] = {"active_topic_id": None, "activated_seq": None,
                                                          "last_seq": seq}
        else:
            held["last_seq"] = max(held["last_seq"], seq)

    def _unassigned(self, event: Event, _messages: LogMessages) -> None:
        e, p = event.envelope, event.payload
        self.unassigned.setdefault((e.tenant_id, e.conversation_id, p.seq), (p.reason, e.event_id))
        self._placed(e.tenant_id, e.conversation_id, p.seq)

    def _activated(self, event: Event, _messages: LogMessages) -> None:
        e, p = event.envelope, event.payload
        tenant, conversation = e.tenant_id, e.conversation_id
        self.activations.setdefault((tenant, conversation, p.seq), (p.topic_id, e.event_id))
        held = self.conversations.get((tenant, conversation))
        if held is None:
            self.conversations[(tenant, conversation)] = {"active_topic_id": p.topic_id, "activated_seq": p.seq,
                                                          "last_seq": -1}
        elif held["activated_seq"] is None or held["activated_seq"] < p.seq:
            held.update(active_topic_id=p.topic_id, activated_seq=p.seq)
        else:
            return  # an older activation: the newer one holds, the topics keep their flags
        for key in self.by_conversation.get((tenant, conversation), ()):
            row, topic = self.topics[key], key[2]
            if not (row["active"] or topic == p.topic_id):
                continue
            if topic == p.topic_id:
                row["active"] = True
            else:
                row.update(active=False, restored_at_seq=None,
                           restore_cleared_seq=max(row["restore_cleared_seq"], p.seq))

    def _restore(self, event: Event, _messages: LogMessages) -> None:
        e, p = event.envelope, event.payload
        row = self.topics.get((e.tenant_id, e.conversation_id, p.topic_id))
        if row is not None and row["restore_cleared_seq"] < p.seq and (
                row["restored_at_seq"] is None or row["restored_at_seq"] < p.seq):
            row["restored_at_seq"] = p.seq

    def _still_due(self, event: Event) -> dict | None:
        e, p = event.envelope, event.payload
        row = self.topics.get((e.tenant_id, e.conversation_id, p.topic_id))
        if row is None or row["summary_upto_seq"] >= p.upto_seq or (row["compaction_attempt"] or 0) > p.attempt:
            return None
        return row

    def _compaction_requested(self, event: Event, _messages: LogMessages) -> None:
        row = self._still_due(event)
        if row is not None:
            row.update(compaction_status="requested", compaction_attempt=event.payload.attempt)

    def _compaction_failed(self, event: Event, _messages: LogMessages) -> None:
        row = self._still_due(event)
        if row is not None:
            row.update(compaction_status="failed", compaction_error=event.payload.error)

    def _evicted(self, event: Event, _messages: LogMessages) -> None:
        e, p = event.envelope, event.payload
        row = self.topics.get((e.tenant_id, e.conversation_id, p.topic_id))
        if row is not None and row["evicted_at"] is None:
            row.update(evicted_at=p.evicted_at, evicted_priority=p.priority, evicted_reason=p.reason, active=False,
                       restored_at_seq=None, restore_cleared_seq=max(row["restore_cleared_seq"], e.seq or 0))

    def _compacted(self, event: Event, messages: LogMessages) -> None:
        e, p = event.envelope, event.payload
        tenant, conversation = e.tenant_id, e.conversation_id
        self.compactions.setdefault((tenant, conversation, p.topic_id, p.upto_seq), (
            list(p.archived_seqs), p.summary, p.prompt_version, p.model, p.generation_time_ms, e.event_id))
        key = (tenant, conversation, p.topic_id)
        row = self.topics.get(key)
        if row is None:
            log.warning("topic.compacted for unknown topic %s", p.topic_id)
            return
        if row["summary_upto_seq"] >= p.upto_seq:  # already applied
            return
        archived = list(p.archived_seqs)
        moving = []
        for seq in archived:
            held = self.messages.get((tenant, conversation, seq))
            if held is not None and held["topic_id"] == p.topic_id:
                moving.append(TopicMessage(seq, held["role"], held["content"], held["occurred_at"].timestamp()))
            elif (tenant, conversation, seq) in messages:  # its assignment was lost: from the log
                role, content, occurred_at = messages[(tenant, conversation, seq)]
                moving.append(TopicMessage(seq, role, content, occurred_at.timestamp()))
            else:
                self.missing.add((tenant, conversation, seq))
        unique: dict[int, TopicMessage] = {}  # archive.merge_messages: the stored copy of a seq wins
        for message in [*self.archives.get(key, ()), *moving]:
            unique.setdefault(message.seq, message)
        if unique:
            self.archives[key] = [unique[seq] for seq in sorted(unique)]
        for seq in archived:
            held = self.messages.get((tenant, conversation, seq))
            if held is not None and held["topic_id"] == p.topic_id:
                del self.messages[(tenant, conversation, seq)]
        asked = e.seq if e.seq is not None else p.upto_seq
        restored = row["restored_at_seq"]
        row.update(summary=p.summary, summary_upto_seq=p.upto_seq, summary_model=p.model,
                   summary_prompt_version=p.prompt_version, compaction_status="completed",
                   compactions=row["compactions"] + 1,
                   restored_at_seq=None if restored is not None and restored <= asked else restored,
                   restore_cleared_seq=max(row["restore_cleared_seq"], asked))

    # -- the rows -----------------------------------------------------------------------------

    def rows(self) -> dict[str, list[tuple]]:
        """Per table, its rows as tuples of the `*_COLUMNS` (archives packed here, once)."""
        archives = []
        for key, merged in self.archives.items():
            packed, json_bytes = pack_bytes(merged)
            archives.append((*key, packed, len(merged), merged[0].seq, merged[-1].seq, json_bytes, len(packed)))
        return {
            "topics": [tuple(row[c] for c in TOPIC_COLUMNS) for row in self.topics.values()],
            "topic_messages": [(*key, *(row[c] for c in MESSAGE_COLUMNS[3:]))
                               for key, row in self.messages.items()],
            "topic_archives": archives,
            "topic_unassigned": [(*key, *value) for key, value in self.unassigned.items()],
            "topic_conversations": [(*key, row["active_topic_id"], row["activated_seq"], row["last_seq"])
                                    for key, row in self.conversations.items()],
            "topic_assignments": [(*key, *value) for key, value in self.assignments.items()],
            "topic_activations": [(*key, *value) for key, value in self.activations.items()],
            "topic_compactions": [(*key, *value) for key, value in self.compactions.items()],
        }


_APPLY = {
    te.TOPIC_CREATED: TopicRows._created, te.TOPIC_MESSAGE_ASSIGNED: TopicRows._assigned,  # noqa: SLF001
    te.TOPIC_MESSAGE_UNASSIGNED: TopicRows._unassigned, te.TOPIC_ACTIVATED: TopicRows._activated,  # noqa: SLF001
    te.TOPIC_ARCHIVE_RESTORE_REQUESTED: TopicRows._restore,  # noqa: SLF001
    te.TOPIC_COMPACTION_REQUESTED: TopicRows._compaction_requested,  # noqa: SLF001
    te.TOPIC_COMPACTED: TopicRows._compacted, te.TOPIC_COMPACTION_FAILED: TopicRows._compaction_failed,  # noqa: SLF001
    te.TOPIC_EVICTED: TopicRows._evicted,  # noqa: SLF001
}
COLUMNS = {"topics": TOPIC_COLUMNS, "topic_messages": MESSAGE_COLUMNS, "topic_archives": ARCHIVE_COLUMNS,
           "topic_unassigned": UNASSIGNED_COLUMNS, "topic_conversations": CONVERSATION_COLUMNS,
           "topic_assignments": ASSIGNMENT_COLUMNS, "topic_activations": ACTIVATION_COLUMNS,
           "topic_compactions": COMPACTION_COLUMNS}


async def read_messages(conn: psycopg.AsyncConnection, keys: Iterable[tuple[str, str, int]]) -> dict:
    """The `messages` rows `TopicRows.apply` may read, in one query."""
    keys = sorted(keys)
    if not keys:
        return {}
    cur = await conn.execute(
        "SELECT m.tenant_id, m.conversation_id, m.seq, m.role, m.content, m.occurred_at FROM messages m"
        " JOIN unnest(%s::text[], %s::text[], %s::integer[]) AS k(tenant_id, conversation_id, seq)"
        " ON m.tenant_id = k.tenant_id AND m.conversation_id = k.conversation_id AND m.seq = k.seq",
        [list(column) for column in zip(*keys)])
    return {(t, c, s): (role, content, at) for t, c, s, role, content, at in await cur.fetchall()}


async def rows_of(conn: psycopg.AsyncConnection, events: Sequence[Event]) -> TopicRows:
    """`TopicRows.apply` of `events` with the `messages` rows it reads (read once; again only if
    a compaction found a message missing from its topic: an assignment lost before a crash)."""
    read = TopicRows.wanted(events)
    messages = await read_messages(conn, read)
    while True:
        rows = TopicRows().apply(events, messages)
        unread = rows.missing - read
        if not unread:
            return rows
        read |= unread
        messages |= await read_messages(conn, unread)


async def copy(conn: psycopg.AsyncConnection, rows: TopicRows, conversations: Sequence[Key]) -> dict[str, int]:
    """The conversations' rows of the eight tables replaced by `rows` (inside the caller's
    transaction): what an earlier attempt of the batch wrote is deleted first, then one `COPY`
    per table, topics first (the others reference them). Returns the rows sent per table."""
    if conversations:
        tenants, ids = [t for t, _ in conversations], [c for _, c in conversations]
        for table in TABLES:
            await conn.execute(
                f"DELETE FROM {table} WHERE (tenant_id, conversation_id) IN"  # noqa: S608 - our own names
                " (SELECT * FROM unnest(%s::text[], %s::text[]))", (tenants, ids))
    sent, tables = {}, rows.rows()
    for table in reversed(TABLES):
        values = tables[table]
        sent[table] = len(values)
        if not values:
            continue
        async with conn.cursor() as cur:
            async with cur.copy(f"COPY {table} ({', '.join(COLUMNS[table])}) FROM STDIN") as out:
                for value in values:
                    await out.write_row(value)
    return sent

