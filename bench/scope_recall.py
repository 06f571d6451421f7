"""recall@10 of the context's vector step against the exact answer, per scope (issue 25).

For each scope and question: the 10 nearest items of the scope by an exact scan of
memory_items (every kind), against the 10 best by cosine among what the vector step returned
(retrieval/items.py), as served (exact scan of a small scope, HNSW for a large one) and with
the HNSW index forced (`exact_max_items=0`) to show what the index alone would find.
"""

from __future__ import annotations

import random
from statistics import mean

import numpy as np
import psycopg

from retrieval.items import prepare_items, scope_sql, search_items
from retrieval.search import NO_SEQ, Scope, vector_literal
from retrieval.service import RetrievalConfig

K = 10


async def exact_top(conn: psycopg.AsyncConnection, scope: Scope, literal: str, k: int = K) -> list[str]:
    sql = (f"SELECT t.kind || ':' || t.item_id FROM memory_items t WHERE {scope_sql(scope.subject_id)}"
           " AND t.embedding IS NOT NULL ORDER BY (t.embedding <=> %(vector)s::vector) + 0, t.item_id LIMIT %(k)s")
    cur = await conn.execute(sql, {"tenant": scope.tenant_id, "user": scope.user_id, "subject": scope.subject_id,
                                   "conversation": scope.conversation_id, "before": scope.messages_before_seq,
                                   "kinds": ["fact", "chunk", "message"], "vector": literal, "k": k},
                             prepare=False)
    return [row[0] for row in await cur.fetchall()]


async def served_top(conn: psycopg.AsyncConnection, scope: Scope, literal: str, config: RetrievalConfig,
                     exact_max_items: int, k: int = K) -> list[str]:
    prepared = await prepare_items(conn, scope, max(config.ef_search, config.k_for(500)), None)
    rows = await search_items(conn, scope, literal, prepared, config.k_for(500), use_keyword=False,
                              exact_max_items=exact_max_items)
    best = sorted((r for r in rows if r.in_vector), key=lambda r: (-r.cosine, r.item_id))[:k]
    return [f"{r.kind}:{r.item_id}" for r in best]


async def scope_sizes(conn: psycopg.AsyncConnection, scopes: list[Scope]) -> list[int]:
    out = []
    for scope in scopes:
        prepared = await prepare_items(conn, scope, 40, None)
        out.append(prepared.scope_items)
    await conn.rollback()
    return out


async def vector_recall_per_scope(conn: psycopg.AsyncConnection, scopes: list[Scope], queries: list[np.ndarray],
                                  config: RetrievalConfig) -> dict:
    """Mean and worst recall@10 per scope (each the mean over `queries`), as served and with the
    index forced; with the scope sizes they were measured on."""
    sizes = await scope_sizes(conn, scopes)
    per_plan: dict[str, list[float]] = {"served": [], "index_forced": []}
    for scope in scopes:
        recalls: dict[str, list[float]] = {"served": [], "index_forced": []}
        for query in queries:
            literal = vector_literal(query)
            truth = set(await exact_top(conn, scope, literal))
            if not truth:
                continue
            for plan, limit in (("served", config.exact_scan_max_items), ("index_forced", 0)):
                found = await served_top(conn, scope, literal, config, limit)
                recalls[plan].append(len(truth & set(found)) / len(truth))
                await conn.rollback()
        for plan, values in recalls.items():
            if values:
                per_plan[plan].append(mean(values))
    return {
        "scopes": len(scopes), "queries_per_scope": len(queries),
        "scope_items_min_median_max": [min(sizes), sorted(sizes)[len(sizes) // 2], max(sizes)] if sizes else None,
        **{f"{plan}_recall@10_mean": round(mean(v), 3) for plan, v in per_plan.items() if v},
        **{f"{plan}_recall@10_worst_scope": round(min(v), 3) for plan, v in per_plan.items() if v},
    }


def sample_scopes(users: int, labelled: list[tuple[str, str, str | None]], n: int = 30, seed: int = 4,
                  user_name=lambda i: f"u{i:05d}") -> list[Scope]:
    """`n` synthetic users (with and without their family subject) and the labelled scopes."""
    rng = random.Random(seed)
    picked = [rng.randrange(users) for _ in range(n)] if users else []
    scopes = [Scope("tenant-a", user_name(u), f"family-{u // 5}" if i % 2 else None, "#recall", NO_SEQ)
              for i, u in enumerate(picked)]
    return scopes + [Scope(t, u, s, "#recall", NO_SEQ) for t, u, s in labelled]


__all__ = ["exact_top", "sample_scopes", "served_top", "vector_recall_per_scope"]
