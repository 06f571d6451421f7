"""bench/common.py's process readings and bench/system_bench.py's split: what the system bench's
per-process CPU and scheduler figures rest on (docs/scaling.md, stub11)."""

from __future__ import annotations

import os
import socket
import threading

from bench.common import listener_pid, machine_cpu_ms, schedstat_ms
from bench.system_bench import Processes


def test_listener_pid_finds_the_process_listening_on_a_port_and_none_for_a_closed_one():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        assert listener_pid(port) is None  # bound, not listening
        server.listen()
        assert listener_pid(port) == os.getpid()


def _spin(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(1000))


def test_schedstat_counts_a_busy_thread_and_machine_cpu_grows():
    machine_before = machine_cpu_ms()
    loop_before, _ = schedstat_ms(os.getpid(), os.getpid())
    all_before, _ = schedstat_ms(os.getpid())
    stop = threading.Event()
    spinner = threading.Thread(target=_spin, args=(stop,))
    spinner.start()
    try:
        while schedstat_ms(os.getpid(), spinner.native_id)[0] < 50:  # poll: the spinner's own time
            _spin_a_little()
        # every live thread summed: the spinner's share in it (an ended thread's leaves the sum)
        assert schedstat_ms(os.getpid())[0] >= all_before + 50
    finally:
        stop.set()
        spinner.join()
    assert schedstat_ms(os.getpid(), os.getpid())[0] > loop_before  # the main thread ran too
    assert machine_cpu_ms() > machine_before
    assert schedstat_ms(2**22 + 12345) == (0, 0)  # no such process


def _spin_a_little() -> None:
    sum(range(10_000))


def test_split_per_message_and_cores_with_the_rest_of_the_machine():
    start = {"workers": 1000.0, "kafka": 500.0, "machine": 10_000.0}
    end = {"workers": 3000.0, "kafka": 1500.0, "machine": 14_000.0}
    split = Processes.split(start, end, messages=100, seconds=2.0)
    assert split["workers"] == {"cpu_ms_per_message": 20.0, "cores": 1.0}
    assert split["kafka"] == {"cpu_ms_per_message": 10.0, "cores": 0.5}
    assert split["machine"] == {"cpu_ms_per_message": 40.0, "cores": 2.0}
    assert split["rest of the machine"] == {"cpu_ms_per_message": 10.0, "cores": 0.5}
