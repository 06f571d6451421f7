"""What projector tests compare: events as the consumer records a projector is handed, and a
set of tables' rows without the columns that say when a row was written."""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord

from schemas.codec import encode


def consumer_records(envelopes, topic: str = "derived") -> list[ConsumerRecord]:
    """Each envelope encoded as the record at its offset of one partition of `topic`."""
    out = []
    for offset, envelope in enumerate(envelopes):
        value = encode(envelope)
        out.append(ConsumerRecord(topic, 0, offset, 0, 0, envelope.key, value, None, len(envelope.key),
                                  len(value), ()))
    return out


async def table_rows(conn, tables, clocks=frozenset()) -> dict[str, list[str]]:
    """Per table, its rows (every column but `clocks`), sorted: equal when two ways of applying
    the same events left the same rows."""
    rows = {}
    for table in tables:
        cur = await conn.execute(f"SELECT * FROM {table}")
        names = [column.name for column in cur.description]
        rows[table] = sorted(repr({n: v for n, v in zip(names, row) if n not in clocks})
                             for row in await cur.fetchall())
    return rows


async def project_one_by_one(conn, events) -> None:
    """The reference a topic projection is compared with: each event applied by the topics and
    topic-lineage projectors' own statements, in order, in one transaction."""
    from projections import lineage, topics

    async with conn.transaction():
        for event in events:
            if event.type in topics.PROJECTED:
                await topics._APPLY[event.type](conn, event, topics._params(event))  # noqa: SLF001
            if event.type in lineage._TOPIC_TYPES:  # noqa: SLF001
                await lineage._TOPIC_APPLY[event.type](conn, event)  # noqa: SLF001
