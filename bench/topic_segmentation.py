"""Topic segmentation on long dated conversations, offline, in seconds (docs/topics.md,
"Topics on long conversations").

    python bench/topic_segmentation.py [--set dev|gen|labelled|all] [--generated 6] [--json OUT]
                                       [--threshold T] [--bonus B] [--session-gap-hours H]

Runs only the topic fold (the pure `domain.topics.fold.step`, no Kafka, no PostgreSQL) over
every message of

* `dev`: the LoCoMo development set (read at run time from `$MEMORY_LOCOMO_DEV` or
  `../shared/eval-data/locomo-dev.json`; CC BY-NC, never copied into the repository),
* `gen`: the project's generator of long dated conversations (`bench/longconv.py`, seed 1),
* `labelled`: the two labelled multi-subject chats of `bench/topic_threshold_bench.py`
  (topics made / messages in their subject's topic),

with the shipped offline embedder (all-MiniLM-L6-v2, local ONNX, the graph of
`embedding.integer_matmul`; vectors cached per graph in `/tmp/memory-agent-bench/topic-seg-vectors.npz`,
`topic-seg-vectors+int2.npz` for the integer one, so a rerun takes seconds), user messages
embedded as the topic slice embeds them (the whole content, "Name: " prefix included).
Compactions are answered at once by the offline extractive summarizer, as on a stack without
an LLM; a restored topic shows its archive (the last `restore_max_messages`), as the API does.

Per conversation: topics made, messages per topic (median, largest share), switches of the
active topic and how they line up with sessions (share of switches made by a session's first
user message; share of sessions that open with a switch); and the topic section at the end
of the conversation, where every question is asked: its tokens, and its own share of the
answers (answer words found in the section alone, scored as bench/ctx_scoring.py scores the
retrieved section), plus how often the evidence is in the active topic at all; and what the
section would hold if it showed the topic each question matches instead (seed 004's QA flow
matches the question first; read-only here: "question's topic").
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import platform
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import ctx_scoring as S  # noqa: E402
from bench import locomo_data, longconv  # noqa: E402
from core.llm.port import ChatMessage  # noqa: E402
from core.settings import Settings  # noqa: E402
from domain.extractive import ExtractiveSummarizer  # noqa: E402
from domain.topics.decay import TopicConfig  # noqa: E402
from domain.topics.fold import background_of, best_match, step, unit_vector  # noqa: E402
from domain.topics.protocol import (  # noqa: E402
    ArchiveRestoreRequested,
    AssistantMessage,
    CompactionDone,
    CompactionRequested,
    MessageAssigned,
    TopicActivated,
    TopicCreated,
    UserMessage,
)
from domain.topics.state import TopicsState  # noqa: E402
from retrieval.tokens import count_tokens  # noqa: E402

CACHE = Path("/tmp/memory-agent-bench/topic-seg-vectors.npz")


class Vectors:
    """The offline embedder's vectors by text, cached on disk between runs (a file per graph)."""

    def __init__(self, integer_matmul: bool = False) -> None:
        self.integer_matmul = integer_matmul
        self.cache = CACHE.with_name("topic-seg-vectors+int2.npz") if integer_matmul else CACHE
        self.known: dict[str, np.ndarray] = {}
        if self.cache.exists():
            data = np.load(self.cache)
            self.known = {key: data[key] for key in data.files}
        self.embedder = None

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()

    def ensure(self, texts: list[str]) -> None:
        missing = sorted({t for t in texts if self.key(t) not in self.known})
        if not missing:
            return
        if self.embedder is None:
            from core.embeddings.local_onnx import LocalOnnxEmbedder
            self.embedder = LocalOnnxEmbedder(integer_matmul=self.integer_matmul)
        for start in range(0, len(missing), 64):
            chunk = missing[start:start + 64]
            for text, vector in zip(chunk, asyncio.run(self.embedder.embed_documents(chunk))):
                self.known[self.key(text)] = np.asarray(vector, dtype=np.float32)
        self.cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez(self.cache, **self.known)

    def __getitem__(self, text: str) -> list[float]:
        return self.known[self.key(text)].tolist()


@dataclass
class Trace:
    """What the fold did with one conversation."""

    topic_of: dict[int, str] = field(default_factory=dict)  # seq -> topic
    switches: list[int] = field(default_factory=list)  # seqs at which the active topic changed
    created: list[int] = field(default_factory=list)
    restored: set[str] = field(default_factory=set)  # topics back from their archive, while active
    state: TopicsState | None = None


