"""Which projectors a generation runs, and which of them share a Kafka consumer."""

from __future__ import annotations

from core.settings import Settings
from projections import facts, message_index, topics
from projections.erasure import ErasureProjector
from projections.lineage import projectors as lineage_projectors
from projections.memory import MemoryProjector
from projections.messages import MessagesProjector


def projectors(settings: Settings) -> list:
    """The messages projector and the message index (retrieval searches the log), plus those of
    the enabled memory systems (`settings.systems`)."""
    by_system = {
        "window": lambda: [MemoryProjector(settings)],
        "facts": lambda: facts.projectors(settings),
        "topics": lambda: topics.projectors(settings),
    }
    return [MessagesProjector(settings), *message_index.projectors(settings), *lineage_projectors(settings),
            ErasureProjector(settings), *(p for system in settings.systems for p in by_system[system]())]


# Projectors that call a model keep a consumer of their own: a shared fetch waits for its
# slowest projector, and the messages projector (what reads see first) must not wait for embeddings.
# The erasure projector too: the messages projector must not wait for erasures (docs/security.md,
# "A flood of erasures and the other tenants"); its group holds each erasure until the messages
# projector has passed it (projections/time_order.py).
OWN_CONSUMER = frozenset({"message_index", "erasure"})
# What reads see first, projected as soon as it is fetched; the other projectors (derived events)
# linger while records flow (`projector_fetch_min_bytes`: batches, not a transaction per record).
NO_LINGER = frozenset({"messages", "erasure", "message_index"})


def consumer_groups(settings: Settings, chosen: list) -> list[list]:
    """Projectors that read the same topics share one consumer (projections/runner.py)."""
    groups: dict[tuple, list] = {}
    for projector in chosen:
        key = (projector.name,) if projector.name in OWN_CONSUMER else tuple(sorted(projector.topics(settings)))
        groups.setdefault(key, []).append(projector)
    return list(groups.values())
