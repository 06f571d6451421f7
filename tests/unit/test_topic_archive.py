"""Seed 004's compressed archive: format, round trip, merge, full history, compression ratio."""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import math

import pytest

from streams.topics_memory import (
    AssistantMessage,
    CompactionDone,
    CompactionRequested,
    TopicMessage,
    TopicsState,
    UserMessage,
    compress_messages,
    compression_ratio,
    compression_stats,
    decompress_messages,
    full_history,
    merge_archives,
    step,
)

SENTENCES = [
    "The router drops the connection every evening around nine.",
    "Have you tried moving the access point away from the microwave?",
    "Channel 11 is crowded; switch the 2.4 GHz band to channel 1 or 6.",
    "After the firmware update the admin page asks for a new password.",
    "Your order 48213 shipped on Tuesday and should arrive by Friday.",
    "Grandma's apple pie uses a cold butter crust and a pinch of nutmeg.",
]


def messages(first_seq: int, count: int) -> list[TopicMessage]:
    return [TopicMessage(seq, "user" if seq % 2 == 0 else "assistant",
                         f"{SENTENCES[seq % len(SENTENCES)]} (turn {seq})", 1_700_000_000.0 + seq)
            for seq in range(first_seq, first_seq + count)]


def test_format_is_json_then_gzip_then_base64():
    archive = compress_messages(messages(0, 2))
    assert archive.startswith("H4sI")  # base64 of the gzip magic bytes, as in the seed's example
    rows = json.loads(gzip.decompress(base64.b64decode(archive)))
    assert rows[0] == {"seq": 0, "role": "user", "content": f"{SENTENCES[0]} (turn 0)",
                       "timestamp": 1_700_000_000.0}


def test_round_trip_keeps_every_field_and_unicode():
    original = messages(0, 5) + [TopicMessage(5, "user", "Ça coûte 12 € — d'accord? 🍎\n\tfin", 1.5)]
    assert decompress_messages(compress_messages(original)) == original


def test_same_messages_give_the_same_archive_bytes():
    # gzip stores a timestamp; the archive pins it so a replay rebuilds identical rows.
    assert compress_messages(messages(0, 8)) == compress_messages(messages(0, 8))


def test_plain_dicts_are_accepted():
    rows = [{"seq": 3, "role": "user", "content": "hi", "timestamp": 2}]
    assert decompress_messages(compress_messages(rows)) == [TopicMessage(3, "user", "hi", 2.0)]


@pytest.mark.parametrize("empty", [None, ""])
def test_no_archive_is_an_empty_list(empty):
    assert decompress_messages(empty) == []


def test_garbage_is_refused():
    with pytest.raises((binascii.Error, ValueError, OSError)):
        decompress_messages("not base64 at all!")


def test_merge_appends_new_messages_in_order():
    old = compress_messages(messages(0, 9))
    merged = merge_archives(old, messages(9, 9))
    assert decompress_messages(merged) == messages(0, 18)


def test_merge_without_an_archive_compresses_the_new_messages():
    assert decompress_messages(merge_archives(None, messages(0, 3))) == messages(0, 3)


def test_merge_sorts_and_drops_duplicates_so_reapplying_changes_nothing():
    old = compress_messages(messages(0, 6))
    new = list(reversed(messages(4, 6)))  # seq 4, 5 are already archived
    merged = merge_archives(old, new)
    assert [m.seq for m in decompress_messages(merged)] == list(range(10))
    assert merge_archives(merged, new) == merged


def test_full_history_is_archive_then_active_in_order():
    archive = merge_archives(compress_messages(messages(0, 9)), messages(9, 9))
    assert full_history(archive, messages(18, 4)) == messages(0, 22)
    assert full_history(None, messages(0, 4)) == messages(0, 4)


def test_the_fold_and_the_archive_together_keep_the_whole_topic():
    """What the read side does: merge every confirmed compaction's messages into the archive."""
    state, archive, requests, sent = TopicsState("conv"), None, {}, []
    for seq in range(40):
        text = f"{SENTENCES[seq % len(SENTENCES)]} #{seq}"
        item = (UserMessage(seq, text, [1.0, 0.0], float(seq)) if seq % 2 == 0
                else AssistantMessage(seq, text, float(seq)))
        sent.append(TopicMessage(seq, "user" if seq % 2 == 0 else "assistant", text, float(seq)))
        state, commands = step(state, item, float(seq))
        for request in commands:
            if isinstance(request, CompactionRequested):
                requests[request.upto_seq] = request
                state, _ = step(state, CompactionDone(request.topic_id, request.upto_seq, "s"), float(seq))
                archive = merge_archives(archive, requests[request.upto_seq].messages_to_archive)
    (topic,) = state.topics
    assert sorted(requests) == [8, 17, 26, 35] and topic.archived_count == len(decompress_messages(archive))
    assert full_history(archive, topic.messages) == sent


def test_stats_count_json_gzip_and_base64_bytes():
    stats = compression_stats(messages(0, 20))
    assert stats.message_count == 20
    assert stats.base64_bytes == 4 * math.ceil(stats.gzip_bytes / 3)
    assert stats.gzip_bytes < stats.base64_bytes < stats.json_bytes
    assert stats.stored_ratio == pytest.approx(1 - stats.base64_bytes / stats.json_bytes)
    assert stats.gzip_ratio > stats.stored_ratio
    assert compression_ratio(messages(0, 20)) == stats.stored_ratio


def test_an_empty_list_has_no_ratio():
    assert compression_stats([]).json_bytes == 2 and compression_ratio([]) < 0  # "[]" grows when gzipped
