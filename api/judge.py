"""Judge generation B on the turns generation A served (issue 26, docs/replay.md "Judging").

For every recorded `context.served` of A (or a sample), A's side is what A served, resolved
from A's read model; B's side is B asked the same request as of the same turn: the summary and
gap before the turn, and retrieval that ranks only what existed then (messages, chunks and facts
whose source happened by the turn's time; this conversation's chunks ending before the turn).
B is read with `record=False`: no surfaced state, no access counts, no served record. Both sides
are scored against what came next in the log (domain/judge.py). One turn at a time, on one
connection per generation, paced to `cpu_share` of one core (runtime/judge.Pacer)."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Callable, Sequence

import psycopg
from psycopg.rows import dict_row

from core.settings import Settings
from domain import judge as J
from projections import queries
from retrieval.request import ContextRequest
from retrieval.search import SearchRow
from retrieval.service import RetrievalConfig, retrieve
from runtime.judge import Options, Pacer
from streams.window.context import MemoryRow, Message, assemble_context


async def connect(settings: Settings, generation: str) -> psycopg.AsyncConnection:
    return await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, autocommit=True, options=f"-c search_path=gen_{generation},public")


async def served_turns(conn: psycopg.AsyncConnection, options: Options) -> list[dict]:
    """A's recorded turns, oldest first; a sample is stable (by event id hash) across runs."""
    order = "md5(event_id)" if options.sample else "served_at"
    cur = await conn.cursor(row_factory=dict_row).execute(
        "SELECT * FROM (SELECT event_id, tenant_id, conversation_id, user_id, subject_id, turn_seq, served_at,"
        " payload FROM served_contexts WHERE (%(since)s::timestamptz IS NULL OR served_at >= %(since)s)"
        f" ORDER BY {order} LIMIT %(limit)s) s ORDER BY served_at, event_id",
        {"since": options.since, "limit": options.sample})
    return await cur.fetchall()


async def _texts(conn, sql: str, params: tuple) -> dict:
    return dict(await (await conn.execute(sql, params)).fetchall())


async def side_a(conn: psycopg.AsyncConnection, turn: dict) -> J.Side:
    """What A served at the turn (the record), each part's text from A's read model."""
    p, tenant, conversation = turn["payload"], turn["tenant_id"], turn["conversation_id"]
    texts: dict[str, str] = {}
    summary = p.get("summary")
    if summary:
        row = await (await conn.execute(
            "SELECT memory_text FROM memory WHERE tenant_id = %s AND conversation_id = %s AND memory_id = %s",
            (tenant, conversation, summary["memory_id"]))).fetchone()
        texts["summary"] = (row and row[0]) or ""
    gap = await _texts(conn, "SELECT seq, content FROM messages WHERE tenant_id = %s AND conversation_id = %s"
                             " AND seq = ANY(%s)", (tenant, conversation, p.get("gap_seqs") or []))
    texts["gap"] = "\n".join(gap[s] for s in sorted(gap))
    items: dict[str, int] = {}
    ids: dict[str, list[str]] = {"fact": [], "chunk": [], "message": []}
    for item in p.get("retrieved") or []:
        items[f"{item['kind']}:{item['id']}"] = int(item.get("tokens") or 0)
        ids.setdefault(item["kind"], []).append(item["id"])
    found = {
        "fact": await _texts(conn, "SELECT fact_id, content FROM facts WHERE fact_id = ANY(%s)", (ids["fact"],)),
        "chunk": await _texts(conn, "SELECT chunk_id, content FROM conversation_chunks WHERE chunk_id = ANY(%s)",
                              (ids["chunk"],)),
        "message": await _message_texts(conn, tenant, ids["message"]),
    }
    for kind in ("fact", "chunk", "message"):
        texts[kind] = "\n".join(found[kind].get(i, "") for i in ids[kind])
    return J.Side(items, summary and f"{summary['start_seq']}-{summary['end_seq']}", _join(texts), texts)


async def _message_texts(conn: psycopg.AsyncConnection, tenant: str, ids: list[str]) -> dict[str, str]:
    """{"conversation:seq": content} by the messages' primary key (an id whose seq is not a
    number names no message)."""
    keys = [(c, int(s)) for c, _, s in (i.rpartition(":") for i in ids) if c and s.isdigit()]
    if not keys:
        return {}
    return await _texts(conn, "SELECT m.conversation_id || ':' || m.seq, m.content"
                              " FROM unnest(%s::text[], %s::int[]) AS k(conversation_id, seq)"
                              " JOIN messages m ON m.tenant_id = %s AND m.conversation_id = k.conversation_id"
                              " AND m.seq = k.seq", ([c for c, _ in keys], [n for _, n in keys], tenant))


