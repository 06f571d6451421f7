"""Plain-text rendering of what `memory-agent demo` observed: one section per memory system,
then the turn-start context. Pure functions over the API's JSON (and read-model rows)."""

from __future__ import annotations

import textwrap
from typing import Any

WIDTH = 100


def clip(text: str | None, limit: int = 160) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _wrap(text: str, indent: str = "      ") -> str:
    return textwrap.fill(" ".join(text.split()), WIDTH, initial_indent=indent, subsequent_indent=indent)


def heading(title: str) -> str:
    return f"\n== {title} " + "=" * max(3, WIDTH - len(title) - 4)


def render_summaries(rows: list[dict]) -> list[str]:
    lines = [heading("Summary chain (window system, seeds 000/002)")]
    if not rows:
        return lines + ["  (no summary yet)"]
    for r in rows:
        base = f"base #{r['base_memory_id']}" if r.get("base_memory_id") is not None else "no base"
        lines.append(f"  #{r['memory_id']:<3} seq {r['start_sequence']:>2}-{r['end_sequence']:<3} {r['status']:<10}"
                     f" {base:<9} {r.get('model', '')}")
    latest = [r for r in rows if r["status"] == "completed"]
    if latest:
        newest = max(latest, key=lambda r: r["end_sequence"])
        lines.append(f"  newest summary (#{newest['memory_id']}, seq {newest['start_sequence']}-{newest['end_sequence']}):")
        lines.append(_wrap(clip(newest.get("memory_text"), 600)))
    return lines


def render_facts(chunks: list[dict], facts: list[dict]) -> list[str]:
    lines = [heading("Chunks and facts (seeds 001/003)")]
    for c in chunks:
        lines.append(f"  chunk seq {c['message_range_start']}-{c['message_range_end'] - 1}: {clip(c['content'], 80)}")
    lines.append(f"  {len(facts)} fact(s) about {facts[0]['owner_user_id'] if facts else 'the user'}:")
    for f in facts:
        tags = f" tags: {', '.join(f['tags'])}" if f.get("tags") else ""
        lines.append(f"    - [{f['category']}] {clip(f['content'], 90)}")
        lines.append(f"        importance {f['importance']}, type {f['memory_type']}, {f['visibility']}{tags}")
    return lines


def render_topics(body: dict) -> list[str]:
    lines = [heading("Topics (seed 004)")]
    topics = body.get("topics") or []
    active = body.get("active_topic_id")
    for t in topics:
        mark = "*" if t["topic_id"] == active else " "
        lines.append(f"  {mark} {clip(t['topic_title'], 60):<60} {t['total_messages']:>3} msgs"
                     f"  {t['memory_type']:<10} priority {t['priority']:.2f}")
    if not topics:
        lines.append("  (no topic yet)")
    return lines


def _score(s: dict[str, Any]) -> str:
    """Seed 001's breakdown; parts the API does not send are left out (it may grow new ones)."""
    def num(key: str) -> str:
        value = s.get(key)
        return f"{value:.2f}" if isinstance(value, (int, float)) else "?"

    found = "+".join(s.get("found_by") or [])
    return (f"final {num('final')} = similarity {num('similarity')} (cosine {num('cosine')},"
            f" keyword {num('keyword_score')}) x importance {num('importance_weight')}"
            f" x recency {num('recency_weight')}" + (f"  [{found}]" if found else ""))


def render_context(context: dict, query: str) -> list[str]:
    lines = [heading("Turn-start context for the next message")]
    if not context:
        return lines + ["  (no context)"]
    lines.append(f"  next user message: {query!r}")
    w = context["watermark"]
    lines.append(f"  mode {context['mode']}; summary covers up to seq {w['summary_end_seq']},"
                 f" then {len(context['messages'])} message(s) verbatim up to seq {w['last_seq']}")
    summary = context.get("summary")
    if summary:
        lines.append(f"  summary #{summary['memory_id']} (seq {summary['start_seq']}-{summary['end_seq']}):"
                     f" {clip(summary['text'], 120)}")
    for m in context["messages"][-3:]:
        lines.append(f"    [{m['seq']}] {m['role']}: {clip(m['content'], 80)}")
    retrieved = context.get("retrieved") or {}
    items = retrieved.get("items") or []
    lines.append(f"  retrieved: {len(items)} of {retrieved.get('candidates', 0)} candidate(s),"
                 f" {retrieved.get('tokens_used', 0)}/{retrieved.get('budget_tokens', 0)} tokens,"
                 f" threshold {retrieved.get('threshold', 0)}")
    for item in items:
        lines.append(f"    {item.get('kind', 'item')}: {clip(item.get('line') or item.get('content'), 90)}")
        lines.append(f"        {_score(item.get('score') or {})}")
    surfaced = [e for e in retrieved.get("excluded") or [] if e.get("reason") == "already_surfaced" and e.get("score")]
    if surfaced:
        lines.append(f"  left out: {len(surfaced)} already surfaced earlier in this conversation (not repeated):")
    for e in surfaced[:3]:
        lines.append(f"    {e.get('kind', 'item')} {e.get('id', '')}: {_score(e['score'])}")
    if retrieved.get("error"):
        lines.append(f"    retrieval error: {retrieved['error']}")
    topic = context.get("active_topic")
    if topic:
        lines.append(f"  active topic: {clip(topic['title'], 70)} ({len(topic.get('messages') or [])} recent"
                     f" message(s){', summary up to seq ' + str(topic['summary_upto_seq']) if topic.get('summary') else ''})")
    else:
        lines.append("  active topic: none")
    return lines


def render_report(observed: Any, query: str, api_url: str, conversation: str, api_key: str) -> str:
    lines = [
        *render_summaries(observed.summaries),
        *render_facts(observed.chunks, observed.facts),
        *render_topics(observed.topics),
        *render_context(observed.context, query),
        "",
        "the whole context as JSON:",
        f"  curl -s '{api_url}/v1/conversations/{conversation}/context?query=which+database' -H 'X-API-Key: {api_key}'",
    ]
    return "\n".join(lines)
