"""Side connections for a request's independent statements: only idle pooled ones, never a wait."""

from __future__ import annotations

from types import SimpleNamespace

from api.deps import side_connections


class FakePool:
    def __init__(self, available: int) -> None:
        self.available, self.taken, self.returned = available, 0, 0

    def get_stats(self) -> dict:
        return {"pool_available": self.available}

    async def getconn(self, timeout: float):
        self.taken += 1
        return FakeConn()

    async def putconn(self, conn) -> None:
        self.returned += 1


class FakeConn:
    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        return None


class FakeGeneration:
    def __init__(self) -> None:
        self.pointed = []

    async def use(self, conn) -> str:
        self.pointed.append(conn)
        return "gen_x"


def test_no_pool_means_no_side_connections():
    assert side_connections(SimpleNamespace(settings=None)) is None


async def test_a_busy_pool_gives_none_without_taking_or_waiting():
    pool = FakePool(available=0)
    async with side_connections(SimpleNamespace(pool=pool, generation=FakeGeneration()))() as conn:
        assert conn is None
    assert pool.taken == 0


async def test_an_idle_connection_is_pointed_at_the_generation_and_given_back():
    pool, generation = FakePool(available=2), FakeGeneration()
    async with side_connections(SimpleNamespace(pool=pool, generation=generation))() as conn:
        assert isinstance(conn, FakeConn) and generation.pointed == [conn]
    assert pool.taken == pool.returned == 1