def _join(texts: dict[str, str]) -> str:
    return "\n".join(t for t in texts.values() if t)


def as_of(conversation: str, turn: int, when: datetime) -> Callable[[SearchRow], bool]:
    """Only what existed at the turn: this conversation's chunks ending before it (its messages
    from the turn on are never candidates: the scope), and anything else whose source happened
    by the turn's time (a replay built its rows from the whole log)."""
    def keep(row: SearchRow) -> bool:
        if row.kind == "chunk" and row.conversation_id == conversation and row.range_end is not None:
            return row.range_end <= turn
        source = row.occurred_end or row.occurred_start or row.timestamp
        return source is None or source <= when
    return keep


class ReaderB:
    """B asked a recorded request as of its turn, without writing anything."""

    def __init__(self, conn: psycopg.AsyncConnection, settings: Settings, embedder) -> None:
        self.conn, self.settings, self.embedder = conn, settings, embedder
        self.config = RetrievalConfig.from_settings(settings.retrieval)

    async def side(self, turn: dict) -> J.Side:
        p, tenant, conversation_id = turn["payload"], turn["tenant_id"], turn["conversation_id"]
        seq = p.get("before_seq")
        seq = turn["turn_seq"] if seq is None else seq
        conversation = await queries.get_conversation(self.conn, tenant, conversation_id)
        if conversation is None:
            raise LookupError(f"conversation {conversation_id!r} is not in generation B")
        cur = await self.conn.cursor(row_factory=dict_row).execute(
            "SELECT memory_id, start_sequence, end_sequence, base_memory_id, status, memory_text FROM memory"
            " WHERE tenant_id = %s AND conversation_id = %s AND end_sequence < %s AND status = 'completed'"
            " ORDER BY end_sequence DESC, memory_id DESC LIMIT 1", (tenant, conversation_id, seq))
        memory = [MemoryRow(m["memory_id"], m["start_sequence"], m["end_sequence"], m["base_memory_id"],
                            m["status"], m["memory_text"]) for m in await cur.fetchall()]
        limits = self.settings.window
        after = memory[0].end_seq if memory else -1
        messages = await queries.list_messages(self.conn, tenant, conversation_id, after_seq=after, before_seq=seq,
                                               limit=limits.context_max_gap_messages + 1, newest=True)
        assembled = assemble_context(memory, [Message(m.seq, m.role, m.content) for m in messages], seq,
                                     max_messages=limits.context_max_gap_messages,
                                     max_bytes=limits.context_max_gap_bytes)
        when = await self._turn_time(tenant, conversation_id, seq) or turn["served_at"]
        request = ContextRequest(conversation, turn["user_id"], turn["subject_id"], p.get("query"), seq,
                                 int(p.get("budget_tokens") or 0), when)
        retrieval = await retrieve(self.conn, request, self.embedder, self.config, record=False,
                                   verbatim_from_seq=assembled.gap[0].seq if assembled.gap else None,
                                   keep=as_of(conversation_id, seq, when))
        texts = {"summary": assembled.summary.text if assembled.summary else "",
                 "gap": "\n".join(m.content for m in assembled.gap)}
        items: dict[str, int] = {}
        by_kind: dict[str, list[str]] = {"fact": [], "chunk": [], "message": []}
        for packed in (retrieval.packed.included if retrieval else []):
            row = retrieval.rows[packed.item.candidate.item_id]
            items[f"{row.kind}:{row.item_id}"] = packed.tokens
            by_kind[row.kind].append(row.content)  # the item's own text, as A's side has it
        texts.update({kind: "\n".join(lines) for kind, lines in by_kind.items()})
        summary = assembled.summary
        return J.Side(items, summary and f"{summary.start_seq}-{summary.end_seq}", _join(texts), texts)

    async def _turn_time(self, tenant: str, conversation: str, seq: int) -> datetime | None:
        row = await (await self.conn.execute(
            "SELECT occurred_at FROM messages WHERE tenant_id = %s AND conversation_id = %s AND seq < %s"
            " ORDER BY seq DESC LIMIT 1", (tenant, conversation, seq))).fetchone()
        return row[0] if row else None


