"""Topic memory with LRU decay and compressed archives (seed 004): the pure fold and its parts."""

from domain.topics.archive import (
    CompressionStats,
    compress_bytes,
    compress_messages,
    decompress_bytes,
    compression_ratio,
    compression_stats,
    decompress_messages,
    full_history,
    merge_archive_bytes,
    merge_archives,
)
from domain.topics.decay import (
    DEFAULT_CONFIG,
    TopicConfig,
    consolidation_stage,
    decay_factor,
    half_life_seconds,
    memory_type,
    priority,
    survival_seconds,
)
from domain.topics.fold import best_match, step, topic_priority, topic_stats, unit_vector
from domain.topics.protocol import (
    ArchiveRestoreRequested,
    AssistantMessage,
    Command,
    CompactionDone,
    CompactionFailed,
    CompactionRequested,
    MessageAssigned,
    MessageUnassigned,
    Observed,
    Tick,
    TopicActivated,
    TopicCreated,
    TopicEvicted,
    UnmatchedUserMessage,
    UserMessage,
)
from domain.topics.state import PendingCompaction, Topic, TopicMessage, TopicsState, make_topic_id

__all__ = [
    "ArchiveRestoreRequested", "AssistantMessage", "Command", "CompactionDone", "CompactionFailed",
    "CompactionRequested", "CompressionStats", "DEFAULT_CONFIG", "MessageAssigned", "MessageUnassigned",
    "Observed", "PendingCompaction", "Tick", "Topic", "TopicActivated", "TopicConfig", "TopicCreated",
    "TopicEvicted", "TopicMessage", "TopicsState", "UnmatchedUserMessage", "UserMessage", "best_match",
    "compress_bytes", "compress_messages", "compression_ratio", "compression_stats", "consolidation_stage",
    "decay_factor", "decompress_bytes", "decompress_messages", "full_history", "half_life_seconds",
    "make_topic_id", "memory_type", "merge_archive_bytes", "merge_archives", "priority", "step",
    "survival_seconds", "topic_priority", "topic_stats", "unit_vector",
]
