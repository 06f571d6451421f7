"""Why a question's answer is missing from the context: pure functions of the benchmark's rows.

For each question the harness has the budget-sized context's score and one more context of
the same question with a large budget (every candidate above the threshold, best first, with
its tokens). The verdict, first that applies:

- `hit`: the budget-sized context holds >= 80 % of the answer's words;
- `not_in_memory`: neither derived memory (summaries, chunks, facts, topic summaries) nor
  the raw messages hold them: nothing to retrieve (typical of inference answers: "Likely no");
- `not_a_candidate`: memory holds them but the large-budget context does not: the searches
  do not find it, or its score stays under the threshold, or a snippet cut the words out;
- `cut_by_packing`: the best-first prefix of the large-budget context that holds the answer
  fits in twice the budget: ranked near the top, but longer lines ahead of it took the room;
- `ranked_out`: that prefix needs more than twice the budget: ranked too low.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

try:
    from . import ctx_scoring as S
except ImportError:  # loaded by file path
    import ctx_scoring as S

VERDICTS = ("hit", "not_in_memory", "not_a_candidate", "ranked_out", "cut_by_packing")


def covered(item: dict, seqs: Sequence[int], conversation_id: str) -> set[int]:
    """The evidence seqs an item's message range covers (facts carry none)."""
    span = item.get("message_range")
    if not span or item.get("conversation_id") not in (None, conversation_id) or span[0] is None:
        return set()
    start, end = span
    return {s for s in seqs if start <= s < (end if end is not None else start + 1)}


def diagnose(question, row: dict, wide: dict, budget: int, derived: float, raw: float,
             conversation_id: str | None = None) -> dict:
    retrieved = (wide or {}).get("retrieved") or {}
    items = retrieved.get("items") or []
    cid = conversation_id or question.qid.rsplit("-q", 1)[0]
    prefix_tokens, needed_tokens, needed_rank, lines = 0, None, None, []
    for rank, item in enumerate(items, 1):
        lines.append(item.get("line") or "")
        prefix_tokens += item.get("tokens") or 0
        if S.is_hit(S.score(question.answer, "\n".join(lines))):
            needed_tokens, needed_rank = prefix_tokens, rank
            break
    evidence = list(question.evidence)
    best_rank, tokens_before, found, spent = None, None, set(), 0
    for rank, item in enumerate(items, 1):
        hit = covered(item, evidence, cid)
        if hit and best_rank is None:
            best_rank, tokens_before = rank, spent
        found |= hit
        spent += item.get("tokens") or 0
    wide_score = S.score(question.answer, retrieved.get("text") or "")
    if S.is_hit(row["score"]):
        verdict = "hit"
    elif not S.is_hit(derived) and not S.is_hit(raw):
        verdict = "not_in_memory"
    elif needed_tokens is None:
        verdict = "not_a_candidate"
    elif needed_tokens <= 2 * budget:
        verdict = "cut_by_packing"
    else:
        verdict = "ranked_out"
    answering = Counter(i.get("kind") for i in items[:needed_rank]) if needed_rank else Counter()
    return {"qid": question.qid, "kind": question.kind, "question": question.question, "answer": question.answer,
            "verdict": verdict, "score": row["score"], "wide_score": round(wide_score, 3),
            "in_derived": round(derived, 3), "in_raw_log": round(raw, 3),
            "tokens_to_answer": needed_tokens, "rank_to_answer": needed_rank,
            "answer_kinds": dict(answering), "evidence": evidence,
            "evidence_found": round(len(found) / len(evidence), 3) if evidence else None,
            "evidence_first_rank": best_rank, "evidence_tokens_before": tokens_before,
            "wide_items": len(items), "wide_candidates": retrieved.get("candidates")}


