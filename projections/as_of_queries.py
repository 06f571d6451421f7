"""The read model as it was at a past moment (docs/lineage.md, "as of"). Every row records the
position of the generation's projection clock (a sequence, migration 0015) at which it was
projected, completed, superseded, edited or deleted; a moment is a position of that clock, so a
past turn is rebuilt without comparing clocks. A moment without a position (a record made
before the clock, or by another generation) falls back to the rows' wall-clock times."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from projections.lineage_queries import _all, _one


@dataclass(frozen=True)
class Moment:
    at: datetime  # shown; compared only when `position` is None
    position: int | None = None  # the projection clock

    def before(self, position_column: str, time_column: str) -> str:
        """SQL: the row's event (position or time) happened at or before this moment."""
        return f"{position_column} <= %(pos)s" if self.position is not None else f"{time_column} <= %(at)s"

    def params(self, **more) -> dict:
        return {"at": self.at, "pos": self.position, **more}


CLOCK_SQL = ("SELECT current_schema(), to_regclass('projection_clock') IS NOT NULL,"
             " COALESCE(pg_sequence_last_value(to_regclass('projection_clock')), 0)")


def clock_from(row) -> tuple[str, int | None]:
    """`clock`'s answer from CLOCK_SQL's row (for a caller sending it with other statements)."""
    schema, exists, position = row
    return schema.removeprefix("gen_"), position if exists else None


async def clock(conn: psycopg.AsyncConnection) -> tuple[str, int | None]:
    """(generation, position) of the projection clock now: what a served context records. The
    position is None in a generation not migrated to the clock yet (never an error)."""
    async with conn.cursor() as cur:
        await cur.execute(CLOCK_SQL)
        return clock_from(await cur.fetchone())


async def message_moment(conn: psycopg.AsyncConnection, tenant: str, conversation: str, seq: int, *,
                         positions: bool = True) -> Moment | None:
    """When message `seq` was projected (when the chat service would have asked for turn `seq`);
    `positions`: the generation has the projection clock."""
    row = await _one(conn, f"SELECT projected_at, {'projected_pos' if positions else 'NULL'} AS projected_pos"
                     " FROM messages WHERE tenant_id = %s AND conversation_id = %s AND seq = %s",
                     (tenant, conversation, seq))
    return Moment(row["projected_at"], row["projected_pos"]) if row else None


async def memory_rows(conn, tenant: str, conversation: str, at: Moment) -> list[dict]:
    """Summary rows that existed at `at`, each with the status it had then."""
    if at.position is not None:
        completed = "status = 'completed' AND status_pos <= %(pos)s"
        failed = "status = 'failed' AND status_pos <= %(pos)s"
    else:
        completed, failed = "completed_at <= %(at)s", "status = 'failed' AND updated_at <= %(at)s"
    return await _all(
        conn, f"SELECT memory_id, start_sequence, end_sequence, base_memory_id, prompt_version, model,"
        f" CASE WHEN {completed} THEN 'completed' WHEN {failed} THEN 'failed' ELSE 'processing' END AS status,"
        f" CASE WHEN {completed} THEN memory_text END AS memory_text"
        f" FROM memory WHERE tenant_id = %(t)s AND conversation_id = %(c)s AND {at.before('created_pos', 'created_at')}"
        " ORDER BY memory_id DESC LIMIT 20", at.params(t=tenant, c=conversation))


async def newest_messages(conn, tenant: str, conversation: str, *, after_seq: int, before_seq: int, at: Moment,
                          limit: int) -> list[dict]:
    rows = await _all(conn, "SELECT seq, role, content, occurred_at FROM messages WHERE tenant_id = %(t)s"
                      " AND conversation_id = %(c)s AND seq > %(after)s AND seq < %(before)s AND"
                      f" {at.before('projected_pos', 'projected_at')} ORDER BY seq DESC LIMIT %(limit)s",
                      at.params(t=tenant, c=conversation, after=after_seq, before=before_seq, limit=limit))
    return rows[::-1]


async def last_seq(conn, tenant: str, conversation: str, at: Moment) -> int:
    row = await _one(conn, "SELECT max(seq) AS last FROM messages WHERE tenant_id = %(t)s AND conversation_id = %(c)s"
                     f" AND {at.before('projected_pos', 'projected_at')}", at.params(t=tenant, c=conversation))
    return -1 if row is None or row["last"] is None else row["last"]


async def missing_seqs(conn, tenant: str, conversation: str, after_seq: int, upto_seq: int, at: Moment) -> list[int]:
    if upto_seq <= after_seq:
        return []
    rows = await _all(conn, "SELECT s FROM generate_series(%(first)s::int, %(upto)s::int) s WHERE NOT EXISTS"
                      " (SELECT 1 FROM messages m WHERE m.tenant_id = %(t)s AND m.conversation_id = %(c)s AND m.seq = s"
                      f" AND {at.before('m.projected_pos', 'm.projected_at')}) ORDER BY s LIMIT 100",
                      at.params(first=after_seq + 1, upto=upto_seq, t=tenant, c=conversation))
    return [r["s"] for r in rows]


