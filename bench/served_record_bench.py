"""What recording a served context costs the request (docs/lineage.md): the part that runs
before the response is returned, i.e. building the context.served event from the response and
encoding it (`ServedRecorder.record` up to scheduling the send task; the send itself runs after).

    python -m bench.served_record_bench --items 10 --gap 40

Best of 25 runs of 200 calls each, on one core (the machine may be shared: best-of is the
figure to trust)."""

from __future__ import annotations

import argparse
import platform
import timeit
from datetime import UTC, datetime

from api.schemas import ContextMessage, ContextOut, SummaryOut, Watermark
from retrieval.request import ContextRequest
from api.served import served_payload
from schemas.codec import encode_checked, new_event
from schemas.lineage_events import CONTEXT_SERVED
from projections.queries import ConversationRow


class _Score:
    final = 0.61


class _Item:
    def __init__(self, n: int) -> None:
        self.kind, self.id, self.tokens, self.score = "fact", f"fact-{n}", 25, _Score()
        self.content = f"The user mentioned detail number {n} about their family and home town." * 2


class _Retrieved:
    def __init__(self, n: int) -> None:
        self.items, self.error = [_Item(i) for i in range(n)], None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=10)
    parser.add_argument("--gap", type=int, default=40)
    args = parser.parse_args()
    now = datetime.now(UTC)
    conversation = ConversationRow(tenant_id="t", conversation_id="conv-42", user_id="u", subject_id="s",
                                   last_seq=99, message_count=100, gap_count=0)
    request = ContextRequest(conversation=conversation, user_id="u", subject_id="s", query="where do I live?",
                             before_seq=None, budget_tokens=500, now=now)
    out = ContextOut(
        conversation_id="conv-42", mode="caught_up",
        summary=SummaryOut(memory_id=9, start_seq=0, end_seq=59, text="x" * 800, prompt_version="p", model="m"),
        messages=[ContextMessage(seq=60 + i, role="user", content="hello " * 20, occurred_at=now)
                  for i in range(args.gap)],
        watermark=Watermark(last_seq=99, summary_end_seq=59, requested_min_seq=None, complete=True, missing_seqs=[]),
        retrieved=_Retrieved(args.items))

    def once() -> int:
        payload = served_payload(request, out)  # as api.served.ServedRecorder.record builds and checks it
        envelope = new_event(CONTEXT_SERVED, payload, tenant_id="t", conversation_id="conv-42",
                             user_id="u", subject_id="s", occurred_at=now)
        return len(encode_checked(envelope, payload=payload))

    size = once()
    best = min(timeit.repeat(once, number=200, repeat=25)) / 200
    print(f"{platform.node()} {platform.python_version()}: {args.items} retrieved items, {args.gap} gap messages:"
          f" {best * 1e6:.0f} µs per record on the request path, event {size} bytes")


if __name__ == "__main__":
    main()
