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


# The group of every lingering projector (derived events, facts, the served-context lineage): one
# consumer for their topics together. Its Kafka group id is new with this grouping; the positions
# are the projectors' own in PostgreSQL, so a deployment that ran one group per topic set resumes
# exactly where each projector stood (docs/scaling.md, "The LLM client's CPU and one consumer for
# the lingering projectors").
LINGERING = ("lingering",)


def group_name(group: list) -> str | None:
    """The stable Kafka group name of the lingering projectors' group; None for the others (their
    group id comes from their names, as before)."""
    lingering = all(p.name not in OWN_CONSUMER and p.name not in NO_LINGER for p in group)
    return LINGERING[0] if lingering and len(group) > 1 else None


def consumer_groups(settings: Settings, chosen: list) -> list[list]:
    """Which projectors share one consumer (projections/runner.py): those with a consumer of their
    own (OWN_CONSUMER) alone; those projected as soon as fetched (NO_LINGER) by the topics they
    read; every other one (they linger while records flow) in one group, whatever its topics."""
    groups: dict[tuple, list] = {}
    for projector in chosen:
        if projector.name in OWN_CONSUMER:
            key = (projector.name,)
        elif projector.name in NO_LINGER:
            key = tuple(sorted(projector.topics(settings)))
        else:
            key = LINGERING
        groups.setdefault(key, []).append(projector)
    return list(groups.values())
