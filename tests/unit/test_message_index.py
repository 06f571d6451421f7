"""The message-index projector's pure parts: what it indexes, and that an embedder outage
never stops it."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from aiokafka.structs import ConsumerRecord

from core.embeddings import EmbeddingError
from core.settings import Settings
from projections import message_index
from projections.message_index import MessageIndexProjector
from schemas.codec import encode
from runtime.client import MemoryClient


class FlakyEmbedder:
    model, dimensions = "fake", 3

    def __init__(self, failures: int, retryable: bool = True) -> None:
        self.failures, self.retryable, self.calls = failures, retryable, 0

    async def embed_documents(self, texts):
        self.calls += 1
        if self.calls <= self.failures:
            raise EmbeddingError("down", retryable=self.retryable)
        return np.ones((len(texts), 3), dtype=np.float32)


def record(offset: int, value: bytes) -> ConsumerRecord:
    return ConsumerRecord("t", 0, offset, 0, 0, None, value, None, len(value), 0, [])


def test_only_what_people_said_is_indexed_and_the_first_event_of_a_seq_wins():
    settings = Settings()
    client = MemoryClient(settings)
    events = [client.message_event(tenant_id="a", conversation_id="c", user_id="u", seq=seq, role=role,
                                   content=content, occurred_at=datetime(2023, 5, 7, tzinfo=UTC))
              for seq, role, content in ((0, "user", "hello"), (1, "system", "rules"), (2, "tool", "{}"),
                                         (3, "assistant", "   "), (4, "assistant", "hi"), (4, "user", "again"))]
    records = [record(i, encode(e)) for i, e in enumerate(events)] + [record(9, b"not json")]
    found = MessageIndexProjector(settings).messages(records)
    assert sorted(found) == [("a", "c", 0), ("a", "c", 4)]
    assert found[("a", "c", 4)][3] == "hi"


@pytest.mark.parametrize(("failures", "retryable", "embedded"), [(0, True, True), (2, True, True),
                                                                 (3, True, False), (1, False, False)])
async def test_an_embedder_outage_leaves_messages_to_the_keyword_search_and_never_raises(
        monkeypatch, failures, retryable, embedded):
    monkeypatch.setattr(message_index, "RETRY_DELAY_S", 0.0)
    embedder = FlakyEmbedder(failures, retryable)
    vectors = await MessageIndexProjector(Settings(), embedder).embed_or_skip(["a", "b"])
    assert (vectors is not None) is embedded
    assert embedder.calls == (1 if not retryable else min(failures + 1, 3))
