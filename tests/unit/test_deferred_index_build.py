"""The batch replay's vector index build: parallel first, alone when that fails."""

import psycopg
import pytest

from memory_agent import batch_replay
from core.settings import Settings


class FakeConnection:
    def __init__(self, journal: list, fail_parallel: bool) -> None:
        self.journal, self.fail_parallel, self.workers = journal, fail_parallel, None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def execute(self, statement) -> None:
        text = statement.as_string(None) if hasattr(statement, "as_string") else statement
        if "max_parallel_maintenance_workers" in text:
            self.workers = text.rsplit(" ", 1)[-1].strip("'")
        if text.startswith("CREATE INDEX"):
            if self.fail_parallel and self.workers != "0":
                raise psycopg.errors.DiskFull("could not resize shared memory segment: No space left on device")
            self.journal.append((self.workers, text))


@pytest.mark.parametrize("fail_parallel", [False, True])
def test_the_index_is_built_with_parallel_workers_or_else_alone(monkeypatch, fail_parallel):
    journal: list = []
    monkeypatch.setattr(batch_replay.psycopg, "connect", lambda *a, **k: FakeConnection(journal, fail_parallel))
    batch_replay.build_deferred_indexes(Settings(generation="g2", window={"replay_index_build_workers": 2}))
    assert [workers for workers, _ in journal] == ["0" if fail_parallel else "2"]
    assert '"gen_g2"."memory_items" USING hnsw' in journal[0][1]


def test_a_build_that_fails_alone_too_is_raised(monkeypatch):
    class Broken(FakeConnection):
        def execute(self, statement) -> None:
            if "CREATE INDEX" in (statement.as_string(None) if hasattr(statement, "as_string") else statement):
                raise psycopg.errors.DiskFull("no space")

    monkeypatch.setattr(batch_replay.psycopg, "connect", lambda *a, **k: Broken([], False))
    with pytest.raises(psycopg.errors.DiskFull):
        batch_replay.build_deferred_indexes(Settings(generation="g2", window={"replay_index_build_workers": 0}))
