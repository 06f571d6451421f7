"""Vectors sent to PostgreSQL in pgvector's binary format.

A 384-float vector formatted as text costs ~0.2 ms of Python per row (and PostgreSQL parses it
again); packed as pgvector's binary value ~7 µs of Python (256 rows per INSERT, measured here:
0.44 ms -> 0.014 ms wall per row). Only a dumper for `PackedVector` is registered on the connection:
how vector columns are read back on it does not change.
"""

from __future__ import annotations

import struct
import weakref

import numpy as np
import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.types import TypeInfo


class PackedVector:
    """A vector parameter, sent binary: `%b::vector`, or a list of them as `%b::vector[]`."""

    __slots__ = ("values",)

    def __init__(self, values) -> None:
        self.values = np.asarray(values, dtype=">f4").reshape(-1)


class _BinaryVectorDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: PackedVector) -> bytes:
        # pgvector's binary input: int16 dimensions, int16 unused, then big-endian float4s.
        return struct.pack(">HH", obj.values.shape[0], 0) + obj.values.tobytes()


_READY: weakref.WeakSet = weakref.WeakSet()


async def use_packed_vectors(conn: psycopg.AsyncConnection) -> None:
    """Teach `conn` to send `PackedVector` (once per connection; one catalogue query)."""
    if conn in _READY:
        return
    info = await TypeInfo.fetch(conn, "vector")
    if info is None:
        raise psycopg.ProgrammingError("the vector type (pgvector) is not installed in this database")
    info.register(conn)  # the array type, for lists of vectors
    conn.adapters.register_dumper(PackedVector, type("PackedVectorDumper", (_BinaryVectorDumper,), {"oid": info.oid}))
    _READY.add(conn)
