"""memory_items (migration 0020): kept equal to its source tables on every write path, its
statistics equal to a recount, backfilled for an existing deployment, and the vector step's
recall@10 against an exact scan of each scope, real PostgreSQL + pgvector."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
import pytest

from projections.migrate import migrate
from retrieval.items import prepare_items, scope_sql, search_items
from retrieval.search import NO_SEQ, Scope, vector_literal
from retrieval.service import RetrievalConfig
from tests.support import labelled_set as L

NOW = datetime(2026, 11, 1, tzinfo=UTC)


def connect(settings):
    return psycopg.AsyncConnection.connect(settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public")


def unit_vectors(n: int, seed: int, dimensions: int = 384) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, dimensions)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def memory(i: int, tenant: str, user: str, subject: str | None, kind: str = "fact", **fields) -> L.Memory:
    words = ("kayak", "violin", "sourdough", "tortoise", "telescope", "marathon", "pottery", "ferry")
    text = f"{user} talked about the {words[i % len(words)]} number {i} on day {i % 17}"
    return L.Memory(f"m{i:05d}", kind, tenant, user, subject, text, "hobby", conversation=f"old-{i}",
                    age_days=i % 30, **fields)


async def insert(conn, memories: list[L.Memory], seed: int) -> None:
    await L.insert_memories(conn, memories, [vector_literal(v) for v in unit_vectors(len(memories), seed)],
                            "test-model", NOW)


async def add_message(conn, tenant: str, conversation: str, seq: int, user: str, role: str, text: str) -> None:
    await conn.execute(
        "INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, subject_id, role, content,"
        " occurred_at, source_partition, source_offset) VALUES (%s,%s,%s,%s,%s,NULL,%s,%s,%s,0,%s)",
        (tenant, conversation, seq, f"{conversation}-{seq}", user, role, text, NOW + timedelta(seconds=seq), seq))


async def add_embedding(conn, tenant: str, conversation: str, seq: int, user: str, seed: int) -> None:
    await conn.execute(
        "INSERT INTO message_embeddings (tenant_id, conversation_id, seq, user_id, subject_id, occurred_at, embedding,"
        " embedding_model, event_id) VALUES (%s,%s,%s,%s,NULL,%s,%s,'test-model',%s)",
        (tenant, conversation, seq, user, NOW, vector_literal(unit_vectors(1, seed)[0]), f"{conversation}-{seq}"))


# What memory_items must hold, from the source tables (the rules of retrieval/search.py's
# per-table scopes: live facts, every chunk, people's messages with their embedding if any).
REFERENCE = """
SELECT tenant_id, 'fact' AS kind, fact_id AS item_id, owner_user_id AS user_id, subject_id,
       visibility = 'shared' AS shared, content, embedding::text AS embedding
FROM facts WHERE deleted_at IS NULL AND valid_to IS NULL
UNION ALL SELECT tenant_id, 'chunk', chunk_id, user_id, subject_id, false, content, embedding::text
FROM conversation_chunks
UNION ALL SELECT t.tenant_id, 'message', t.conversation_id || ':' || t.seq, t.user_id, t.subject_id, false, t.content,
       e.embedding::text
