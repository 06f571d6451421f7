"""Task prefixes that some embedding models need on queries and stored documents."""

from __future__ import annotations

from dataclasses import dataclass

_BGE_QUERY = "Represent this sentence for searching relevant passages: "


@dataclass(frozen=True, slots=True)
class Prefixes:
    query: str = ""
    document: str = ""


# Matched as substrings of the lower-cased model name, first match wins, so
# "nomic-embed-text:latest" (Ollama) and "nomic-ai/nomic-embed-text-v1.5" both match.
KNOWN_PREFIXES: tuple[tuple[str, Prefixes], ...] = (
    ("nomic-embed-text", Prefixes("search_query: ", "search_document: ")),
    ("nomic-embed", Prefixes("search_query: ", "search_document: ")),
    ("mxbai-embed-large", Prefixes(_BGE_QUERY, "")),
    ("bge-small-en-v1.5", Prefixes(_BGE_QUERY, "")),
    ("bge-base-en-v1.5", Prefixes(_BGE_QUERY, "")),
    ("bge-large-en-v1.5", Prefixes(_BGE_QUERY, "")),
    ("e5-", Prefixes("query: ", "passage: ")),
)


def prefixes_for(model: str, query: str | None = None, document: str | None = None) -> Prefixes:
    """The model's known prefixes (none for MiniLM, OpenAI, ...), each overridable."""
    known = Prefixes()
    name = model.lower()
    for pattern, prefixes in KNOWN_PREFIXES:
        if pattern in name:
            known = prefixes
            break
    return Prefixes(
        query=known.query if query is None else query,
        document=known.document if document is None else document,
    )
