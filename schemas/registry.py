"""Every event type: its stable name, current schema version, payload model and upcasters."""

from __future__ import annotations

from schemas import erasure_events, events, facts_events, lineage_events, topic_events, upcasters
from schemas.spec import EventSpec


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
        *facts_events.SPECS,
        *topic_events.SPECS,
        *lineage_events.SPECS,
        *erasure_events.SPECS,
    )
}
