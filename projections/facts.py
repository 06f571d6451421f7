"""Projects chunks, facts (dedup, supersede, links) and owners' fact decisions into PostgreSQL."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import orjson
import psycopg
from aiokafka.structs import ConsumerRecord
from psycopg.types.json import Jsonb

from core.settings import Settings
from runtime.dead_letter import DeadLetter
from schemas import facts_events as fe
from schemas.codec import Event, peek_type
from projections.decoding import decode_record
from schemas.limits import Limits
from schemas.envelope import InvalidEvent
from domain.facts import decisions as rules
from domain.facts.dedup import (
    DedupConfig,
    FactDecision,
    LlmVerdict,
    Neighbour,
    NewFact,
    decide_fact,
)
from domain.facts.ids import from_vector, vector_literal

log = logging.getLogger(__name__)
NEIGHBOURS = 10
_ACTIONS = {fe.FACT_EDITED: "edited", fe.FACT_DELETED: "deleted"}
# What this projector applies; every other event (all of the truth, most of the memory topic:
# topic placements, summaries) is skipped unparsed when its type can be peeked.
_APPLIED = frozenset({fe.CHUNK_RECORDED, fe.MEMORY_STORED, *fe.MANAGEMENT_TYPES})

INSERT_CHUNK = """
INSERT INTO conversation_chunks (chunk_id, tenant_id, conversation_id, user_id, subject_id, content, embedding,
    embedding_model, message_range_start, message_range_end, prompt_version, model, source_event_ids, event_id,
    occurred_start, occurred_end)
