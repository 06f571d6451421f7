"""Reporting of the context-quality benchmark (bench/context_quality.py): pure functions of its rows."""

from __future__ import annotations

from collections import Counter

try:
    from . import ctx_scoring as S
except ImportError:  # loaded by file path from bench/context_quality.py
    import ctx_scoring as S

KINDS = ("single", "multi", "temporal", "inference")
MAX_BYTES = 64 * 1024


def percentile(values: list[float], q: float) -> float:
    """Nearest rank, as bench/common.percentile."""
    if not values:
        return float("nan")
    return sorted(values)[min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))]


def ceilings(conv, memory: dict[str, str]) -> dict[str, list[dict]]:
    raw = "\n".join(S.render_line(m.content, m.occurred_at) for m in conv.messages)
    sources = {"derived": "\n".join(memory.values()), "raw_log": raw, **memory}
    return {name: [{"qid": q.qid, "kind": q.kind, "score": S.score(q.answer, text), "exact": S.exact(q.answer, text)}
                   for q in conv.questions]
            for name, text in sources.items()}


def response_stats(rows: list[dict]) -> dict:
    sizes = [r["bytes"] for r in rows]
    gaps = [r["gap"] for r in rows]
    ms = [r["ms"] for r in rows]
    return {"calls": len(rows), "status": dict(Counter(str(r["status"]) for r in rows)),
            "5xx": sum(r["status"] >= 500 for r in rows), "no_response": sum(r["status"] == 0 for r in rows),
            "bytes_max": max(sizes, default=0), "bytes_p50": percentile(sizes, 50),
            f"over_{MAX_BYTES // 1024}kb": sum(s > MAX_BYTES for s in sizes),
            "latency_ms_p50": round(percentile(ms, 50), 1), "latency_ms_p99": round(percentile(ms, 99), 1),
            "modes": dict(Counter(str(r["mode"]) for r in rows)),
            "gap_messages_p50": percentile(gaps, 50), "gap_messages_max": max(gaps, default=0),
            "tokens_used_p50": percentile([r["tokens_used"] or 0 for r in rows], 50),
            "retrieval_errors": sum(bool(r["error"]) for r in rows)}


def table(results: dict, budget: int) -> str:
    rows = [("this project, `retrieved`, first question", results["first_turn"]),
            ("this project, `retrieved`, questions one after another", results["sequential"]),
            (f"BM25 over raw messages into {budget} tokens", results[f"bm25_{budget}"])]
    if budget != 2000:
        rows.append(("BM25 over raw messages into 2,000 tokens", results["bm25_2000"]))
    rows += [("answer anywhere in derived memory (extraction ceiling)", results["ceiling_derived"]),
             ("answer anywhere in the raw log", results["ceiling_raw_log"])]
    head = ("| context | answer words found | hit | " + " | ".join(f"{k}: hit" for k in KINDS)
            + " | temporal: exact date |")
    lines = [head, "|" + "---|" * (4 + len(KINDS))]
    for name, summary in rows:
        cells = [f"{summary['all']['score']:.2f}", f"{summary['all']['hit']:.2f}"]
        cells += [f"{summary[k]['hit']:.2f}" if summary[k]["hit"] is not None else "" for k in KINDS]
        cells.append(f"{summary['temporal']['exact']:.2f}" if summary["temporal"].get("exact") is not None else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def aims(result: dict, budget: int) -> list[tuple[str, bool, str]]:
    """Issue 16's aims on this set: (aim, met, the measured value)."""
    first, seq, bm25 = result["first_turn"]["all"], result["sequential"]["all"], result[f"bm25_{budget}"]["all"]
    r = result["responses"]
    return [
        (f"retrieved finds >= 0.10 more answer words than BM25 at {budget} tokens",
         first["score"] >= bm25["score"] + 0.10, f"{first['score']:.2f} vs {bm25['score']:.2f}"),
        ("target: as much as BM25 at 2,000 tokens", first["score"] >= result["bm25_2000"]["all"]["score"],
         f"{first['score']:.2f} vs {result['bm25_2000']['all']['score']:.2f}"),
        ("sequential within 10% of first-turn", seq["score"] >= 0.9 * first["score"],
         f"{seq['score']:.2f} vs {first['score']:.2f}"),
        ("when-questions hit >= 0.25", result["first_turn"]["temporal"]["hit"] >= 0.25,
         f"{result['first_turn']['temporal']['hit']:.2f}"),
        ("no response over 64 KB", r["over_64kb"] == 0, f"max {r['bytes_max']} bytes"),
        ("no 5xx", r["5xx"] == 0 and not r.get("no_response"), f"{r['5xx']} (no response: {r.get('no_response', 0)})"),
        ("single-client p50 under 60 ms", r["latency_ms_p50"] < 60, f"{r['latency_ms_p50']} ms"),
    ]
