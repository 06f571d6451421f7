"""What changed between two generations' read models: summaries, facts and chunks."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import psycopg
from psycopg import sql

# A summary made by another prompt version or model is a changed summary, even where its text
# happens to be the same.
_SUMMARIES = """SELECT tenant_id || '/' || conversation_id, start_sequence || '-' || end_sequence,
                       jsonb_build_array(memory_text, prompt_version, model)
                FROM {}.memory WHERE status = 'completed'"""
_CHUNKS = """SELECT tenant_id || '/' || conversation_id, message_range_start || '-' || message_range_end, content
             FROM {}.conversation_chunks"""
_FACTS = """SELECT fact_id, tenant_id || '/' || coalesce(subject_id, '-') || '/' || owner_user_id,
                   jsonb_build_object('content', content, 'category', category, 'importance', importance,
                                      'visibility', visibility, 'deleted', deleted_at IS NOT NULL,
                                      'superseded', valid_to IS NOT NULL)
            FROM {}.facts"""


def _rows(conn: psycopg.Connection, template: str, generation: str) -> list[tuple]:
    query = sql.SQL(template).format(sql.Identifier(f"gen_{generation}"))
    return conn.execute(query).fetchall()


def _compare(a: dict, b: dict) -> dict[str, Any]:
    return {
        "added": sorted(k for k in b if k not in a),
        "removed": sorted(k for k in a if k not in b),
        "changed": sorted(k for k in a if k in b and a[k] != b[k]),
    }


def _per_conversation(rows_a: list[tuple], rows_b: list[tuple]) -> dict[str, dict]:
    by_a, by_b = defaultdict(dict), defaultdict(dict)
    for conversation, window, text in rows_a:
        by_a[conversation][window] = text
    for conversation, window, text in rows_b:
        by_b[conversation][window] = text
    out = {}
    for conversation in sorted(set(by_a) | set(by_b)):
        change = _compare(by_a[conversation], by_b[conversation])
        if any(change.values()):
            out[conversation] = change
    return out


def diff_generations(conn: psycopg.Connection, a: str, b: str) -> dict[str, Any]:
    """Per conversation: summary and chunk windows added/removed/changed; facts by id."""
    summaries = _per_conversation(_rows(conn, _SUMMARIES, a), _rows(conn, _SUMMARIES, b))
    chunks = _per_conversation(_rows(conn, _CHUNKS, a), _rows(conn, _CHUNKS, b))
    facts_a = {fact_id: (scope, value) for fact_id, scope, value in _rows(conn, _FACTS, a)}
    facts_b = {fact_id: (scope, value) for fact_id, scope, value in _rows(conn, _FACTS, b)}
    facts = _compare(facts_a, facts_b)
    return {
        "a": a,
        "b": b,
        "summaries": summaries,
        "chunks": chunks,
        "facts": {kind: [{"fact_id": f, "scope": (facts_b.get(f) or facts_a[f])[0],
                          "a": facts_a.get(f, (None, None))[1], "b": facts_b.get(f, (None, None))[1]}
                         for f in ids] for kind, ids in facts.items()},
        "totals": {
            "conversations_with_summary_changes": len(summaries),
            # Which windows were summarized depends on when summaries were asked (the live chain
            # against a replay's stride, docs/summaries.md); a setting shows as a changed text.
            "conversations_with_summary_windows_only": sum(not c["changed"] for c in summaries.values()),
            "summary_texts_changed": sum(len(c["changed"]) for c in summaries.values()),
            "conversations_with_chunk_changes": len(chunks),
            **{f"facts_{kind}": len(ids) for kind, ids in facts.items()},
        },
        "empty": not summaries and not chunks and not any(facts.values()),
    }


def render_text(diff: dict[str, Any]) -> str:
    lines = [f"generations {diff['a']} -> {diff['b']}"]
    if diff["empty"]:
        return lines[0] + ": no differences"
    for title, per_conversation in (("summaries", diff["summaries"]), ("chunks", diff["chunks"])):
        for conversation, change in per_conversation.items():
            for kind, windows in change.items():
                if windows:
                    lines.append(f"  {conversation}: {title} {kind}: {', '.join(windows)}")
    for kind, facts in diff["facts"].items():
        for fact in facts:
            before = (fact["a"] or {}).get("content")
            after = (fact["b"] or {}).get("content")
            lines.append(f"  fact {kind} {fact['fact_id']} ({fact['scope']}): {before!r} -> {after!r}")
    windows_only = diff["totals"]["conversations_with_summary_windows_only"]
    if windows_only:
        lines.append(f"  {windows_only} conversation(s) differ only in which windows were summarized (when"
                     " summaries were asked), not in the text of a window both have")
    lines.append("  totals: " + ", ".join(f"{k}={v}" for k, v in diff["totals"].items()))
    return "\n".join(lines)
