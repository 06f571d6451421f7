"""Topic matching per embedder: how many topics the subjects become, and how many messages
land in their subject's topic, at several thresholds and active-topic bonuses.

    python bench/topic_threshold_bench.py [--thresholds 0.2,0.25,...] [--bonuses 0,0.1,...]

Two labelled chats, the user messages embedded with the shipped offline model
(all-MiniLM-L6-v2, local ONNX): tests/support/topic_subjects.py (6 subjects x 7 turns,
interleaved, returns named) and bench/topic_compression.py's realistic chat (6 subjects,
109 user turns, many follow-ups that never name their subject). Each message goes through
the real fold (`streams.topics_memory.step`); "right" = in the topic most of its subject's
messages are in, when that topic is mostly its subject's (tests/support/topic_subjects.score).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.topic_compression import conversation as realistic_chat  # noqa: E402
from core.embeddings.local_onnx import LocalOnnxEmbedder  # noqa: E402
from core.settings import Settings  # noqa: E402
from streams.topics_memory import TopicsState, UserMessage, step  # noqa: E402
from domain.topics.decay import TopicConfig  # noqa: E402
from tests.support.topic_subjects import conversation as subjects_chat  # noqa: E402
from tests.support.topic_subjects import score  # noqa: E402


def place(texts: list[str], vectors, config: TopicConfig) -> tuple[list[str], list[str]]:
    """The topic of each user message and the titles of the topics made."""
    state, topics = TopicsState("bench"), []
    for seq, (text, vector) in enumerate(zip(texts, vectors)):
        state, _ = step(state, UserMessage(seq, text, vector, 1_000.0 + seq), 1_000.0 + seq, config)
        topics.append(state.active_topic_id)
    return topics, [t.title for t in state.topics]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--thresholds", default="0.2,0.25,0.3,0.35,0.4,0.5,0.7")
    parser.add_argument("--bonuses", default="0,0.1,0.15,0.2")
    args = parser.parse_args()
    thresholds = [float(x) for x in args.thresholds.split(",")]
    bonuses = [float(x) for x in args.bonuses.split(",")]
    embedder = LocalOnnxEmbedder()
    sets = {
        "topic_subjects (6 x 7)": [(s, text) for s, role, text in subjects_chat(with_replies=False)],
        "topic_compression (6 subjects, 109 turns)": [(s, text) for s, role, text in realistic_chat()
                                                      if role == "user"],
    }
    default = Settings().topics
    print(f"Machine: {platform.platform()}, Python {platform.python_version()}; model {embedder.model}")
    print(f"Defaults for this model: similarity_threshold={default.threshold}, active_topic_bonus={default.bonus}\n")
    for name, labelled in sets.items():
        labels, texts = [s for s, _ in labelled], [t for _, t in labelled]
        vectors = asyncio.run(embedder.embed_documents(texts))
        print(f"### {name}: {len(texts)} user messages, {len(set(labels))} subjects\n")
        print("| threshold | " + " | ".join(f"bonus {b:g}: topics / right" for b in bonuses) + " |")
        print("|---|" + "---|" * len(bonuses))
        for threshold in thresholds:
            cells = []
            for bonus in bonuses:
                topics, _ = place(texts, vectors, TopicConfig(similarity_threshold=threshold, active_topic_bonus=bonus))
                count, right = score(labels, topics)
                mark = "**" if (threshold, bonus) == (default.threshold, default.bonus) else ""
                cells.append(f"{mark}{count} / {right:.0%}{mark}")
            print(f"| {threshold:g} | " + " | ".join(cells) + " |")
        _, titles = place(texts, vectors, TopicConfig.from_settings(default))
        print("\nTitles at the defaults: " + "; ".join(f"\"{t}\"" for t in titles) + "\n")


if __name__ == "__main__":
    main()