def fold(conv: longconv.Conversation, vectors: Vectors, config: TopicConfig, summary_chars: int) -> Trace:
    """Every message of the conversation through the pure fold; compactions answered inline."""
    summarizer = ExtractiveSummarizer(max_chars=summary_chars)
    state, trace = TopicsState(conv.conversation_id), Trace()
    by_seq = {m.seq: m for m in conv.messages}
    for m in conv.messages:
        now = m.occurred_at.timestamp()
        observed = (UserMessage(m.seq, m.content, vectors[m.content], now) if m.role == "user"
                    else AssistantMessage(m.seq, m.content, now))
        pending = [observed]
        while pending:
            state, commands = step(state, pending.pop(0), now, config)
            for command in commands:
                if isinstance(command, MessageAssigned):
                    trace.topic_of[command.seq] = command.topic_id
                elif isinstance(command, TopicCreated):
                    trace.created.append(command.seq)
                elif isinstance(command, TopicActivated):
                    trace.switches.append(m.seq)
                    trace.restored.discard(command.previous_topic_id)
                elif isinstance(command, ArchiveRestoreRequested):
                    trace.restored.add(command.topic_id)
                elif isinstance(command, CompactionRequested):
                    chat = [ChatMessage(x.seq, x.role, by_seq[x.seq].content, by_seq[x.seq].occurred_at)
                            for x in command.messages_to_archive]
                    text = summarizer.summarize(command.previous_summary, chat, 0, command.upto_seq)
                    pending.append(CompactionDone(command.topic_id, command.upto_seq, text or "(empty)"))
                    trace.restored.discard(command.topic_id)
    trace.state = state
    return trace


def section_text(conv: longconv.Conversation, trace: Trace, restore_max: int, topic=None, restored=None) -> str:
    """The topic section at the end of the conversation, as the API renders it: title, summary,
    active messages, and the archive when the topic is back from it (`topic`: another one of
    the working set, `restored`: whether it is shown restored)."""
    topic = trace.state.active_topic if topic is None else topic
    if topic is None:
        return ""
    by_seq = {m.seq: m for m in conv.messages}
    parts = [topic.title, topic.summary or ""]
    if (topic.topic_id in trace.restored) if restored is None else restored:
        archived = [s for s, t in sorted(trace.topic_of.items()) if t == topic.topic_id and s <= topic.summary_upto_seq]
        parts += [by_seq[s].content for s in archived[-restore_max:]] if restore_max else []
    parts += [by_seq[x.seq].content for x in topic.messages]
    return "\n".join(p for p in parts if p)


def measure(conv: longconv.Conversation, vectors: Vectors, config: TopicConfig, settings: Settings) -> dict:
    trace = fold(conv, vectors, config, settings.llm.extractive_max_chars)
    sizes = sorted(
        (sum(1 for t in trace.topic_of.values() if t == topic) for topic in set(trace.topic_of.values())), reverse=True)
    session_of = {m.seq: m.session for m in conv.messages}
    openers = {}  # session -> its first user message's seq
    for m in conv.messages:
        if m.role == "user":
            openers.setdefault(m.session, m.seq)
    switches = set(trace.switches) | set(trace.created[:1])
    text = section_text(conv, trace, settings.topics.restore_max_messages)
    active = trace.state.active_topic_id
    scores = [S.score(q.answer, text) for q in conv.questions]
    in_topic = [bool(q.evidence) and all(trace.topic_of.get(s) == active for s in q.evidence) for q in conv.questions]
    # What the section would hold if it showed the topic the question matches (seed 004's QA
    # flow: the question is matched first, reactivating its topic, archive restored), read-only.
    background = background_of(trace.state, config)
    matched = []
    for q in conv.questions:
        topic, _ = best_match(trace.state, unit_vector(vectors[q.question]), 0.0, background)
        matched.append(section_text(conv, trace, settings.topics.restore_max_messages, topic,
                                    restored=bool(topic is not None and topic.archived_count)))
    asked = [S.score(q.answer, t) for q, t in zip(conv.questions, matched)]
    return {
        "conversation": conv.conversation_id, "messages": len(conv.messages), "sessions": len(openers),
        "topics": len(trace.created), "alive": len(trace.state.topics),
        "largest_share": sizes[0] / max(1, sum(sizes)) if sizes else 0.0,
        "median_messages": statistics.median(sizes) if sizes else 0,
        "switches": len(switches),
        "switches_at_session_start": sum(1 for s in switches if openers.get(session_of[s]) == s) / max(1, len(switches)),
        "sessions_opening_with_switch": sum(1 for s in openers.values() if s in switches) / max(1, len(openers)),
        "section_tokens": count_tokens(text),
        "section_share": statistics.fmean(scores) if scores else 0.0,
        "section_hits": statistics.fmean(S.is_hit(x) for x in scores) if scores else 0.0,
        "evidence_in_active": statistics.fmean(in_topic) if in_topic else 0.0,
        "asked_tokens": statistics.fmean(count_tokens(t) for t in matched) if matched else 0.0,
        "asked_share": statistics.fmean(asked) if asked else 0.0,
        "questions": len(conv.questions),
    }


def labelled(vectors: Vectors, config: TopicConfig) -> list[dict]:
    """The two labelled chats: topics made for 6 subjects, share of messages in their subject's topic."""
    from bench.topic_compression import conversation as realistic_chat
    from tests.support.topic_subjects import conversation as subjects_chat
    from tests.support.topic_subjects import score

    out = []
    for name, chat in (("topic_subjects", subjects_chat(with_replies=False)), ("topic_compression", realistic_chat())):
        pairs = [(s, text) for s, role, text in chat if role == "user"]
        vectors.ensure([t for _, t in pairs])
        state, topics = TopicsState("bench"), []
        for seq, (_, text) in enumerate(pairs):
            state, _ = step(state, UserMessage(seq, text, vectors[text], 1_000.0 + seq), 1_000.0 + seq, config)
            topics.append(state.active_topic_id)
        count, right = score([s for s, _ in pairs], topics)
        out.append({"chat": name, "subjects": 6, "topics": count, "right": right})
    return out


