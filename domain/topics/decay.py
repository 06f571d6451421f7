"""Seed 004's LRU decay: half-life by access count, priority and survival time; pure math."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.settings import TopicSettings

SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class TopicConfig:
    """Seed 004's defaults. Everything the topic fold decides comes from these values."""

    max_topics: int = 20
    similarity_threshold: float = 0.7  # a message joins a topic when cosine > threshold
    active_topic_bonus: float = 0.0  # added to the active topic's cosine (0: seed 004 exactly)
    # Beyond the seed (docs/topics.md, "Topics on long conversations"); the defaults here are
    # the seed's behaviour, TopicSettings turns them on.
    # A pause this long since the active topic's last message (a new session) ends its
    # follow-up bonus: the plain threshold decides, as for a message announcing a new subject.
    session_gap_seconds: float = 3600.0  # 0: the bonus never lapses (no effect without a bonus: the seed)
    # Match on what sets a message apart from the conversation: the running mean of the
    # conversation's user-message vectors (its speakers' names, its register) is taken off the
    # message and the topic centroids before the cosine, shrunk by n / (n + background_warmup)
    # while it rests on few messages.
    center_on_conversation: bool = False
    background_warmup: int = 24
    base_half_life_seconds: float = 86400.0  # 1 day: short-term memory
    max_half_life_seconds: float = 2592000.0  # 30 days: the long-term cap
    access_threshold_for_lt: int = 5  # the half-life doubles every this many accesses
    max_messages_per_topic: int = 12  # more active messages than this asks for a compaction
    recent_message_keep: int = 4  # newest messages a compaction leaves active
    eviction_priority: float = 0.05  # topics below this priority are forgotten
    title_chars: int = 80
    default_importance: float = 0.5
    # Seed 004 only forgets topics below eviction_priority, so a burst of fresh topics
    # would grow the working set (and the changelog row) without bound. With this on,
    # the lowest-priority topics other than the active one also leave until max_topics
    # remain (reason "capacity"). False gives the seed's exact behaviour.
    capacity_eviction: bool = True
    # A compaction with no answer after this long is asked for again (same messages).
    compaction_timeout_seconds: float = 300.0
    # After a CompactionFailed, the topic waits this long before the next request.
    compaction_retry_seconds: float = 300.0

    @classmethod
    def from_settings(cls, topics: TopicSettings) -> TopicConfig:
        return cls(
            max_topics=topics.max_topics, similarity_threshold=topics.threshold,
            active_topic_bonus=topics.bonus, session_gap_seconds=topics.session_gap_s,
            center_on_conversation=bool(topics.center_on_conversation),
            background_warmup=topics.background_warmup,
            base_half_life_seconds=topics.base_half_life_seconds, max_half_life_seconds=topics.max_half_life_seconds,
            access_threshold_for_lt=topics.access_threshold_for_lt,
            max_messages_per_topic=topics.max_messages_per_topic, recent_message_keep=topics.recent_message_keep,
            eviction_priority=topics.eviction_priority, default_importance=topics.default_importance,
            capacity_eviction=topics.capacity_eviction, compaction_timeout_seconds=topics.compaction_timeout_s,
            compaction_retry_seconds=topics.compaction_retry_s,
        )


DEFAULT_CONFIG = TopicConfig()


def half_life_seconds(access_count: int, config: TopicConfig = DEFAULT_CONFIG) -> float:
    """1 day below the threshold, doubling every `access_threshold_for_lt` accesses, capped.

    With the defaults: 0-4 -> 1 d, 5-9 -> 2 d, 10-14 -> 4 d, 15-19 -> 8 d, 20-24 -> 16 d,
    25+ -> 30 d (32 d capped).
    """
    doublings = max(access_count, 0) // config.access_threshold_for_lt
    # Beyond ~60 doublings the cap has long applied; avoid building a huge integer.
    return min(config.base_half_life_seconds * 2.0 ** min(doublings, 64), config.max_half_life_seconds)


def memory_type(access_count: int, config: TopicConfig = DEFAULT_CONFIG) -> str:
    """Seed 004's `memory_type` stat: "short-term" below the threshold, else "long-term"."""
    return "short-term" if access_count < config.access_threshold_for_lt else "long-term"


def consolidation_stage(access_count: int, config: TopicConfig = DEFAULT_CONFIG) -> str:
    """Seed 004's consolidation table, where the first doubling (5-9 accesses) is "transitioning"."""
    if access_count < config.access_threshold_for_lt:
        return "short-term"
    if access_count < 2 * config.access_threshold_for_lt:
        return "transitioning"
    return "long-term"


def decay_factor(age_seconds: float, half_life: float) -> float:
    """0.5 ** (age / half_life). A negative age (clock skew) counts as no age at all."""
    return 0.5 ** (max(age_seconds, 0.0) / half_life)


def priority(importance: float, age_seconds: float, access_count: int,
             config: TopicConfig = DEFAULT_CONFIG) -> float:
    """importance x decay, where age runs from the topic's last activity (the LRU timer)."""
    return importance * decay_factor(age_seconds, half_life_seconds(access_count, config))


def survival_seconds(access_count: int, threshold: float | None = None,
                     config: TopicConfig = DEFAULT_CONFIG, importance: float = 1.0) -> float:
    """Exact idle time until the priority falls below `threshold` (default: eviction_priority).

    This is half_life x log2(importance / threshold): 4.32 half-lives for importance 1.0
    and 0.05. Seed 004's "~5 days" counts whole half-lives instead (the first whole one
    below 5% is the fifth: 0.03125).
    """
    threshold = config.eviction_priority if threshold is None else threshold
    if importance <= threshold:
        return 0.0
    return half_life_seconds(access_count, config) * math.log2(importance / threshold)