async def continuation(conn: psycopg.AsyncConnection, tenant: str, conversation: str, turn: int, horizon: int) -> str:
    """What came next in the log: the turn's reply and the messages after it (`horizon` in all)."""
    rows = await (await conn.execute(
        "SELECT content FROM messages WHERE tenant_id = %s AND conversation_id = %s AND seq > %s ORDER BY seq"
        " LIMIT %s", (tenant, conversation, turn, horizon))).fetchall()
    return "\n".join(r[0] for r in rows)


async def judge(settings: Settings, a: str, b: str, settings_b: Settings, embedder, options: Options = Options(),
                progress: Callable[[int, int], None] | None = None) -> dict:
    """The judgement of B against A on A's recorded turns: per turn and overall."""
    pacer = Pacer(options.cpu_share)
    started = time.monotonic()
    async with await connect(settings, a) as conn_a, await connect(settings, b) as conn_b:
        turns = await served_turns(conn_a, options)
        reader = ReaderB(conn_b, settings_b, embedder)
        judged: list[J.TurnJudgement] = []
        for index, turn in enumerate(turns):
            judged.append(await pacer.run(_one(conn_a, reader, turn, options)))
            if progress:
                progress(index + 1, len(turns))
    overall = J.summarize(judged, options.margin)
    overall.update(seconds=round(time.monotonic() - started, 2), paced_seconds=round(pacer.waited, 2),
                   cpu_share=options.cpu_share)
    return {"a": a, "b": b, "overall": overall, "turns": [t.as_dict() for t in judged],
            "sample": options.sample, "since": options.since.isoformat() if options.since else None,
            "horizon": options.horizon}


async def _one(conn_a, reader: ReaderB, turn: dict, options: Options) -> J.TurnJudgement:
    p = turn["payload"]
    seq = p.get("before_seq")
    seq = turn["turn_seq"] if seq is None else seq
    try:
        a_side = await side_a(conn_a, turn)
        b_side = await reader.side(turn)
    except (LookupError, psycopg.Error) as error:
        empty = J.Side({}, None, "")
        failed = J.judge_turn(turn["conversation_id"], seq, empty, empty, "", None)
        return J.TurnJudgement(**{**vars(failed), "error": f"{type(error).__name__}: {error}"})
    # The current message is seq itself; what came next starts after it.
    following = await continuation(conn_a, turn["tenant_id"], turn["conversation_id"], seq, options.horizon)
    return J.judge_turn(turn["conversation_id"], seq, a_side, b_side, following, p.get("query"))


async def judge_questions(settings: Settings, names: Sequence[str], settings_by_name: dict[str, Settings],
                          embedders: dict[str, Any], questions: Sequence[dict], tenant: str,
                          user_of: Callable[[str], str | None] | None = None, cpu_share: float = 0.5) -> dict:
    """`--questions`: each question asked of every generation (as of `before_seq`, else the end
    of its conversation), scored by the answer's words: overall and per kind of section."""
    pacer = Pacer(cpu_share)
    rows = []
    conns = {n: await connect(settings, n) for n in names}
    try:
        readers = {n: ReaderB(conns[n], settings_by_name[n], embedders[n]) for n in names}
        for q in questions:
            sides = {}
            for name in names:
                conversation = await queries.get_conversation(conns[name], tenant, q["conversation"])
                if conversation is None:
                    continue
                before = q.get("before_seq")
                before = conversation.last_seq + 1 if before is None else int(before)
                user = (user_of and user_of(q["conversation"])) or conversation.user_id
                turn = {"tenant_id": tenant, "conversation_id": q["conversation"], "user_id": user,
                        "subject_id": conversation.subject_id, "turn_seq": before, "served_at": datetime.now().astimezone(),
                        "payload": {"before_seq": before, "query": q["question"],
                                    "budget_tokens": int(q.get("budget_tokens", 500))}}
                sides[name] = await pacer.run(readers[name].side(turn))
            rows.append({"conversation": q["conversation"], "question": q["question"],
                         "scores": J.question_scores(q["answer"], sides)})
    finally:
        for conn in conns.values():
            await conn.close()
    return {"questions": J.summarize_questions(rows, names), "rows": rows}
