"""Logging for the command line: one format, and the Kafka client's start-up noise toned down.

While a broker starts (or a consumer group's coordinator moves), aiokafka logs
`Group Coordinator Request failed: GroupCoordinatorNotAvailableError` at ERROR and
`Marking the coordinator dead` at WARNING, then retries and succeeds. Those records are
shown at INFO, marked as retried; any other error from the client keeps its level.
"""

from __future__ import annotations

import logging

COORDINATOR_LOGGER = "aiokafka.consumer.group_coordinator"
# Retriable coordinator lookups that the client retries by itself.
_TRANSIENT = ("GroupCoordinatorNotAvailableError", "NodeNotReadyError", "NotCoordinatorForGroupError",
              "CoordinatorLoadInProgressError", "RequestTimedOutError", "KafkaConnectionError")


class TransientCoordinatorFilter(logging.Filter):
    """Downgrade the client's retried coordinator errors to INFO (never drops a record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.INFO:
            return True
        message = record.getMessage()
        transient = message.startswith("Marking the coordinator dead") or (
            message.startswith("Group Coordinator Request failed") and any(e in message for e in _TRANSIENT))
        if transient:
            record.msg, record.args = f"{message} (transient while the broker starts; retrying)", ()
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return True


def setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    install_filters()


def install_filters() -> None:
    coordinator = logging.getLogger(COORDINATOR_LOGGER)
    if not any(isinstance(f, TransientCoordinatorFilter) for f in coordinator.filters):
        coordinator.addFilter(TransientCoordinatorFilter())