def conversations(which: str, generated: int) -> list[longconv.Conversation]:
    if which == "dev":
        return locomo_data.load()
    return longconv.generate(seed=1, conversations=generated)


def totals(rows: list[dict]) -> dict:
    weight = sum(r["questions"] for r in rows) or 1
    return {
        "conversations": len(rows), "messages": sum(r["messages"] for r in rows),
        "sessions": sum(r["sessions"] for r in rows), "topics": sum(r["topics"] for r in rows),
        "topics_per_conversation": statistics.fmean(r["topics"] for r in rows),
        "largest_share": statistics.fmean(r["largest_share"] for r in rows),
        "switches_at_session_start": statistics.fmean(r["switches_at_session_start"] for r in rows),
        "sessions_opening_with_switch": statistics.fmean(r["sessions_opening_with_switch"] for r in rows),
        "section_tokens": statistics.fmean(r["section_tokens"] for r in rows),
        **{k: sum(r[k] * r["questions"] for r in rows) / weight
           for k in ("section_share", "section_hits", "evidence_in_active", "asked_tokens", "asked_share")},
    }


def run(which: str, generated: int, config: TopicConfig, settings: Settings) -> dict:
    vectors = Vectors(settings.embedding.provider == "local" and settings.embedding.integer_matmul)
    result: dict = {"config": {"integer_matmul": vectors.integer_matmul, "similarity_threshold": config.similarity_threshold,
                               "active_topic_bonus": config.active_topic_bonus,
                               "session_gap_seconds": config.session_gap_seconds,
                               "center_on_conversation": config.center_on_conversation,
                               "background_warmup": config.background_warmup}}
    for name in ("dev", "gen") if which == "all" else (which,) if which != "labelled" else ():
        convs = conversations(name, generated)
        vectors.ensure([m.content for c in convs for m in c.messages if m.role == "user"]
                       + [q.question for c in convs for q in c.questions])
        rows = [measure(c, vectors, config, settings) for c in convs]
        result[name] = {"per_conversation": rows, "total": totals(rows)}
    if which in ("labelled", "all"):
        result["labelled"] = labelled(vectors, config)
    return result


def report(result: dict) -> None:
    print(f"config: {result['config']}")
    for name in ("dev", "gen"):
        if name not in result:
            continue
        print(f"\n### {name}\n")
        print("| conversation | messages | sessions | topics | alive | largest | median msgs | switches |"
              " at session start | sessions opening with one | section tokens | section share | hits |"
              " evidence in active | question's topic: tokens | share |")
        print("|---" * 16 + "|")
        for r in result[name]["per_conversation"] + [dict(result[name]["total"], conversation="all",
                                                          alive="", median_messages="", switches="")]:
            print(f"| {r['conversation']} | {r['messages']} | {r['sessions']} | {r['topics']} | {r['alive']} |"
                  f" {r['largest_share']:.0%} | {r['median_messages']} | {r['switches']} |"
                  f" {r['switches_at_session_start']:.0%} | {r['sessions_opening_with_switch']:.0%} |"
                  f" {r['section_tokens']:.0f} | {r['section_share']:.3f} | {r['section_hits']:.3f} |"
                  f" {r['evidence_in_active']:.3f} | {r['asked_tokens']:.0f} | {r['asked_share']:.3f} |")
    for r in result.get("labelled", ()):
        print(f"labelled {r['chat']}: {r['topics']} topics for {r['subjects']} subjects, {r['right']:.0%} right")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", default="all", choices=("dev", "gen", "labelled", "all"))
    parser.add_argument("--generated", type=int, default=6, help="generated conversations (seed 1)")
    parser.add_argument("--threshold", type=float)
    parser.add_argument("--bonus", type=float)
    parser.add_argument("--session-gap-hours", type=float)
    parser.add_argument("--config", default="", help="more TopicConfig fields, e.g. center_on_conversation=0,background_warmup=8")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    settings = Settings()
    config = TopicConfig.from_settings(settings.topics)
    overrides = {k: v for k, v in (("similarity_threshold", args.threshold), ("active_topic_bonus", args.bonus),
                                   ("session_gap_seconds", None if args.session_gap_hours is None
                                    else args.session_gap_hours * 3600)) if v is not None}
    for pair in filter(None, args.config.split(",")):
        name, _, value = pair.partition("=")
        kind = type(getattr(config, name))
        overrides[name] = bool(int(value)) if kind is bool else kind(value)
    if overrides:
        from dataclasses import replace
        config = replace(config, **overrides)
    print(f"Machine: {platform.platform()}, Python {platform.python_version()}")
    result = run(args.set, args.generated, config, settings)
    report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
