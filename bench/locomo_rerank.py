"""Re-rank and re-pack the large-budget contexts a `bench/locomo.py --dump-wide` run wrote,
offline: a quick look at a ranking or packing rule before it is measured through the API.

    python bench/locomo_rerank.py /tmp/wide.jsonl [--budget 500]

Each line of the dump is one question's `retrieved` section asked with a large budget: every
candidate above the threshold, best first, with its score breakdown and its line's tokens.
Each variant below orders those items and packs them greedily into the budget (a line that
does not fit is skipped, smaller ones after it are still tried), then the answer-word score of
bench/ctx_scoring.py is taken. `seed001` (today's order) is the reference; it differs a little
from the API's own 500-token answer because the API searches fewer candidates per table at a
small budget. Only a lead: a rule is kept when the API run on the same memory, and the
generator's set, both say so (docs/evaluation.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"locomo_rerank_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


S = _load("ctx_scoring")
KINDS = ("single", "multi", "temporal", "inference")

Item = dict
Order = Callable[[list[Item]], list[Item]]


def by(key: Callable[[Item], float]) -> Order:
    return lambda items: sorted(items, key=lambda i: -key(i))


def seed001(item: Item) -> float:
    return item["score"]["final"]


def pack(items: list[Item], budget: int, duplicate: Callable[[Item, list[Item]], bool] | None = None) -> str:
    chosen, used = [], 0
    for item in items:
        if duplicate is not None and duplicate(item, chosen):
            continue
        if used + item["tokens"] <= budget:
            chosen.append(item)
            used += item["tokens"]
    return "\n".join(i["line"] for i in chosen)


def evaluate(rows: list[dict], order: Order, budget: int, duplicate=None) -> dict:
    scored = []
    for row in rows:
        items = [{**i, "_question": row.get("question") or ""}
                 for i in ((row.get("retrieved") or {}).get("items")) or []]
        text = pack(order(items), budget, duplicate)
        scored.append({"kind": row["kind"], "score": S.score(row["answer"], text)})
    return S.summarize(scored, KINDS)


def line(name: str, summary: dict) -> str:
    cells = [f"{summary['all']['score']:.3f}", f"{summary['all']['hit']:.3f}"]
    cells += [f"{summary[k]['hit']:.3f}" if summary[k]["hit"] is not None else "" for k in KINDS]
    return f"| {name} | " + " | ".join(cells) + " |"


def fused(items: list[Item], k: int = 60) -> list[Item]:
    """Reciprocal rank fusion of the cosine order and the keyword order (weights kept)."""
    def ranks(key):
        order = sorted(range(len(items)), key=lambda i: -key(items[i]))
        return {i: r for r, i in enumerate(order, 1)}
    cos, kw = ranks(lambda i: i["score"]["cosine"]), ranks(lambda i: i["score"]["keyword_score"])
    value = {i: (1 / (k + cos[i]) + (1 / (k + kw[i]) if items[i]["score"]["keyword_score"] > 0 else 0))
             * items[i]["score"]["importance_weight"] * items[i]["score"]["recency_weight"] for i in range(len(items))}
    return [items[i] for i in sorted(value, key=lambda i: -value[i])]


def diverse(penalty: float) -> Order:
    """Greedy: each pick's score is multiplied by `penalty` for every item already picked from
    the same day (sessions are days here), so a multi-session answer gets its other sessions in."""
    def order(items: list[Item]) -> list[Item]:
        left, out, per_day = list(items), [], {}
        while left:
            best = max(left, key=lambda i: seed001(i) * penalty ** per_day.get(_day(i), 0))
            left.remove(best)
            out.append(best)
            per_day[_day(best)] = per_day.get(_day(best), 0) + 1
        return out
    return order


def _day(item: Item) -> str:
    return str(item.get("occurred_start") or "")[:10]


def duplicate_rule(overlap: float):
    """retrieval/packing.py's information words (dates whole), first-come: an item covered by
    one already chosen is skipped (the API also takes out a chosen item a fuller one covers)."""
    from datetime import datetime

    from retrieval.packing import covered_by, day, information

    def info(item: Item) -> frozenset[str]:
        dates = [day(datetime.fromisoformat(str(item[k])).timestamp()) for k in ("occurred_start", "occurred_end")
                 if item.get(k)]
        return information(item["content"], dates)

    def duplicate(item: Item, chosen: list[Item]) -> bool:
        mine = info(item)
        return any(covered_by(mine, info(other), overlap) for other in chosen)
    return duplicate


def keyword_weight(weight: float, base: float = 0.5) -> Callable[[Item], float]:
    """seed001's final with the hybrid's keyword weight changed from `base` to `weight`."""
    def value(item: Item) -> float:
        sc = item["score"]
        old = sc["cosine"] + base * sc["keyword_score"]
        return sc["final"] * (sc["cosine"] + weight * sc["keyword_score"]) / old if old > 0 else 0.0
    return value


_COUNTS: dict[str, int] = {}


def recount(line: str) -> int:
    from retrieval.tokens import count_tokens

    if line not in _COUNTS:
        _COUNTS[line] = count_tokens(line)
    return _COUNTS[line]


def reply_cut(chars: int) -> Order:
    """seed001's order, each question's reply (after " → ") cut to `chars` characters at a
    word (0: left out), its line counted again."""
    def cut(item: Item) -> Item:
        head, arrow, reply = item["line"].partition(" → ")
        if not arrow or len(reply) <= chars:
            return item
        speaker, colon, text = reply.partition(": ")
        if not colon or " " in speaker:
            speaker, colon, text = "", "", reply
        short = text[: max(0, chars - len(speaker) - 2)].rsplit(" ", 1)[0] + "…" if chars else ""
        line = head + (arrow + speaker + colon + short if chars else "")
        return {**item, "line": line, "tokens": recount(line)}
    return lambda items: [cut(i) for i in by(seed001)(items)]


def weights(importance_power: float = 0.5, stale_weight: float = 0.8, keyword: float = 0.5,
            base_power: float = 0.5, base_stale: float = 0.8) -> Callable[[Item], float]:
    """seed001's final with other settings than the run's (importance_power `base_power`,
    stale_weight `base_stale`, keyword_weight 0.5): the importance weight raised to the new
    power's share of the old, the recency weight's fall scaled to the new stale weight."""
    kw = keyword_weight(keyword)

    def value(item: Item) -> float:
        sc = item["score"]
        iw, rw = sc["importance_weight"], sc["recency_weight"]
        if iw <= 0 or rw <= 0:
            return 0.0
        fall = (1 - rw) / (1 - base_stale) if base_stale < 1 else 0.0
        new_rw = 1 - fall * (1 - stale_weight)
        new_iw = iw ** (importance_power / base_power) if base_power > 0 else 1.0
        return kw(item) / (iw * rw) * new_iw * new_rw
    return value


def chunk_cut(chars: int) -> Order:
    """seed001's order, each chunk's summary cut to its best sentences (retrieval/snippets.py,
    as a long message is; the question's word stems standing in for the query's lexemes), its
    line counted again."""
    from domain.topics.restore import words_of
    from retrieval.snippets import snippet

    def cut(item: Item) -> Item:
        if item.get("kind") != "chunk":
            return item
        whole = " ".join((item.get("content") or "").split())
        short = snippet(whole, sorted(words_of(item["_question"])), chars)
        if short == whole or whole not in item["line"]:
            return item
        line = item["line"].replace(whole, short)
        return {**item, "line": line, "tokens": recount(line)}
    return lambda items: [cut(i) for i in by(seed001)(items)]


def lexeme_counts(rows: list[dict], dsn: str) -> dict[str, int]:
    """Each item's distinct English lexemes (PostgreSQL's to_tsvector, as memory_items keeps
    them: a message without the reply its line carries), by kind and id. One statement."""
    import psycopg

    items = {f"{i['kind']}:{i['id']}": (i.get("content") or "").split(" → ")[0]
             for row in rows for i in ((row.get("retrieved") or {}).get("items")) or []}
    with psycopg.connect(dsn) as conn:
        cur = conn.execute("SELECT k, length(to_tsvector('english', t)) FROM unnest(%s::text[], %s::text[]) AS u(k, t)",
                           (list(items), list(items.values())))
        return dict(cur.fetchall())


def length_weighted(counts: dict[str, int], typical: int, power: float) -> Callable[[Item], float]:
    """The run's final with the keyword coverage of an item longer than `typical` lexemes scaled
    by (typical / lexemes) ** power (retrieval.scoring.length_weight), for a run made without it."""
    def value(item: Item) -> float:
        sc = item["score"]
        plain = sc["cosine"] + sc["keyword_score"]
        if plain <= 0:
            return 0.0
        lexemes = counts.get(f"{item['kind']}:{item['id']}", 0)
        weight = (typical / lexemes) ** power if typical and lexemes > typical else 1.0
        return sc["final"] * (sc["cosine"] + sc["keyword_score"] * weight) / plain
    return value


def variants() -> dict[str, Order]:
    sc = lambda i: i["score"]  # noqa: E731
    return {
        "seed001": by(seed001),
        "no recency": by(lambda i: sc(i)["similarity"] * sc(i)["importance_weight"]),
        "no importance": by(lambda i: sc(i)["similarity"] * sc(i)["recency_weight"]),
        "similarity alone": by(lambda i: sc(i)["similarity"]),
        "importance sqrt": by(lambda i: sc(i)["similarity"] * sc(i)["importance_weight"] ** 0.5 * sc(i)["recency_weight"]),
        "recency sqrt": by(lambda i: sc(i)["similarity"] * sc(i)["importance_weight"] * sc(i)["recency_weight"] ** 0.5),
        "both sqrt": by(lambda i: sc(i)["similarity"] * (sc(i)["importance_weight"] * sc(i)["recency_weight"]) ** 0.5),
        "rrf x weights": fused,
        "per token": by(lambda i: seed001(i) / max(i["tokens"], 8) ** 0.5),
        "same-day penalty 0.8": diverse(0.8),
        "same-day penalty 0.6": diverse(0.6),
        "keyword weight 1.0": by(keyword_weight(1.0)),
        "keyword weight 0.25": by(keyword_weight(0.25)),
        "replies cut to 120 chars": reply_cut(120),
        "replies left out": reply_cut(0),
        **{f"chunks cut to {n} chars": chunk_cut(n) for n in (300, 400, 600)},
        **{f"importance_power {p}, stale_weight {w}, keyword_weight {k}": by(weights(p, w, k))
           for p in (0.5, 0.25, 0) for w in (0.8, 0.9, 1.0) for k in (0.5, 1.0)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dump", type=Path)
    parser.add_argument("--budget", type=int, default=500)
    parser.add_argument("--only", help="only the variants whose name contains this")
    parser.add_argument("--dsn", help="a PostgreSQL to count each item's lexemes with: adds the length-weight grid"
                                      " (for a dump made with keyword_length_lexemes 0, e.g. main before it)")
    args = parser.parse_args()
    rows = [json.loads(text) for text in args.dump.read_text().splitlines() if text.strip()]
    extra: dict[str, Order] = {}
    if args.dsn:
        counts = lexeme_counts(rows, args.dsn)
        extra = {f"length weight {typical}, {power}": by(length_weighted(counts, typical, power))
                 for typical, power in ((20, 0.5), (25, 0.5), (30, 0.5), (30, 1.0), (35, 0.75), (40, 0.5), (50, 1.0))}
    print("| order | answer words | hit | " + " | ".join(f"{k} hit" for k in KINDS) + " |")
    print("|" + "---|" * (3 + len(KINDS)))
    for name, order in {**variants(), **extra}.items():
        if args.only is None or args.only in name or name == "seed001":
            print(line(name, evaluate(rows, order, args.budget)), flush=True)
    for overlap in (0.8, 0.9) if args.only is None else ():
        print(line(f"seed001 + duplicate rule {overlap}", evaluate(rows, by(seed001), args.budget,
                                                                  duplicate_rule(overlap))))


if __name__ == "__main__":
    main()