def summarize(rows: Sequence[dict], kinds: Sequence[str]) -> dict:
    """Verdict counts per kind and overall."""
    out = {}
    for kind in (*kinds, "all"):
        chosen = [r for r in rows if kind == "all" or r["kind"] == kind]
        counts = Counter(r["verdict"] for r in chosen)
        out[kind] = {"n": len(chosen), **{v: counts.get(v, 0) for v in VERDICTS}}
    return out


def evidence_recall(rows: Sequence[dict], kinds: Sequence[str]) -> dict:
    """Mean share of a question's evidence messages covered by the large-budget context's items
    (messages and chunks by their ranges; facts name no range, so a fact-only answer reads 0)."""
    out = {}
    for kind in (*kinds, "all"):
        values = [r["evidence_found"] for r in rows if (kind == "all" or r["kind"] == kind)
                  and r["evidence_found"] is not None]
        out[kind] = round(sum(values) / len(values), 3) if values else None
    return out


def table(result: dict, budget: int) -> str:
    kinds = ("single", "multi", "temporal", "inference")
    rows = [("this project, `retrieved`, first turn", result["first_turn"])]
    if result.get("sequential"):
        rows.append(("this project, `retrieved`, in sequence", result["sequential"]))
    rows += [(f"BM25 over raw messages, {budget} tokens (README's reference)", result[f"bm25_undated_{budget}"]),
             ("BM25 over raw messages, 2,000 tokens (README's reference)", result["bm25_undated_2000"]),
             (f"BM25 over raw messages, each line dated, {budget} tokens", result[f"bm25_{budget}"]),
             ("BM25 over raw messages, each line dated, 2,000 tokens", result["bm25_2000"]),
             ("answer anywhere in derived memory", result["ceiling_derived"]),
             ("answer anywhere in the raw log", result["ceiling_raw_log"])]
    lines = ["| context | answer words | hit | " + " | ".join(f"{k} hit" for k in kinds) + " |",
             "|" + "---|" * (3 + len(kinds))]
    for name, summary in rows:
        cells = [f"{summary['all']['score']:.3f}", f"{summary['all']['hit']:.3f}"]
        cells += [f"{summary[k]['hit']:.3f}" if summary[k]["hit"] is not None else "" for k in kinds]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def diagnosis_table(result: dict) -> str:
    kinds = ("single", "multi", "temporal", "inference", "all")
    diag, recall = result["diagnosis"], result["evidence_recall"]
    lines = ["| first turn | " + " | ".join(kinds) + " |", "|" + "---|" * (1 + len(kinds))]
    for verdict in VERDICTS:
        lines.append(f"| {verdict} | " + " | ".join(str(diag[k][verdict]) for k in kinds) + " |")
    lines.append("| evidence among large-budget items | " + " | ".join(
        f"{recall[k]:.2f}" if recall[k] is not None else "" for k in kinds) + " |")
    return "\n".join(lines)


def topic_text(topic: dict | None) -> tuple[str, list[str]]:
    """The active topic section as a chat service would prepend it: (title + summary + its
    recent messages, the restored archive's messages)."""
    if not topic or "error" in topic:
        return "", []
    head = [topic.get("title") or "", topic.get("summary") or ""]
    head += [m.get("content") or "" for m in topic.get("messages") or []]
    return "\n".join(t for t in head if t), [m.get("content") or "" for m in topic.get("restored_messages") or []]


def other_sections(body: dict) -> dict:
    """The context's sections beside `retrieved` (the answer-word score reads `retrieved` only):
    their texts, for the budget breakdown (bench/locomo_budget.py): the summary, the verbatim gap
    messages, the active topic (summary and recent messages) and its restored archive."""
    topic, restored = topic_text(body.get("active_topic"))
    return {"summary": ((body.get("summary") or {}).get("text") or ""),
            "gap": "\n".join(m.get("content") or "" for m in body.get("messages") or []),
            "topic": topic, "topic_restored": restored,
            "topic_restored_truncated": bool((body.get("active_topic") or {}).get("restored_truncated"))}
