"""Seed 004's compressed topic archive: messages -> JSON -> gzip (-> base64 for the seed's string form)."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

from domain.topics.state import TopicMessage

MessageLike = Union[TopicMessage, Mapping[str, Any]]


def _message(item: MessageLike) -> TopicMessage:
    return item if isinstance(item, TopicMessage) else TopicMessage.from_dict(dict(item))


def to_json_bytes(messages: Iterable[MessageLike]) -> bytes:
    """The archive's plain form: a JSON list of {seq, role, content, timestamp}, UTF-8."""
    rows = [{"seq": m.seq, "role": m.role, "content": m.content, "timestamp": m.timestamp}
            for m in map(_message, messages)]
    return json.dumps(rows, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def compress_bytes(messages: Iterable[MessageLike]) -> bytes:
    """JSON -> gzip: what the read model stores (bytea). mtime=0 keeps replays byte-identical."""
    return pack_bytes(messages)[0]


def pack_bytes(messages: Iterable[MessageLike]) -> tuple[bytes, int]:
    """`compress_bytes` and the length of the JSON it compressed (the projector stores both),
    the JSON encoded once."""
    raw = to_json_bytes(messages)
    return gzip.compress(raw, compresslevel=9, mtime=0), len(raw)


def decompress_bytes(data: bytes | None) -> list[TopicMessage]:
    """gzip -> JSON; None or b"" is the empty archive."""
    if not data:
        return []
    rows = json.loads(gzip.decompress(bytes(data)).decode("utf-8"))
    return [TopicMessage.from_dict(row) for row in rows]


def compress_messages(messages: Iterable[MessageLike]) -> str:
    """Seed 004's string form: JSON -> gzip -> base64."""
    return base64.b64encode(compress_bytes(messages)).decode("ascii")


def decompress_messages(archive: str | None) -> list[TopicMessage]:
    """base64 -> gzip -> JSON; None or "" is the empty archive."""
    if not archive:
        return []
    return decompress_bytes(base64.b64decode(archive, validate=True))


def _in_order(messages: Iterable[TopicMessage]) -> list[TopicMessage]:
    """Sorted by seq (the log's order: producers' clocks may disagree), first copy of a seq wins."""
    unique: dict[int, TopicMessage] = {}
    for message in messages:
        unique.setdefault(message.seq, message)
    return [unique[seq] for seq in sorted(unique)]


def merge_archives(old: str | None, new: Iterable[MessageLike]) -> str:
    """Seed 004's re-compaction: the existing archive plus newly archived messages, in order,
    without duplicates (so applying the same compaction twice changes nothing)."""
    return compress_messages(_in_order([*decompress_messages(old), *map(_message, new)]))


def merge_messages(old: bytes | None, new: Iterable[MessageLike]) -> list[TopicMessage]:
    """The stored archive's messages plus new ones, in order, without duplicates."""
    return _in_order([*decompress_bytes(old), *map(_message, new)])


def merge_archive_bytes(old: bytes | None, new: Iterable[MessageLike]) -> bytes:
    """merge_archives on the stored (gzip bytes) form."""
    return compress_bytes(merge_messages(old, new))


def full_history(archive: str | None, active: Sequence[MessageLike]) -> list[TopicMessage]:
    """The whole topic: archived then active messages, in order (seed 004's auto-decompression)."""
    return _in_order([*decompress_messages(archive), *map(_message, active)])


@dataclass(frozen=True)
class CompressionStats:
    message_count: int
    json_bytes: int
    gzip_bytes: int
    base64_bytes: int  # what is stored: gzip inflated by 4/3 (rounded up to 4-byte groups)

    @property
    def gzip_ratio(self) -> float:
        """Size reduction of gzip alone: 1 - gzip / json."""
        return 1.0 - self.gzip_bytes / self.json_bytes if self.json_bytes else 0.0

    @property
    def stored_ratio(self) -> float:
        """Size reduction of the stored string: 1 - base64(gzip) / json."""
        return 1.0 - self.base64_bytes / self.json_bytes if self.json_bytes else 0.0


def compression_stats(messages: Iterable[MessageLike]) -> CompressionStats:
    items = [_message(m) for m in messages]
    raw = to_json_bytes(items)
    packed = gzip.compress(raw, compresslevel=9, mtime=0)
    return CompressionStats(len(items), len(raw), len(packed), len(base64.b64encode(packed)))


def compression_ratio(messages: Iterable[MessageLike]) -> float:
    """Seed 004's "size reduction" of the stored archive (gzip + base64) against its JSON."""
    return compression_stats(messages).stored_ratio
