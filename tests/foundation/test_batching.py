"""The rules of the batched lookups (config/batching.py) that the conversation, owner and memory-cursor
lookups rely on: a lookup never joins a batch already sent, a failed batch fails every one of its
waiters, big bursts are split, one caller's cancellation leaves the others' answer alone.

``fetch`` here is a plain function over a dict standing in for a table: the rules are about which
lookups share which call, not about SQL (tests/foundation/test_first_message.py counts real SELECTs).
"""

from __future__ import annotations

import asyncio

import pytest

from config.batching import Batcher


class Table:
    """A dict read by ``fetch``; each call is recorded, and may be held until released."""

    def __init__(self) -> None:
        self.rows: dict[str, str] = {}
        self.calls: list[list[str]] = []
        self.hold: asyncio.Event | None = None
        self.entered = asyncio.Event()
        self.fail: Exception | None = None

    async def fetch(self, batch: dict[str, None]) -> dict[str, str]:
        self.calls.append(list(batch))
        snapshot = {key: self.rows[key] for key in batch if key in self.rows}  # read when sent
        self.entered.set()
        if self.hold is not None:
            await self.hold.wait()
        if self.fail is not None:
            raise self.fail
        return snapshot


async def test_a_lookup_never_joins_a_batch_already_sent() -> None:
    table = Table()
    table.hold = asyncio.Event()
    batcher: Batcher[str, None, str] = Batcher(table.fetch)
    first = asyncio.ensure_future(batcher.lookup("k", None))
    await asyncio.wait_for(table.entered.wait(), 5)  # the batch is sent, its answer not back yet
    table.rows["k"] = "written after the first query"
    second = asyncio.ensure_future(batcher.lookup("k", None))
    await asyncio.sleep(0.01)
    table.hold.set()
    assert await first is None  # read before the write
    assert await second == "written after the first query"  # its own batch, sent after the write
    assert table.calls == [["k"], ["k"]]


async def test_concurrent_lookups_of_one_key_share_one_query_and_absent_keys_are_asked_again() -> None:
    table = Table()
    table.rows["a"] = "A"
    batcher: Batcher[str, None, str] = Batcher(table.fetch)
    answers = await asyncio.gather(*(batcher.lookup(key, None) for key in ["a", "b", "a", "b"]))
    assert answers == ["A", None, "A", None]
    assert table.calls == [["a", "b"]]
    table.rows["b"] = "B"  # e.g. another instance created it
    assert await batcher.lookup("b", None) == "B"  # nothing negative was kept


async def test_a_failure_reaches_every_waiter_of_that_batch_and_the_next_lookup_queries_again() -> None:
    table = Table()
    table.fail = RuntimeError("storage is down")
    batcher: Batcher[str, None, str] = Batcher(table.fetch)
    results = await asyncio.gather(
        *(batcher.lookup(key, None) for key in ["a", "b", "a"]),
        batcher.lookup_many(["c", "d"], None),
        return_exceptions=True,
    )
    assert all(r is table.fail for r in results)
    assert len(table.calls) == 1
    table.fail = None
    table.rows["a"] = "A"
    assert await batcher.lookup("a", None) == "A"
    assert len(table.calls) == 2


async def test_more_keys_than_a_batch_holds_are_split_into_several_queries() -> None:
    table = Table()
    batcher: Batcher[str, None, str] = Batcher(table.fetch, max_batch=500)
    keys = [f"k{i}" for i in range(1200)]
    table.rows.update({key: key.upper() for key in keys[::7]})
    found = await batcher.lookup_many(keys, None)
    assert [len(call) for call in table.calls] == [500, 500, 200]
    assert found == {key: key.upper() if i % 7 == 0 else None for i, key in enumerate(keys)}


async def test_the_first_callers_data_goes_with_the_key() -> None:
    seen: list[dict[str, str]] = []

    async def create(batch: dict[str, str]) -> dict[str, str]:
        seen.append(dict(batch))
        return {key: f"{key} by {owner}" for key, owner in batch.items()}

    batcher: Batcher[str, str, str] = Batcher(create)
    answers = await asyncio.gather(batcher.lookup("chat", "alice"), batcher.lookup("chat", "bob"))
    assert answers == ["chat by alice", "chat by alice"]  # both agree on one row
    assert seen == [{"chat": "alice"}]


async def test_one_callers_cancellation_does_not_fail_the_others() -> None:
    table = Table()
    table.rows["k"] = "K"
    table.hold = asyncio.Event()
    batcher: Batcher[str, None, str] = Batcher(table.fetch)
    leaving = asyncio.ensure_future(batcher.lookup("k", None))
    staying = asyncio.ensure_future(batcher.lookup("k", None))
    await asyncio.wait_for(table.entered.wait(), 5)
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    table.hold.set()
    assert await staying == "K"
    assert table.calls == [["k"]]
