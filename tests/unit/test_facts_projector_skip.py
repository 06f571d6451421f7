"""The facts projector reads two shared topics and applies few of their types: the others (topic
placements, summaries, messages) are skipped without being parsed (docs/scaling.md, stub10)."""

from pathlib import Path

from aiokafka.structs import ConsumerRecord

from core.settings import Settings
from projections import facts


def _record(value: bytes) -> ConsumerRecord:
    return ConsumerRecord("t", 0, 0, 0, 0, b"acme/c1", value, None, len(b"acme/c1"), len(value), [])


class _NoConnection:
    def __getattr__(self, name):
        raise AssertionError(f"the connection was used: {name}")


async def test_other_systems_events_are_skipped_unparsed(tmp_path: Path, monkeypatch):
    decoded = []
    real = facts.decode_record
    monkeypatch.setattr(facts, "decode_record", lambda record, limits: decoded.append(record.value) or real(record, limits))
    projector = facts.FactsProjector(Settings(state_dir=tmp_path))
    others = [b'{"type":"topic.message_assigned","not json', b'{"type":"summary.requested",',
              b'{"type":"message.appended","x":1}']
    assert await projector.apply(_NoConnection(), [_record(value) for value in others]) == []
    assert decoded == []
    # Its own types, and bytes whose type cannot be peeked, are still decoded.
    unpeekable = b'not an event'
    assert await projector.apply(_NoConnection(), [_record(unpeekable)]) == []
    assert decoded == [unpeekable]

