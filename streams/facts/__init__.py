"""Conversation chunks and facts (seeds 003, 001): chunk trigger fold, extraction, dedup."""

from domain.facts.chunking import (
    ChunkConfig,
    ChunkDone,
    ChunkFailed,
    ChunkInFlight,
    ChunkState,
    MessageSaved,
    RequestChunk,
    SkipChunk,
    Tick,
    next_range,
    step,
)
from domain.facts.dedup import (
    DedupConfig,
    FactDecision,
    LlmVerdict,
    Neighbour,
    NewFact,
    contradiction,
    cosine_similarity,
    decide_fact,
)
from streams.facts.extraction import (
    CATEGORIES,
    MEMORY_TYPES,
    OFFLINE_EXTRACTOR,
    ExtractedFact,
    ExtractionResult,
    MalformedExtraction,
    extract_offline,
    heuristic_gate,
    parse_extraction,
    parse_gate,
)

__all__ = [
    "CATEGORIES", "MEMORY_TYPES", "OFFLINE_EXTRACTOR", "ChunkConfig", "ChunkDone", "ChunkFailed",
    "ChunkInFlight", "ChunkState", "DedupConfig", "ExtractedFact", "ExtractionResult", "FactDecision",
    "LlmVerdict", "MalformedExtraction", "MessageSaved", "Neighbour", "NewFact", "RequestChunk",
    "SkipChunk", "Tick", "contradiction", "cosine_similarity", "decide_fact", "extract_offline",
    "heuristic_gate", "next_range", "parse_extraction", "parse_gate", "step",
]
