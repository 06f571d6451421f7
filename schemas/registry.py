"""Every event type: its stable name, current schema version, payload model and upcasters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from schemas import events, upcasters

Upcaster = Callable[[upcasters.Raw], upcasters.Raw]


@dataclass(frozen=True)
class EventSpec:
    type: str
    version: int
    payload: type[events.Payload]
    requires_seq: bool = False
    # upcasters[v] turns version v into v + 1.
    upcasters: dict[int, Upcaster] = field(default_factory=dict)


MESSAGE_APPENDED = "message.appended"
SUMMARY_REQUESTED = "summary.requested"
SUMMARY_COMPLETED = "summary.completed"
SUMMARY_FAILED = "summary.failed"
WINDOW_TICKED = "window.ticked"

REGISTRY: dict[str, EventSpec] = {
    spec.type: spec
    for spec in (
        EventSpec(
            MESSAGE_APPENDED, 2, events.MessageAppended, requires_seq=True,
            upcasters={1: upcasters.message_appended_v1_to_v2},
        ),
        EventSpec(SUMMARY_REQUESTED, 1, events.SummaryRequested),
        EventSpec(SUMMARY_COMPLETED, 1, events.SummaryCompleted),
        EventSpec(SUMMARY_FAILED, 1, events.SummaryFailed),
        EventSpec(WINDOW_TICKED, 1, events.WindowTicked),
    )
}
