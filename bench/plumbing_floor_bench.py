"""The floor of the worker's event plumbing: the same Kafka traffic per message as the worker
with every memory system on, and no logic at all (docs/scaling.md, "The plumbing floor").

A faust app like the worker's (streams/app.py settings, the project's transport) runs
`--folds` agents on a source topic, each writing one changelog record of `--state-bytes` per
message (the window, chunk and topic folds); one of them sends `--derived` events per message
to a derived topic; `--readers` faust agents read the derived topic back (the folds read their
answers; faust hands each record to every agent of a topic) and write `--derived-state-writes`
more changelog records per message between them; `--consumers` plain
aiokafka consumers also read the derived topic (the stage runner and the projector groups).
Nothing is decoded, no PostgreSQL, no model. The CPU of this process per message is what the
plumbing alone costs; Kafka's own CPU is reported beside it.

    python -m bench.plumbing_floor_bench [--messages 20000] [--partitions 8] [--folds 3]
        [--derived 3] [--derived-state-writes 1] [--consumers 2] [--state-bytes 4000]

The defaults follow `bench.system_bench --models stub` (stop 19): ~3.4 memory events and ~3.6
changelog records per message, 3 folds on the log, the stage runner and 2 projector groups on
the memory topic. Run it on a quiet machine and say its load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
import uuid

from bench.common import machine

KAFKA = os.environ.get("MEMORY_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:19092")


def _kafka_cpu_s() -> float:
    """CPU seconds of the Kafka broker process (the java process started by infra/)."""
    total = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            if b"java" not in cmd or b"kafka" not in cmd.lower():
                continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            continue
    return total


async def _produce(topic: str, messages: int, partitions: int) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=KAFKA, linger_ms=5, acks="all")
    await producer.start()
    try:
        body = json.dumps({"type": "message.appended", "content": "x" * 300}).encode()
        futures = [await producer.send(topic, body, key=f"c{i % (partitions * 16)}".encode()) for i in range(messages)]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def _create(names: list[str], partitions: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=KAFKA)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    finally:
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--derived", type=int, default=3)  # ~3.4 in the worker
    parser.add_argument("--derived-state-writes", type=float, default=0.6)
    parser.add_argument("--readers", type=int, default=3)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--state-bytes", type=int, default=4000)
    args = parser.parse_args()

    import faust
    from aiokafka import AIOKafkaConsumer

    from streams import kafka_transport

    run = f"floor-{uuid.uuid4().hex[:8]}"
    source, derived = f"{run}.source", f"{run}.derived"
    asyncio.run(_create([source, derived], args.partitions))
    asyncio.run(_produce(source, args.messages, args.partitions))  # the backlog, before the clock starts

    app = faust.App(
        run, broker=f"{kafka_transport.SCHEME}://{KAFKA}", store="memory://", topic_partitions=args.partitions,
        topic_replication_factor=1, web_enabled=False, consumer_auto_offset_reset="earliest", producer_acks=-1,
        processing_guarantee="at_least_once", broker_commit_every=10_000, broker_commit_interval=1.0,
        stream_wait_empty=False, datadir=f"/tmp/{run}",
    )
    source_topic = app.topic(source, key_serializer="raw", value_serializer="raw")
    derived_topic = app.topic(derived, key_serializer="raw", value_serializer="raw")
    state = b"s" * args.state_bytes
    expected = {"folded": args.messages * args.folds,
                "derived": args.messages * args.derived * (args.readers + args.consumers)}
    done = {"folded": 0, "derived": 0}
    clock: dict[str, float] = {}

    def finished() -> None:
        if all(done[k] >= expected[k] for k in expected) and "end" not in clock:
            clock["end"], clock["cpu_end"], clock["kafka_end"] = time.perf_counter(), time.process_time(), _kafka_cpu_s()
            os.kill(os.getpid(), signal.SIGTERM)

    def started() -> None:
        if "start" not in clock:
            clock["start"], clock["cpu_start"], clock["kafka_start"] = (
                time.perf_counter(), time.process_time(), _kafka_cpu_s())

    for index in range(args.folds):
        table = app.Table(f"fold-{index}", default=None, partitions=args.partitions)
        sends = args.derived if index == 0 else 0

        async def fold(stream, table=table, sends=sends):
            async for key, value in stream.items():
                started()
                table[key] = state
                for _ in range(sends):
                    await derived_topic.send(key=key, value=value[:200])
                done["folded"] += 1
                finished()

        app.agent(source_topic, name=f"fold-{index}")(fold)

    answers = app.Table("answers", default=None, partitions=args.partitions)
    every = args.derived / args.derived_state_writes if args.derived_state_writes > 0 else 0.0
    seen = {"n": 0}

    async def read_back(stream, writes: bool = False):
        async for key, _ in stream.items():
            if writes and every:
                seen["n"] += 1
                if seen["n"] % every < 1:  # --derived-state-writes per message, spread evenly
                    answers[key] = state
            done["derived"] += 1
            finished()

    for index in range(args.readers):  # faust delivers each derived record to every agent of the topic
        async def reader(stream, writes=index == 0):
            await read_back(stream, writes)

        app.agent(derived_topic, name=f"read-back-{index}")(reader)

    async def plain_consumer(number: int) -> None:
        consumer = AIOKafkaConsumer(derived, bootstrap_servers=KAFKA, group_id=f"{run}-plain-{number}",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            last_commit = time.monotonic()
            while True:
                batches = await consumer.getmany(timeout_ms=500, max_records=2000)
                done["derived"] += sum(len(records) for records in batches.values())
                if time.monotonic() - last_commit > 1.0:
                    await consumer.commit()
                    last_commit = time.monotonic()
                finished()
        finally:
            await consumer.stop()

    def consumer_task(number: int):
        async def consume() -> None:  # no parameter: faust passes the app to a task that takes one
            await plain_consumer(number)
        return consume

    for number in range(args.consumers):
        app.task(consumer_task(number))

    worker = faust.Worker(app, loglevel="warning", quiet=True)
    try:
        worker.execute_from_commandline()
    except SystemExit:
        pass
    if "end" not in clock:
        print("did not finish", done, expected, file=sys.stderr)
        sys.exit(1)
    seconds = clock["end"] - clock["start"]
    report = {
        "machine": machine(), "args": vars(args),
        "seconds": round(seconds, 2), "messages_per_s": round(args.messages / seconds, 1),
        "process_cpu_ms_per_message": round(1000 * (clock["cpu_end"] - clock["cpu_start"]) / args.messages, 3),
        "kafka_cpu_ms_per_message": round(1000 * (clock["kafka_end"] - clock["kafka_start"]) / args.messages, 3),
        "records_per_message": {"changelog": args.folds + args.derived_state_writes, "derived": args.derived,
                                "consumed": args.folds + args.derived * (args.readers + args.consumers)},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
