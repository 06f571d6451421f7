"""What takes the budget: a breakdown of the packed `retrieved` section and of the context's
other sections, from a `bench/locomo.py --dump-wide` file and the run's JSON (its verdicts).

    python bench/locomo_budget.py /tmp/wide.jsonl /tmp/run.json [--budget 500]

The 500-token pack is re-made from each question's large-budget items in the API's order
(greedy, as bench/locomo_rerank.py packs; its seed001 row reproduces the API). Per verdict
group (ranked_out, cut_by_packing, hit, all) it reports the tokens by kind of line (fact,
chunk, message; a message's reply after "→"; facts by category), the tokens spent on a line
whose information another packed line already holds (retrieval.packing's information words,
80 %), and the rank and kind of the line that completes the answer. Then the sections beside
`retrieved` (the answer-word score reads `retrieved` only): the summary, the verbatim gap, the
active topic and its restored archive, each with its tokens and its own share of the answers
(answer words found in it alone): its worth per token. Numbers only; the dump holds the set's
text and stays outside the repository.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Callable, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"locomo_budget_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


S = _load("ctx_scoring")
GROUPS = ("ranked_out", "cut_by_packing", "hit", "all")
REPLY = " → "


def packed(items: Sequence[dict], budget: int) -> list[dict]:
    """The API's greedy pack of items already in its order: a line that does not fit is
    skipped and smaller ones after it are still tried."""
    chosen, used = [], 0
    for item in items:
        if used + item["tokens"] <= budget:
            chosen.append(item)
            used += item["tokens"]
    return chosen


def info_of(item: dict) -> frozenset[str]:
    from retrieval.packing import day, information

    dates = [day(datetime.fromisoformat(str(item[k])).timestamp()) for k in ("occurred_start", "occurred_end")
             if item.get(k)]
    return information(item.get("content") or "", dates)


def repeated(chosen: Sequence[dict], overlap: float = 0.8) -> list[bool]:
    """For each packed line: is its information (>= overlap of its words, its dates all) held by
    another packed line? Of two lines that hold each other, only the later counts."""
    from retrieval.packing import covered_by

    infos = [info_of(i) for i in chosen]
    out = []
    for n, mine in enumerate(infos):
        out.append(any(covered_by(mine, other, overlap) and (m < n or not covered_by(other, mine, overlap))
                       for m, other in enumerate(infos) if m != n))
    return out


def line_parts(item: dict, count: Callable[[str], int]) -> dict[str, int]:
    """A line's tokens by what they are: a message's reply after "→" apart from the message."""
    kind = item.get("kind") or "?"
    line = item.get("line") or ""
    if kind == "message" and REPLY in line:
        head, _, reply = line.partition(REPLY)
        reply_tokens = count(reply)
        return {"message": item["tokens"] - reply_tokens, "message reply": reply_tokens}
    if kind == "fact":
        return {f"fact [{item.get('category') or '-'}]": item["tokens"]}
    return {kind: item["tokens"]}


def breakdown(rows: Sequence[dict], verdicts: dict[str, str], budget: int,
              count: Callable[[str], int]) -> dict[str, dict]:
    """Per verdict group: questions, mean tokens per question by part, mean lines by kind, mean
    tokens per line by kind, repeated tokens, and where the answer's completing line ranks."""
    out: dict[str, dict] = {}
    for group in GROUPS:
        chosen_rows = [r for r in rows if group == "all" or verdicts.get(r["qid"]) == group]
        n = len(chosen_rows) or 1
        tokens, lines, kind_tokens = Counter(), Counter(), Counter()
        repeat_tokens, repeat_kinds, answer_kind, answer_rank = 0, Counter(), Counter(), []
        for row in chosen_rows:
            items = list(((row.get("retrieved") or {}).get("items")) or [])
            chosen = packed(items, budget)
            for item, again in zip(chosen, repeated(chosen)):
                for part, value in line_parts(item, count).items():
                    tokens[part] += value
                lines[item.get("kind")] += 1
                kind_tokens[item.get("kind")] += item["tokens"]
                if again:
                    repeat_tokens += item["tokens"]
                    repeat_kinds[item.get("kind")] += item["tokens"]
            text = []
            for rank, item in enumerate(items, 1):
                text.append(item.get("line") or "")
                if S.is_hit(S.score(row["answer"], "\n".join(text))):
                    answer_kind[item.get("kind")] += 1
                    answer_rank.append(rank)
                    break
        answer_rank.sort()
        out[group] = {
            "questions": len(chosen_rows),
            "tokens": {k: round(v / n, 1) for k, v in tokens.most_common()},
            "lines": {k: round(v / n, 2) for k, v in lines.most_common()},
            "tokens_per_line": {k: round(kind_tokens[k] / lines[k], 1) for k in lines},
            "repeated_tokens": round(repeat_tokens / n, 1),
            "repeated_by_kind": {k: round(v / n, 1) for k, v in repeat_kinds.most_common()},
            "answer_line_kind": dict(answer_kind),
            "answer_rank_median": answer_rank[len(answer_rank) // 2] if answer_rank else None,
        }
    return out


def restored_list(row: dict) -> list[str]:
    value = (row.get("sections") or {}).get("topic_restored") or []
    return value.split("\n") if isinstance(value, str) else list(value)


def sections(rows: Sequence[dict], count: Callable[[str], int], questions: dict[str, str] | None = None,
             restore_bounds: Sequence[int] = (150, 300)) -> dict[str, dict]:
    """Each section beside `retrieved`: mean tokens, its own answer words and hits, and answer
    words per 100 tokens (its worth per token); then the whole topic section (head and restored
    archive) as shown, and with its archive cut to each of `restore_bounds` tokens by
    domain/topics/restore.select (the question as the current message)."""
    from domain.topics.restore import select

    def measure(texts: Sequence[tuple[str, str]]) -> dict:
        scores = [S.score(answer, text) if text else 0.0 for text, answer in texts]
        tokens = [count(text) if text else 0 for text, _ in texts]
        n = len(texts) or 1
        mean_tokens, words = sum(tokens) / n, sum(scores) / n
        return {"tokens": round(mean_tokens, 1), "answer_words": round(words, 3),
                "hits": round(sum(S.is_hit(s) for s in scores) / n, 3),
                "words_per_100_tokens": round(100 * words / mean_tokens, 3) if mean_tokens else None,
                "shown": round(sum(1 for t in tokens if t) / n, 3)}

    out = {name: measure([((r.get("sections") or {}).get(name) or "", r["answer"]) for r in rows])
           for name in ("summary", "gap", "topic")}
    out["topic_restored"] = measure([("\n".join(restored_list(r)), r["answer"]) for r in rows])
    head = [(r.get("sections") or {}).get("topic") or "" for r in rows]
    out["topic_whole"] = measure([(h + "\n" + "\n".join(restored_list(r)), r["answer"]) for h, r in zip(head, rows)])
    for bound in restore_bounds:
        cut = [select(restored_list(r), (questions or {}).get(r["qid"]) or r.get("question"), bound, count,
                      content=lambda m: m) for r in rows]
        out[f"topic_whole_restored_{bound}"] = measure([(h + "\n" + "\n".join(c), r["answer"])
                                                        for h, c, r in zip(head, cut, rows)])
    out["topic_restored_truncated"] = round(sum(bool((r.get("sections") or {}).get("topic_restored_truncated"))
                                                for r in rows) / (len(rows) or 1), 3)
    return out


def main() -> None:
    from retrieval.tokens import count_tokens

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dump", type=Path)
    parser.add_argument("run", type=Path, help="the run's JSON (bench/locomo.py --out), for the verdicts")
    parser.add_argument("--budget", type=int, default=500)
    args = parser.parse_args()
    rows = [json.loads(text) for text in args.dump.read_text().splitlines() if text.strip()]
    run = json.loads(args.run.read_text())
    diagnosed = (run.get("per_question") or {}).get("diagnosis") or []
    verdicts = {d["qid"]: d["verdict"] for d in diagnosed}
    questions = {d["qid"]: d["question"] for d in diagnosed}
    cache: dict[str, int] = {}

    def count(text: str) -> int:
        if text not in cache:
            cache[text] = count_tokens(text)
        return cache[text]

    result = {"retrieved": breakdown(rows, verdicts, args.budget, count), "sections": sections(rows, count, questions)}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
