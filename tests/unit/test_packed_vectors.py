"""pgvector's binary input format, as PackedVector sends it."""

import struct

import numpy as np

from projections.vectors import PackedVector, _BinaryVectorDumper


def test_a_packed_vector_is_dimensions_then_big_endian_float4s():
    values = np.array([0.5, -1.0, 1e-9], dtype=np.float32)
    data = _BinaryVectorDumper(PackedVector).dump(PackedVector(values))
    dims, unused = struct.unpack(">HH", data[:4])
    assert (dims, unused) == (3, 0)
    assert np.array_equal(np.frombuffer(data[4:], dtype=">f4"), values)
    assert len(data) == 4 + 4 * 3