VALUES (%s, %s, %s, %s, %s, %s, %s::vector, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT DO NOTHING RETURNING chunk_id
"""
# Exact distances inside the owner's scope (a materialized CTE cannot use the HNSW index):
# an approximate neighbour list could differ between runs, and dedup must replay identically.
_NEIGHBOURS = """
WITH scope AS MATERIALIZED (
    SELECT fact_id, content, category, owner_user_id, importance, tags, embedding FROM facts
     WHERE tenant_id = %(tenant)s AND subject_id IS NOT DISTINCT FROM %(subject)s AND embedding_model = %(model)s
       AND valid_to IS NULL AND deleted_at IS NULL AND (owner_user_id = %(owner)s OR visibility = 'shared'))
SELECT fact_id, content, category, owner_user_id, importance, tags, 1 - (embedding <=> %(vector)s::vector)
  FROM scope ORDER BY embedding <=> %(vector)s::vector, fact_id LIMIT %(limit)s
"""
# The new fact, its history entry and its link in one statement (one round trip, no answer
# awaited in pipeline mode): the fact (nothing when its id is there already), then, when it was
# inserted, its history entry (as _HISTORY) and its link. The history and the link read the inserted row from the CTE; their
# foreign keys to it are checked at the end of the statement.
_INSERT_FACT_WITH_HISTORY = """
WITH fact AS (
    INSERT INTO facts (fact_id, tenant_id, owner_user_id, subject_id, category, memory_type, content, importance,
        tags, source_conversation_id, source_chunk_id, source_event_ids, embedding, embedding_model, extracted_by,
        prompt_version, valid_from, event_id, updated_at)
    VALUES (%(fact_id)s, %(tenant)s, %(owner)s, %(subject)s, %(category)s, %(memory_type)s, %(content)s,
            %(importance)s, %(tags)s, %(conversation)s, %(chunk)s, %(sources)s, %(vector)s::vector, %(model)s,
            %(extracted_by)s, %(prompt_version)s, %(at)s, %(event_id)s, %(at)s)
    ON CONFLICT (fact_id) DO NOTHING RETURNING fact_id),
history AS (
    INSERT INTO fact_history (fact_id, change, old_content, new_content, detail, event_id, changed_at)
    SELECT fact_id, %(change)s, NULL, %(content)s, %(detail)s, %(history_id)s, %(at)s FROM fact
    ON CONFLICT DO NOTHING),
link AS (
    INSERT INTO fact_links (from_fact_id, to_fact_id, relationship, event_id)
    SELECT fact_id, %(target)s, %(link)s, %(event_id)s FROM fact WHERE %(link)s::text IS NOT NULL
    ON CONFLICT DO NOTHING)
SELECT fact_id FROM fact
"""
# Whether any owner's decision could apply to a fact of this owner and subject (_manage reads
# nothing else): none, and a new fact needs no _manage.
_ANY_DECISION = """
SELECT EXISTS (SELECT 1 FROM fact_decisions
                WHERE tenant_id = %s AND owner_user_id = %s AND subject_id IS NOT DISTINCT FROM %s)
"""
_MERGE = """
UPDATE facts SET importance = %(importance)s, tags = %(tags)s, content = %(content)s,
       embedding = COALESCE(%(vector)s::vector, embedding),
       source_event_ids = source_event_ids || ARRAY(SELECT unnest(%(sources)s::text[]) EXCEPT
                                                  SELECT unnest(source_event_ids)),
       updated_at = GREATEST(updated_at, %(at)s)
 WHERE fact_id = %(fact_id)s
"""
_HISTORY = """
INSERT INTO fact_history (fact_id, change, old_content, new_content, detail, event_id, changed_at)
VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING
"""
_DECISIONS = """
SELECT d.event_id, d.fact_id, d.owner_user_id, d.subject_id, d.action, d.content_snapshot, d.decided_at,
       d.new_content, h.detail
  FROM fact_decisions d
  LEFT JOIN fact_history h ON h.event_id = d.event_id AND h.fact_id = d.fact_id AND h.change = 'decision'
 WHERE d.tenant_id = %s AND d.owner_user_id = %s AND d.subject_id IS NOT DISTINCT FROM %s
"""
_CLOSE_TO_SNAPSHOT = """
SELECT fact_id FROM facts
 WHERE tenant_id = %(tenant)s AND owner_user_id = %(owner)s AND subject_id IS NOT DISTINCT FROM %(subject)s
   AND (fact_id = %(fact_id)s OR (embedding_model = %(model)s
        AND embedding <=> %(vector)s::vector <= %(distance)s))
"""


@dataclass(frozen=True)
class FactSource:
    """Where a fact comes from: an extracted chunk, or a memory stored by hand (`change`
    names the history entry: "extracted" or "stored")."""

    event_id: str
    tenant_id: str
    conversation_id: str | None
    owner_user_id: str
    subject_id: str | None
    observed_at: datetime
    chunk_id: str | None
    source_event_ids: list[str]
    extracted_by: str
    prompt_version: str
    change: str


class FactsProjector:
    name = "facts"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.threshold = settings.facts.dedup_threshold
        self.dedup = DedupConfig(merge_threshold=settings.facts.dedup_threshold)

    def topics(self, settings: Settings) -> list[str]:
        # Management events live in the truth; chunks in this generation's memory events.
        return [settings.kafka.conversation_topic, settings.kafka.memory_topic(settings.generation)]

    async def apply(self, conn: psycopg.AsyncConnection, records: Sequence[ConsumerRecord]) -> list[DeadLetter]:
        """The batch's own events decoded first (the others skipped unparsed; none: the connection
        is not touched), then applied in log order in pipeline mode: a statement whose answer nothing waits for
        (a new fact with its history, a supersede, a merge's update) goes out with the next one,
        so an extracted fact costs one round trip (its neighbours), not one a statement. Each
        event's savepoint syncs the pipeline on its way out, so a statement the database refuses
        still refuses that event only (`apply_event`)."""
        mine: list[tuple[ConsumerRecord, Event]] = []
        for record in records:
            kind = peek_type(record.value)
            if kind is not None and kind not in _APPLIED:
                continue  # another system's event: skipped without validating it
            try:
                mine.append((record, decode_record(record, Limits.of(self.settings))))
            except InvalidEvent:
                continue  # the messages and memory projectors dead-letter invalid input once
        letters: list[DeadLetter] = []
        if not mine:
            return letters  # nothing of this projector's: the connection is not touched
        async with conn.pipeline():
            for record, event in mine:
                letter = await self.apply_event(conn, record, event)
                if letter is not None:
                    letters.append(letter)
        return letters

    async def apply_event(self, conn: psycopg.AsyncConnection, record: ConsumerRecord,
                          event: Event) -> DeadLetter | None:
        """One decoded event in a savepoint; its dead letter when refused."""
        handler = {fe.CHUNK_RECORDED: self._chunk, fe.MEMORY_STORED: self._stored}.get(event.type)
        if handler is None and event.type not in fe.MANAGEMENT_TYPES:
            return None
        try:
            async with conn.transaction():  # a savepoint: one bad event never blocks the rest
                refusal = await (handler or self._decision)(conn, event)
        except (psycopg.errors.DataError, psycopg.errors.IntegrityError) as exc:
            refusal = ("apply_failed", f"{type(exc).__name__}: {exc}")
        if refusal is None:
            return None
        log.warning("facts projector refused %s %s: %s", event.type, event.envelope.event_id, refusal)
        return DeadLetter(record, *refusal)

    # -- chunks and extracted facts -------------------------------------------------------

    def chunk_refusal(self, event: Event) -> tuple[str, str] | None:
        """Why a chunk.recorded cannot be applied (vectors the column does not take), or None."""
        p, dims = event.payload, self.settings.embedding.dimensions
        bad = [v for v in (p.embedding, *(f.embedding for f in p.facts)) if v.dimensions != dims]
        if bad:
            return "wrong_dimensions", f"vectors of {bad[0].dimensions} dimensions ({bad[0].model}), column has {dims}"
        return None

    async def _chunk(self, conn, event: Event) -> tuple[str, str] | None:
        e, p = event.envelope, event.payload
        refusal = self.chunk_refusal(event)
        if refusal is not None:
            return refusal
        cur = await conn.execute(INSERT_CHUNK, chunk_row(event))
        if await cur.fetchone() is None:
            return None  # this range is already recorded: redelivery, replay or a late attempt
        source = FactSource(e.event_id, e.tenant_id, e.conversation_id, p.owner_user_id, p.subject_id, p.observed_at,
                            p.chunk_id, p.source_event_ids, p.model, p.prompt_version, "extracted")
        for index, fact in enumerate(p.facts):
            await self._fact(conn, source, index, fact)
        return None

    async def _stored(self, conn, event: Event) -> tuple[str, str] | None:
        """A memory stored by hand: the same dedup/merge path as an extracted fact."""
        e, p = event.envelope, event.payload
        if e.user_id != p.owner_user_id:
            return "not_owner", f"user {e.user_id!r} stored a memory for {p.owner_user_id!r}"
        if p.embedding.dimensions != self.settings.embedding.dimensions:
            return ("wrong_dimensions", f"a vector of {p.embedding.dimensions} dimensions ({p.embedding.model}),"
                                        f" column has {self.settings.embedding.dimensions}")
        source = FactSource(e.event_id, e.tenant_id, None, p.owner_user_id, p.subject_id, e.occurred_at, None,
                            [e.event_id], "manual", "manual", "stored")
        fact = fe.RecordedFact(fact_id=p.fact_id, category=p.category, memory_type=p.memory_type, content=p.content,
                               importance=p.importance, tags=p.tags, embedding=p.embedding)
        if await self._fact(conn, source, 0, fact, answer=True) and p.visibility == "shared":
            await conn.execute("UPDATE facts SET visibility = 'shared' WHERE fact_id = %s", (p.fact_id,))
            await self._manage(conn, e.tenant_id, p.fact_id)  # a later owner's decision still wins
        return None

    async def _fact(self, conn, src: FactSource, index: int, fact: fe.RecordedFact, *, answer: bool = False) -> bool:
        """Dedup one fact against its owner's current ones; True when it was inserted as a new row
        (known only when `answer` is asked or the owner has decisions: else False, and the insert's
        answer is not awaited)."""
        vector = vector_literal(fact.embedding.values)
        decided = await conn.execute(_ANY_DECISION, (src.tenant_id, src.owner_user_id, src.subject_id))
        cur = await conn.execute(_NEIGHBOURS, {
            "tenant": src.tenant_id, "subject": src.subject_id, "model": fact.embedding.model,
            "owner": src.owner_user_id, "vector": vector, "limit": NEIGHBOURS})
        neighbours = [Neighbour(fid, content, category, owner, src.subject_id or "", float(sim), importance,
                                tuple(tags))
                      for fid, content, category, owner, importance, tags, sim in await cur.fetchall()]
        any_decision = (await decided.fetchone())[0]
        new = NewFact(fact.content, from_vector(fact.embedding), fact.category, src.owner_user_id,
                      src.subject_id or "", fact.importance, tuple(fact.tags))
        verdict = LlmVerdict(fact.relation, fact.target_fact_id) if fact.relation and fact.target_fact_id else None
        decision = decide_fact(new, neighbours, src.observed_at.timestamp(), self.dedup, verdict)
        history_id = f"{src.event_id}/{index}"  # one chunk event can touch one fact several times
        detail = {"chunk_id": src.chunk_id, "fact_id": fact.fact_id, "action": decision.action,
                  "reason": decision.reason}
        if decision.action == "merge":
            await self._merge(conn, src, fact, decision, history_id, detail)
            return False
        if decision.action == "supersede":
            await conn.execute("UPDATE facts SET valid_to = %s, updated_at = GREATEST(updated_at, %s)"
                               " WHERE fact_id = %s AND valid_to IS NULL",
                               (src.observed_at, src.observed_at, decision.target_fact_id))
            await conn.execute(_HISTORY, (decision.target_fact_id, "superseded", None, fact.content,
                                          Jsonb(detail), history_id, src.observed_at))
        linked = decision.target_fact_id is not None and decision.link_type is not None
        cur = await conn.execute(_INSERT_FACT_WITH_HISTORY, {
            "fact_id": fact.fact_id, "tenant": src.tenant_id, "owner": src.owner_user_id, "subject": src.subject_id,
            "category": fact.category, "memory_type": fact.memory_type, "content": fact.content,
            "importance": fact.importance, "tags": fact.tags, "conversation": src.conversation_id,
            "chunk": src.chunk_id, "sources": src.source_event_ids, "vector": vector, "model": fact.embedding.model,
            "extracted_by": src.extracted_by, "prompt_version": src.prompt_version, "at": src.observed_at,
            "event_id": src.event_id, "change": src.change, "detail": Jsonb(detail), "history_id": history_id,
            "target": decision.target_fact_id if linked else None, "link": decision.link_type if linked else None})
        if not (answer or any_decision):
            return False  # no decision of this owner's can apply to it: nothing waits for the answer
        if await cur.fetchone() is None:
            return False
        if any_decision:
            await self._manage(conn, src.tenant_id, fact.fact_id)
        return True

    async def _merge(self, conn, src: FactSource, fact: fe.RecordedFact, decision: FactDecision, history_id: str,
                     detail: dict) -> None:
        """Same fact again: bump importance, union tags; an owner's edited wording is never replaced."""
        fields = decision.merged_fields
        target = decision.target_fact_id
        cur = await conn.execute("SELECT content, EXISTS (SELECT 1 FROM fact_history WHERE fact_id = %s"
                                 " AND change = 'edited') FROM facts WHERE fact_id = %s", (target, target))
        old_content, edited = await cur.fetchone()
        reworded = "previous_content" in fields and not edited
        await conn.execute(_MERGE, {
            "importance": fields["importance"], "tags": list(fields["tags"]),
            "content": fields["content"] if reworded else old_content,
            "vector": vector_literal(fact.embedding.values) if reworded else None,
            "sources": src.source_event_ids, "at": src.observed_at, "fact_id": target})
        await conn.execute(_HISTORY, (target, "merged", old_content, fact.content, Jsonb(detail), history_id,
                                      src.observed_at))

    # -- owners' decisions ----------------------------------------------------------------

    async def _decision(self, conn, event: Event) -> tuple[str, str] | None:
        e, p = event.envelope, event.payload
        if e.user_id != p.owner_user_id:
            return "not_owner", f"user {e.user_id!r} acted on fact {p.fact_id} owned by {p.owner_user_id!r}"
        cur = await conn.execute("SELECT owner_user_id FROM facts WHERE tenant_id = %s AND fact_id = %s",
                                 (e.tenant_id, p.fact_id))
        row = await cur.fetchone()
        if row is not None and row[0] != p.owner_user_id:
            return "not_owner", f"fact {p.fact_id} is owned by {row[0]!r}, not {p.owner_user_id!r}"
        action = _ACTIONS.get(event.type) or ("shared" if p.visibility == "shared" else "unshared")
        new_content = getattr(p, "new_content", None)
        cur = await conn.execute(
            "INSERT INTO fact_decisions (event_id, tenant_id, owner_user_id, subject_id, fact_id, action,"
            " content_snapshot, new_content, decided_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT DO NOTHING RETURNING event_id",
            (e.event_id, e.tenant_id, p.owner_user_id, p.subject_id, p.fact_id, action, p.content_snapshot,
             new_content, e.occurred_at))
        if await cur.fetchone() is None:
            return None  # already applied
        # The vectors that let a replay match this decision to a re-extracted fact (docs/facts.md).
        vectors = {"action": action, "snapshot_embedding": _dump(p.snapshot_embedding),
                   "new_embedding": _dump(getattr(p, "new_embedding", None))}
        await conn.execute(_HISTORY, (p.fact_id, "decision", p.content_snapshot, new_content, Jsonb(vectors),
                                      e.event_id, e.occurred_at))
        for fact_id in await self._affected(conn, e.tenant_id, p):
            await self._manage(conn, e.tenant_id, fact_id)
        return None

    async def _affected(self, conn, tenant: str, p: fe.FactManaged) -> list[str]:
        """The decided fact, plus facts close to any snapshot decided on it (re-extracted copies)."""
        group = [d for d in await self._load_decisions(conn, tenant, p.owner_user_id, p.subject_id)
                 if d.fact_id == p.fact_id]
        found: set[str] = {p.fact_id}
        for d in group:
            if d.snapshot_embedding is None:
                continue
            cur = await conn.execute(_CLOSE_TO_SNAPSHOT, {
                "tenant": tenant, "owner": d.owner, "subject": d.subject, "fact_id": p.fact_id,
                "model": d.snapshot_model, "vector": vector_literal(d.snapshot_embedding),
                "distance": 1 - self.threshold + 1e-9})
            found.update(row[0] for row in await cur.fetchall())
        return sorted(found)

    async def _manage(self, conn, tenant: str, fact_id: str) -> None:
        """Recompute the owner-managed fields of one fact from every decision that applies to it."""
        cur = await conn.execute(
            "SELECT fact_id, owner_user_id, subject_id, content, embedding::text, embedding_model, valid_from"
            " FROM facts WHERE tenant_id = %s AND fact_id = %s", (tenant, fact_id))
        row = await cur.fetchone()
        if row is None:
            return
        fact = rules.FactView(row[0], row[1], row[2], row[3], np.asarray(orjson.loads(row[4]), dtype=np.float32),
                              row[5], row[6])
        chosen = rules.applicable(await self._load_decisions(conn, tenant, fact.owner, fact.subject), fact,
                                  self.threshold)
        if not chosen:
            return
        managed = rules.resolve(chosen, fact)
        await conn.execute(
            "UPDATE facts SET visibility = COALESCE(%s, visibility), content = COALESCE(%s, content),"
            " embedding = COALESCE(%s::vector, embedding), deleted_at = COALESCE(deleted_at, %s),"
            " updated_at = GREATEST(updated_at, %s) WHERE fact_id = %s",
            (managed.visibility, managed.content,
             None if managed.embedding is None else vector_literal(managed.embedding), managed.deleted_at,
             chosen[-1].decided_at, fact_id))
        for d in chosen:
            await conn.execute(_HISTORY, (fact_id, d.action, d.content_snapshot, d.new_content,
                                          Jsonb({"decided_on": d.fact_id}), d.event_id, d.decided_at))

    async def _load_decisions(self, conn, tenant: str, owner: str, subject: str | None) -> list[rules.Decision]:
        cur = await conn.execute(_DECISIONS, (tenant, owner, subject))
        return [_decision_row(*row) for row in await cur.fetchall()]


def chunk_row(event: Event) -> tuple:
    """The parameters of INSERT_CHUNK for a chunk.recorded event."""
    e, p = event.envelope, event.payload
    return (p.chunk_id, e.tenant_id, e.conversation_id, p.owner_user_id, p.subject_id, p.summary,
            vector_literal(p.embedding.values), p.embedding.model, p.start_seq, p.end_seq_exclusive,
            p.prompt_version, p.model, p.source_event_ids, e.event_id,
            # Events recorded before occurred_start existed: the range is at least as old as
            # its newest message, so both ends take observed_at.
            p.occurred_start or p.observed_at, p.observed_at)


def _dump(vector: fe.Vector | None) -> dict | None:
    return None if vector is None else {"model": vector.model, "values": vector.values}


def _decision_row(event_id, fact_id, owner, subject, action, snapshot, decided_at: datetime, new_content,
                  detail) -> rules.Decision:
    detail = detail or {}
    snap, new = detail.get("snapshot_embedding") or {}, detail.get("new_embedding") or {}
    return rules.Decision(
        event_id=event_id, fact_id=fact_id, owner=owner, subject=subject, action=action,
        content_snapshot=snapshot, decided_at=decided_at,
        snapshot_embedding=np.asarray(snap["values"], dtype=np.float32) if snap else None,
        snapshot_model=snap.get("model"), new_content=new_content,
        new_embedding=np.asarray(new["values"], dtype=np.float32) if new else None,
        new_embedding_model=new.get("model"))


def projectors(settings: Settings) -> list:
    """The projectors this system runs in the worker."""
    return [FactsProjector(settings)]
