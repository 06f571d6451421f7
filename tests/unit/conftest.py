"""Unit tests never reach PostgreSQL: the embedding cache is off unless a test builds one itself."""

import pytest


@pytest.fixture(autouse=True)
def _no_embedding_cache(monkeypatch):
    monkeypatch.setenv("MEMORY_EMBEDDING__CACHE_ENABLED", "false")