def _happened(row: dict, position_column: str, time_column: str, at: Moment) -> bool:
    """The row's event (given by position, else by time) happened at or before `at`."""
    if at.position is not None:
        return row[position_column] is not None and row[position_column] <= at.position
    return row[time_column] is not None and row[time_column] <= at.at


async def fact_at(conn, tenant: str, fact_id: str, at: Moment) -> str | None:
    """A fact's content at `at`, or None when it was not in memory then (not yet projected,
    superseded or deleted): today's content with the later edits and merges undone."""
    row = await _one(conn, "SELECT content, created_at, created_pos, valid_to, valid_to_pos, deleted_at, deleted_pos"
                     " FROM facts WHERE tenant_id = %s AND fact_id = %s", (tenant, fact_id))
    if row is None or not _happened(row, "created_pos", "created_at", at) \
            or _happened(row, "valid_to_pos", "valid_to", at) or _happened(row, "deleted_pos", "deleted_at", at):
        return None
    content = row["content"]
    later, order = ("pos > %(pos)s", "pos") if at.position is not None else ("changed_at > %(at)s", "changed_at")
    for change in await _all(conn, f"SELECT old_content FROM fact_history WHERE fact_id = %(f)s AND {later}"
                             f" AND old_content IS NOT NULL ORDER BY {order} DESC, id DESC", at.params(f=fact_id)):
        content = change["old_content"]
    return content


async def chunk_at(conn, tenant: str, chunk_id: str, at: Moment) -> str | None:
    row = await _one(conn, "SELECT content FROM conversation_chunks WHERE tenant_id = %(t)s AND chunk_id = %(id)s"
                     f" AND {at.before('created_pos', 'created_at')}", at.params(t=tenant, id=chunk_id))
    return row["content"] if row else None


async def message_at(conn, tenant: str, message_id: str, at: Moment) -> str | None:
    conversation, _, seq = message_id.rpartition(":")
    if not seq.isdigit():
        return None
    row = await _one(conn, "SELECT content FROM messages WHERE tenant_id = %(t)s AND conversation_id = %(c)s"
                     f" AND seq = %(seq)s AND {at.before('projected_pos', 'projected_at')}",
                     at.params(t=tenant, c=conversation, seq=int(seq)))
    return row["content"] if row else None


async def active_topic(conn, tenant: str, conversation: str, turn_seq: int, at: Moment) -> dict | None:
    """The active topic at `at` for turn `turn_seq`: its summary then and its not-yet-archived messages."""
    key = at.params(t=tenant, c=conversation, turn=turn_seq)
    active = await _one(conn, "SELECT a.topic_id, t.title FROM topic_activations a LEFT JOIN topics t"
                        " USING (tenant_id, conversation_id, topic_id) WHERE a.tenant_id = %(t)s"
                        " AND a.conversation_id = %(c)s AND a.seq <= %(turn)s AND"
                        f" {at.before('a.projected_pos', 'a.projected_at')} ORDER BY a.seq DESC LIMIT 1", key)
    if active is None:
        return None
    key["topic"] = active["topic_id"]
    compaction = await _one(conn, "SELECT upto_seq, summary FROM topic_compactions WHERE tenant_id = %(t)s"
                            " AND conversation_id = %(c)s AND topic_id = %(topic)s AND"
                            f" {at.before('projected_pos', 'projected_at')} ORDER BY upto_seq DESC LIMIT 1", key)
    key["upto"] = compaction["upto_seq"] if compaction else -1
    seqs = await _all(conn, "SELECT seq FROM topic_assignments WHERE tenant_id = %(t)s AND conversation_id = %(c)s"
                      " AND topic_id = %(topic)s AND seq > %(upto)s AND seq < %(turn)s AND"
                      f" {at.before('projected_pos', 'projected_at')} ORDER BY seq", key)
    return {"topic_id": active["topic_id"], "title": active["title"], "summary_upto_seq": key["upto"],
            "summary": compaction["summary"] if compaction else None, "message_seqs": [r["seq"] for r in seqs]}


async def generation_built_after(conn, topic_prefix: str, at: datetime) -> dict | None:
    """The generation being read (the search_path's), when it was created after `at` (a replay
    built it later: its rows carry later processing times); else None."""
    return await _one(conn, "SELECT name, created_at FROM public.memory_generations WHERE topic_prefix = %s"
                      " AND 'gen_' || name = current_schema() AND created_at > %s", (topic_prefix, at))
