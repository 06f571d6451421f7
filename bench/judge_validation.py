"""Does the judge's label-free signal order generations as the labelled score does? (issue 26)

    python -m bench.judge_validation [--source longconv|locomo] [--conversations N] [--quick]
                                     [--turns 30] [--horizon 20] [--systems window,facts] [--out FILE]

Builds one deployment from the conversations (the worker with the offline summarizer and
extractor, as shipped), waits until memory has settled, then reads it with several read-side
settings of known different strength (runtime/judge.py's ReaderB: as of each turn, nothing
written): budget 2000, the default 500, 50, and nothing retrieved with no verbatim gap. For
each: the label-free foresight (domain/judge.py) at `--turns` turns per conversation, and the
labelled score of the questions at the end of each conversation (answer words in the retrieved
text, as bench/context_quality.py; and in the whole context). Prints both per setting, and
whether they order the settings the same way.

`--source locomo` reads `../shared/eval-data/locomo-dev.json` (or `$MEMORY_EVAL_DATA`) at run time;
it is never copied into the repository (CC BY-NC).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from statistics import mean

from bench import common, context_quality as CQ, longconv
from domain import judge as J

CATEGORIES = {1: "multi", 2: "temporal", 3: "inference", 4: "single"}


@dataclass(frozen=True)
class Setting:
    name: str
    budget: int
    env: dict


SETTINGS = [
    Setting("budget 2000", 2000, {}),
    Setting("default (500)", 500, {}),
    Setting("budget 50", 50, {}),
    Setting("nothing retrieved, no gap", 500, {"MEMORY_RETRIEVAL__THRESHOLD": "5",
                                               "MEMORY_WINDOW__CONTEXT_MAX_GAP_MESSAGES": "0"}),
]


def locomo(path: Path) -> list[longconv.Conversation]:
    """The dev set as the acceptance measurement ingests it (README of eval-data)."""
    out = []
    for sample in json.loads(path.read_text()):
        conv = sample["conversation"]
        a, b = conv["speaker_a"], conv["speaker_b"]
        messages: list[longconv.Message] = []
        numbers = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))
        for n in numbers:
            started = datetime.strptime(conv[f"session_{n}_date_time"], "%I:%M %p on %d %B, %Y").replace(
                tzinfo=timezone.utc)
            for i, turn in enumerate(conv[f"session_{n}"]):
                text = turn["text"] + (f" [image: {turn['blip_caption']}]" if turn.get("img_url") else "")
                messages.append(longconv.Message(len(messages), turn["speaker"],
                                                 "user" if turn["speaker"] == a else "assistant", text,
                                                 started + timedelta(seconds=i), n))
        questions = [longconv.Question(f"{sample['sample_id']}-q{i}", CATEGORIES[q["category"]], q["question"],
                                       str(q["answer"]), ())
                     for i, q in enumerate(sample["qa"]) if q.get("category") in CATEGORIES and "answer" in q]
        out.append(longconv.Conversation(sample["sample_id"], a.lower(), b, messages, questions))
    return out


def turns_of(conv: longconv.Conversation, per_conversation: int) -> list[int]:
    """User messages spread over the conversation (after its first tenth): the judged turns."""
    users = [m.seq for m in conv.messages if m.role == "user" and m.seq >= len(conv.messages) // 10]
    step = max(1, len(users) // per_conversation)
    return users[::step][:per_conversation]


async def measure(settings, conversations, args) -> dict:
    from api.judging import embedder_of
    from api import judge as R
    from runtime.judge import settings_with

    results = {}
    async with await R.connect(settings, settings.generation) as conn:
        for setting in SETTINGS:
            env = {k: v for k, v in common.child_env(settings).items() if k.startswith("MEMORY_")}
            read = settings_with(settings, {**env, **setting.env})
            reader = R.ReaderB(conn, read, embedder_of(read))
            foresight, named, labelled, whole, reads, started = [], [], [], [], 0, time.monotonic()
            for conv in conversations:
                user = CQ.user_of(conv) if args.source == "longconv" else conv.user
                for seq in turns_of(conv, args.turns):
                    query = conv.messages[seq].content
                    side = await reader.side(_turn(conv, user, seq, query, setting.budget))
                    following = "\n".join(m.content for m in conv.messages[seq + 1:seq + 1 + args.horizon])
                    f = J.foresight(side.text, following, query)
                    reads += 1
                    if f.score is not None:
                        foresight.append(f.score)
                    if f.named_score is not None:
                        named.append(f.named_score)
                for q in conv.questions[:args.questions]:
                    side = await reader.side(_turn(conv, user, conv.end_seq, q.question, setting.budget))
                    retrieved = "\n".join(side.texts_by_kind.get(k, "") for k in ("fact", "chunk", "message"))
                    labelled.append(J.answer_score(q.answer, retrieved))
                    whole.append(J.answer_score(q.answer, side.text))
                    reads += 1
            seconds = time.monotonic() - started
            results[setting.name] = {
                "foresight": round(mean(foresight), 4), "named": round(mean(named), 4) if named else None,
                "turns": len(foresight), "labelled_retrieved": round(mean(labelled), 4),
                "hits_retrieved": round(sum(s >= J.HIT for s in labelled) / len(labelled), 4),
                "labelled_whole": round(mean(whole), 4), "questions": len(labelled),
                "reads": reads, "seconds": round(seconds, 1), "ms_per_read": round(1000 * seconds / reads, 1)}
            print(f"  {setting.name}: {results[setting.name]}", flush=True)
    return results


def _turn(conv, user: str, seq: int, query: str, budget: int) -> dict:
    return {"tenant_id": CQ.TENANT, "conversation_id": conv.conversation_id, "user_id": user, "subject_id": None,
            "turn_seq": seq, "served_at": datetime.now(timezone.utc),
            "payload": {"before_seq": seq, "query": query, "budget_tokens": budget}}


def agreement(results: dict) -> dict:
    """Pairs of settings the two scores order the same way (of all pairs)."""
    names = list(results)
    same = total = 0
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            dl = results[x]["labelled_whole"] - results[y]["labelled_whole"]
            df = results[x]["foresight"] - results[y]["foresight"]
            total += 1
            same += (dl > 0) == (df > 0) if dl and df else dl == df
    return {"pairs": total, "same_order": same}


async def run(args) -> dict:
    if args.source == "locomo":
        # ../shared/eval-data beside the repository (a worktree: set MEMORY_EVAL_DATA)
        path = Path(os.environ.get("MEMORY_EVAL_DATA", Path(__file__).resolve().parents[1].parent / "shared"
                                   / "eval-data"))
        if path.is_dir():
            path = path / "locomo-dev.json"
        conversations = locomo(path)
    else:
        shape = dict(sessions=(15, 18), turns=(14, 22)) if args.quick else dict(sessions=(15, 30), turns=(14, 30))
        conversations = longconv.generate(args.seed, args.conversations, **shape)
    total = sum(len(c.messages) for c in conversations)
    print(f"{args.source}: {len(conversations)} conversations, {total} messages,"
          f" {sum(len(c.questions) for c in conversations)} questions", flush=True)
    settings = common.bench_settings("judgeval")
    await common.prepare(settings)
    env = {"MEMORY_SYSTEMS": json.dumps(args.systems.split(","))}
    result = {"machine": common.machine(), "command": " ".join(sys.argv), "source": args.source,
              "messages": total, "systems": args.systems}
    try:
        async with common.worker(settings, extra_env=env):
            if args.source == "locomo":
                await ingest_locomo(settings, conversations)
            else:
                await CQ.ingest(settings, conversations)
            async with CQ.Db(settings) as db:
                result["settle"] = await CQ.settle(db, settings, total, args.settle_timeout, 20.0)
        result["settings"] = await measure(settings, conversations, args)
        result["agreement"] = agreement(result["settings"])
    finally:
        await CQ.drop_everything(settings)
    return result


async def ingest_locomo(settings, conversations) -> None:
    from memory_agent.client import MemoryClient

    sent = []
    async with MemoryClient(settings) as client:
        for conv in conversations:
            for m in conv.messages:
                sent.append(await client.enqueue(client.message_event(
                    tenant_id=CQ.TENANT, conversation_id=conv.conversation_id, user_id=conv.user, seq=m.seq,
                    role=m.role, content=m.content, occurred_at=m.occurred_at)))
        await asyncio.gather(*sent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", choices=("longconv", "locomo"), default="longconv")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--conversations", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--turns", type=int, default=30, help="judged turns per conversation")
    parser.add_argument("--horizon", type=int, default=20, help="messages after a turn that count as what came next")
    parser.add_argument("--questions", type=int, default=None, help="questions per conversation (default: all)")
    parser.add_argument("--systems", default="window,facts")
    parser.add_argument("--settle-timeout", type=float, default=1200.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    print(f"machine: {common.machine()}\ncommand: {' '.join(sys.argv)}", flush=True)
    result = asyncio.run(run(args))
    print(f"\n| setting | foresight | named | labelled (retrieved) | hits | labelled (whole context) | ms/read |")
    print("|---|---|---|---|---|---|---|")
    for name, r in result["settings"].items():
        print(f"| {name} | {r['foresight']:.3f} | {r['named'] if r['named'] is None else format(r['named'], '.3f')}"
              f" | {r['labelled_retrieved']:.3f} | {r['hits_retrieved']:.3f} | {r['labelled_whole']:.3f}"
              f" | {r['ms_per_read']} |")
    print(f"agreement with the labelled score (whole context), pairs of settings: {result['agreement']}")
    common.save_json(result, args.out, f"judge-validation-{args.source}-{int(time.time())}.json")


if __name__ == "__main__":
    main()
