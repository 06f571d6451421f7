"""The processor table's store: faust's in-memory store, minus the restore of what it holds.

faust's in-memory store persists no changelog offset (`persisted_offset` is None), so every
rebalance restores *every* active partition of the table from its changelog's beginning, the
partitions this process kept through the rebalance too. faust folds on while its group
rebalances (`stream_wait_empty=False`, streams/app.py): a state the processor wrote during that
restore was overwritten by an older one read back from the changelog, and the conversation's
next record was folded on it. Two histories of one conversation, both projected
(tests/integration/test_two_workers.py counted 479 and 455 topic placements for 480 messages;
tests/integration/test_rebalance_restore.py makes it happen every time).

The argument for not restoring a kept partition at all: the changelog partition of a table
partition has one writer, the partition's owner. A process that owned partition p as active
since its last completed recovery (which read p's changelog to its end) and owns it still has
read or written every record of p's changelog itself, in order, and its memory holds the latest
of each key: what a restore could add is nothing newer, only older states of keys it has
written since (the race) or the writes of a process that was not p's owner (a zombie whose
session had expired: not a history to adopt). So for a *held* partition the restore applies no
record. A partition newly assigned, or one whose last recovery did not complete, is restored
from its changelog as before (its previous owner wrote it).

faust still reads a held partition's changelog as before (from where its last restore of it
ended: the in-memory store reports no persisted offset); only the records are not applied. A
first version also reported the highest offset the process had written as the persisted one,
so that a held partition needed no reading at all, and in one of two takeover runs under load
the survivor's recovery then never received the records of the partitions it did have to
restore ("No event received for active tp", for five minutes): not kept. Main's store hung the
same way (a recovery stall, docs/backbone.md): the cause was faust dropping records a fetch took
during a rebalance, not the store (streams/kafka_transport.put_back).
"""

from __future__ import annotations

import logging
from typing import Any

from faust.stores import STORES
from faust.stores import memory
from faust.types import TP

log = logging.getLogger(__name__)

SCHEME = "heldmemory"
URL = f"{SCHEME}://local"  # a host: yarl counts "heldmemory://" as false, and faust takes the app's store then


class Store(memory.Store):
    """faust's in-memory store; a partition held through a rebalance is not restored."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._active: set[int] = set()  # active partitions since the last completed recovery
        self.held: set[int] = set()  # of those, the ones this rebalance kept: not restored

    async def on_rebalance(self, assigned: set[TP], revoked: set[TP], newly_assigned: set[TP],
                           generation_id: int = 0) -> None:
        actives = {tp.partition for tp in self.app.assignor.assigned_actives()
                   if tp.topic == self.table.changelog_topic_name}
        # Kept only if active before and now; a partition that left is restored if it comes back
        # (its new owner wrote it meanwhile), even when this rebalance's recovery never completes.
        self.held = self._active & actives
        self._active = set(self.held)
        log.info("rebalance (generation %s): partitions %s held (their changelog records not applied), %s restored",
                 generation_id, sorted(self.held), sorted(actives - self.held))

    async def on_recovery_completed(self, active_tps: set[TP], standby_tps: set[TP]) -> None:
        await super().on_recovery_completed(active_tps, standby_tps)
        self._active = {tp.partition for tp in active_tps}

    def apply_changelog_batch(self, batch: Any, to_key: Any, to_value: Any) -> None:
        """The restore (and a standby's reading): every record of a partition not held."""
        # A held partition's records: this process wrote or read them already, and may have
        # written newer states of their keys since.
        fresh = [event for event in batch if event.message.partition not in self.held]
        super().apply_changelog_batch(fresh, to_key, to_value)


STORES.aliases.setdefault(SCHEME, f"{__name__}:Store")