FROM messages t LEFT JOIN message_embeddings e USING (tenant_id, conversation_id, seq)
WHERE t.role IN ('user', 'assistant')
ORDER BY 1, 2, 3
"""
INDEXED = ("SELECT tenant_id, kind, item_id, user_id, subject_id, shared, content, embedding::text FROM memory_items"
           " WHERE content IS NOT NULL ORDER BY 1, 2, 3")
LEXICON_RECOUNT = """
SELECT tenant_id, lexeme, count(*)::int FROM (
    SELECT tenant_id, u.lexeme FROM memory_items, unnest(content_tsv) u WHERE content IS NOT NULL
    UNION ALL SELECT tenant_id, '' FROM memory_items WHERE content IS NOT NULL
) x GROUP BY 1, 2 ORDER BY 1, 2
"""
SCOPES_RECOUNT = """
SELECT tenant_id, user_id, subject_key, count(*)::int FROM (
    SELECT tenant_id, user_id, COALESCE(subject_id, '') AS subject_key FROM memory_items WHERE content IS NOT NULL
    UNION ALL SELECT tenant_id, '', subject_id FROM memory_items WHERE content IS NOT NULL AND shared
) x GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
"""


async def rows(conn, sql: str) -> list[tuple]:
    return await (await conn.execute(sql)).fetchall()


async def assert_consistent(conn) -> None:
    assert await rows(conn, INDEXED) == await rows(conn, REFERENCE)
    assert await rows(conn, "SELECT tenant_id, lexeme, df FROM memory_lexicon ORDER BY 1, 2") == \
        await rows(conn, LEXICON_RECOUNT)
    assert await rows(conn, "SELECT tenant_id, user_id, subject_key, items FROM memory_scopes"
                            " ORDER BY 1, 2, 3") == await rows(conn, SCOPES_RECOUNT)


async def test_every_write_path_keeps_the_index_and_its_statistics_equal_to_the_source_tables(settings):
    async with await connect(settings) as conn:
        await insert(conn, [memory(i, L.A, "ana", "joe" if i % 3 else None, visibility="shared" if i % 3 == 1
                                   else "private", deleted=i == 4, superseded=i == 5) for i in range(12)]
                     + [memory(12 + i, L.A, "ana", None, kind="chunk") for i in range(4)]
                     + [memory(20 + i, L.B, "bo", None) for i in range(3)], seed=1)
        # A message's embedding before its message, and after; a system message; a later edit.
        await add_embedding(conn, L.A, "c1", 0, "ana", 2)
        await add_message(conn, L.A, "c1", 0, "ana", "user", "Which ferry goes to the island?")
        await add_message(conn, L.A, "c1", 1, "ana", "assistant", "The morning ferry, at seven.")
        await add_message(conn, L.A, "c1", 2, "ana", "system", "Be brief.")
        await add_embedding(conn, L.A, "c1", 1, "ana", 3)
        await conn.commit()
        await assert_consistent(conn)
        assert (await rows(conn, "SELECT count(*) FROM memory_items WHERE kind = 'fact'"))[0][0] == 10 + 3

        # Management and erasure write paths: share, edit, supersede, delete, erase.
        await conn.execute("UPDATE facts SET visibility = 'shared' WHERE fact_id = 'm00002'")
        await conn.execute("UPDATE facts SET content = 'Ana now plays the cello' WHERE fact_id = 'm00003'")
        await conn.execute("UPDATE facts SET valid_to = now() WHERE fact_id = 'm00006'")
        await conn.execute("UPDATE facts SET deleted_at = NULL, valid_to = NULL WHERE fact_id = 'm00004'")
        await conn.execute("DELETE FROM facts WHERE fact_id = 'm00007'")
        await conn.execute("DELETE FROM conversation_chunks WHERE chunk_id = 'm00013'")
        await conn.execute("UPDATE messages SET content = 'Which boat goes to the island?' WHERE seq = 0")
        await conn.execute("DELETE FROM message_embeddings WHERE seq = 1")
        await conn.execute("DELETE FROM messages WHERE seq = 2")
        await conn.commit()
        await assert_consistent(conn)
        assert (await rows(conn, "SELECT count(*) FROM memory_items WHERE tenant_id = %s" % "'tenant-b'"))[0][0] == 3


async def test_an_update_counts_only_the_rows_whose_counted_columns_changed(settings):
    """Migration 0071: a message's vector set after its text (the message index; a batch replay's
    step after the messages' COPY) leaves the statistics untouched without recounting the row,
    and one UPDATE mixing such rows with rows whose text, scope or presence changed still keeps
    the lexicon and the scopes equal to a recount."""
    async with await connect(settings) as conn:
        await insert(conn, [memory(i, L.A, "ana", "joe" if i % 2 else None, visibility="shared" if i % 2
                                   else "private") for i in range(6)], seed=7)
        for seq, text in enumerate(["Which ferry goes to the island?", "The morning ferry, at seven.",
                                    "And the kayak rental?", "Open from nine."]):
            await add_message(conn, L.A, "c1", seq, "ana", "user" if seq % 2 == 0 else "assistant", text)
        await conn.commit()
        await assert_consistent(conn)

        # The vectors after the texts: no count changes, so the statistics are not recomputed.
        await conn.execute("SET track_functions = 'all'")
        for seq in range(4):
            await add_embedding(conn, L.A, "c1", seq, "ana", 10 + seq)
        calls = await rows(conn, "SELECT coalesce(sum(calls), 0)::int FROM pg_stat_xact_user_functions"
                                 " WHERE funcname = 'memory_statistics_apply'")
        assert calls == [(0,)]
        await conn.commit()
        await assert_consistent(conn)

        # One statement: two rows only re-vectored, one re-worded, one moved to another scope, one
        # made shared, one whose text goes (a content-less row is not counted).
        await conn.execute(
            "UPDATE memory_items SET"
            " embedding = CASE WHEN item_id IN ('m00000', 'c1:0') THEN NULL ELSE embedding END,"
            " content = CASE item_id WHEN 'm00001' THEN 'Ana now plays the cello'"
            "   WHEN 'c1:1' THEN NULL ELSE content END,"
            " content_tsv = CASE item_id WHEN 'm00001' THEN to_tsvector('english', 'Ana now plays the cello')"
            "   ELSE content_tsv END,"
            " user_id = CASE item_id WHEN 'm00002' THEN 'bo' ELSE user_id END,"
            " shared = CASE item_id WHEN 'm00003' THEN NOT shared ELSE shared END"
            " WHERE tenant_id = %s AND item_id IN ('m00000', 'c1:0', 'm00001', 'c1:1', 'm00002', 'm00003')",
            (L.A,))
        lexicon = await rows(conn, "SELECT tenant_id, lexeme, df FROM memory_lexicon ORDER BY 1, 2")
        scopes = await rows(conn, "SELECT tenant_id, user_id, subject_key, items FROM memory_scopes ORDER BY 1, 2, 3")
        assert lexicon == await rows(conn, LEXICON_RECOUNT)
        assert scopes == await rows(conn, SCOPES_RECOUNT)
        assert (L.A, "cello", 1) in lexicon
        assert any(s[1] == "bo" and s[3] == 1 for s in scopes)
        await conn.rollback()


async def test_an_existing_deployment_is_backfilled_by_the_migration(settings):
    async with await connect(settings) as conn:
        await insert(conn, [memory(i, L.A, "ana", None) for i in range(6)], seed=4)
        await add_message(conn, L.A, "c1", 0, "ana", "user", "Where is the telescope?")
        await add_embedding(conn, L.A, "c1", 0, "ana", 5)
        await conn.commit()
        # As before migration 0020: no index, no triggers, no statistics.
        functions = await rows(conn, "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace ="
                                     " current_schema()::regnamespace AND (p.proname LIKE 'memory\\_items%%'"
                                     " OR p.proname = 'memory_statistics_apply')")
        for (function,) in functions:
            await conn.execute(f"DROP FUNCTION IF EXISTS {function} CASCADE")
        await conn.execute("DROP TABLE memory_items, memory_lexicon, memory_scopes")
        await conn.execute("DELETE FROM schema_migrations WHERE version = 20")
        await conn.commit()
    applied = await asyncio.to_thread(migrate, settings)
    assert [m.version for m in applied] == [20]
    async with await connect(settings) as conn:
        await assert_consistent(conn)
        assert (await rows(conn, "SELECT count(*) FROM memory_items"))[0][0] == 7


@pytest.mark.parametrize("exact_max_items", [None, 0], ids=["served", "index-forced"])
async def test_the_vector_step_finds_the_exact_scans_ten_nearest_in_every_scope(settings, exact_max_items):
    """recall@10 of the vector step against an exact scan of the same scope, per scope: scopes
    of 40 to 1,200 items among 2,600, searched as served (exact scans here) and through the
    HNSW index (iterative scan), with random vectors (the index's worst case)."""
    sizes = {"big": 1200, "mid": 600, "small": 40, "tiny": 10}
    memories, i = [], 0
    for user, size in sizes.items():
        for _ in range(size):
            memories.append(memory(i, L.A, user, "joe" if i % 4 == 0 else None, kind="chunk" if i % 3 == 0 else "fact",
                                   visibility="shared" if i % 8 == 0 else "private"))
            i += 1
    memories += [memory(i + j, L.B, "big", None) for j in range(750)]  # another tenant: never in a scope
    async with await connect(settings) as conn:
        await insert(conn, memories, seed=6)
        await conn.commit()
        await conn.execute("ANALYZE memory_items")
        config = RetrievalConfig()
        k = config.k_for(500)
        limit = config.exact_scan_max_items if exact_max_items is None else exact_max_items
        recall: dict[tuple[str, str | None], float] = {}
        for user in sizes:
            for subject in (None, "joe"):
                scope = Scope(L.A, user, subject, "none", NO_SEQ)
                found_total, expected_total = 0, 0
                for query in unit_vectors(8, seed=hash((user, subject)) % 1000):
                    literal = vector_literal(query)
                    exact = await rows_of(conn, scope, literal)
                    prepared = await prepare_items(conn, scope, max(config.ef_search, k), None)
                    served = await search_items(conn, scope, literal, prepared, k, use_keyword=False,
                                                exact_max_items=limit)
                    await conn.rollback()
                    assert {r.owner_user_id for r in served if r.visibility != "shared"} <= {user}
                    best = sorted((r for r in served if r.in_vector), key=lambda r: -r.cosine)[:10]
                    found_total += len(set(exact) & {f"{r.kind}:{r.item_id}" for r in best})
                    expected_total += len(exact)
                recall[(user, subject)] = found_total / expected_total
    assert min(recall.values()) >= 0.95, recall
    if exact_max_items is None:
        assert min(recall.values()) == 1.0, recall  # these scopes are small: an exact scan


async def rows_of(conn, scope: Scope, literal: str) -> list[str]:
    cur = await conn.execute(
        f"SELECT t.kind || ':' || t.item_id FROM memory_items t WHERE {scope_sql(scope.subject_id)}"
        " AND t.embedding IS NOT NULL ORDER BY (t.embedding <=> %(vector)s::vector) + 0 LIMIT 10",
        {"tenant": scope.tenant_id, "user": scope.user_id, "subject": scope.subject_id,
         "conversation": scope.conversation_id, "before": scope.messages_before_seq,
         "kinds": ["fact", "chunk", "message"], "vector": literal})
    return [row[0] for row in await cur.fetchall()]
