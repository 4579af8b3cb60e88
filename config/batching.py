"""Concurrent lookups by key gathered into one query per batch: :class:`Batcher`.

Why: a burst of first messages (10,000 new chats at once) asks the same kind of question once per chat —
is there a conversation for this key, whose is this sender, where is this thread's memory cursor. One
pooled connection, statement and round trip per question was the largest cost of a chat's first
message (docs/PERFORMANCE.md); one ``tuple IN`` SELECT for every question asked meanwhile costs little
more than one. The stores that do this (``bot.threads``, ``connections.resolver``, ``agent.memory``) share
this loop because its rules are what makes it correct, and they are easy to get subtly wrong:

- A lookup joins only a batch that has **not been sent yet**, never one in flight: its answer is then
  never older than the lookup itself, exactly as with a query of its own. (A lookup made after a write —
  a bind, a ``/new`` — must see that write.)
- **Nothing negative is cached** here: another instance on the same PostgreSQL database may create the
  row a moment later. Callers cache what they can prove (a row found); an absent key is asked again.
- A failed batch fails **every waiter of that batch** with the same exception (the caller retries its
  message), and the next lookup queries again.
- At most ``max_batch`` keys per query (bound-parameter limits: SQLite allows 32,766, asyncpg 32,767;
  500 keys of a few columns each stays far below).
- One caller's cancellation does not cancel the query, nor another caller's answer (each caller waits on a
  future of its own).

This module lives in ``config`` because it is the one package every other one may import; it imports
nothing of ours.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from sqlalchemy import and_, bindparam, or_
from sqlalchemy.sql.elements import ColumnElement

K = TypeVar("K", bound=Hashable)
D = TypeVar("D")
V = TypeVar("V")
S = TypeVar("S")

DEFAULT_MAX_BATCH = 500


class Batcher(Generic[K, D, V]):
    """Gathers :meth:`lookup` calls made while no batch is being collected into ``fetch`` calls.

    ``fetch`` gets the batch — key → the data its first caller passed (``None`` for plain reads) — and
    answers key → value; a key it leaves out is answered ``None``. What ``fetch`` does after its query
    (caching what it found) runs before any waiter resumes.
    """

    def __init__(
        self,
        fetch: Callable[[dict[K, D]], Awaitable[Mapping[K, V]]],
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
        name: str = "batch",
    ) -> None:
        self._fetch = fetch
        self.max_batch = max_batch
        self._name = name
        # Lookups waiting for the next batch: key -> (each caller's own future, first caller's data).
        self._waiting: dict[K, tuple[list[asyncio.Future[V | None]], D]] = {}
        self._task: asyncio.Task[None] | None = None

    async def lookup(self, key: K, data: D) -> V | None:
        """The value ``fetch`` answers for ``key`` in the next batch sent (``data``: the first caller's).

        Each caller waits on a future of its own, so a caller's cancellation cancels only that future —
        never the query or another caller's answer. (An ``asyncio.shield`` of one shared future did the
        same with an extra future and two more event-loop callbacks per lookup: in a burst of new chats,
        three lookups per message, it was a measurable part of a first message's cost.)"""
        return await self._join(key, data)

    async def lookup_many(self, keys: Iterable[K], data: D) -> dict[K, V | None]:
        """:meth:`lookup` of several keys at once (one caller's loop becomes one batch, not one each)."""
        futures = {key: self._join(key, data) for key in keys}
        if futures:
            await asyncio.gather(*futures.values())
        return {key: future.result() for key, future in futures.items()}

    def _join(self, key: K, data: D) -> asyncio.Future[V | None]:
        future: asyncio.Future[V | None] = asyncio.get_running_loop().create_future()
        waiting = self._waiting.get(key)
        if waiting is None:
            self._waiting[key] = ([future], data)
            if self._task is None or self._task.done():
                self._task = asyncio.create_task(self._run(), name=self._name)
        else:
            waiting[0].append(future)
        return future

    async def _run(self) -> None:
        """Send every waiting lookup, ``max_batch`` keys per ``fetch``, until none are left."""
        await asyncio.sleep(0)  # let the rest of a burst join this batch
        while self._waiting:
            batch = dict(itertools.islice(self._waiting.items(), self.max_batch))
            for key in batch:
                del self._waiting[key]  # from here on a new lookup of the key waits for the next batch
            try:
                found = await self._fetch({key: data for key, (_futures, data) in batch.items()})
            except Exception as exc:  # every waiter fails the same way; the next lookup queries again
                for futures, _data in batch.values():
                    for future in futures:
                        if not future.done():
                            future.set_exception(exc)
                            future.exception()  # retrieved here: a waiter that went away must not warn
                continue
            except BaseException:  # this task was cancelled (shutdown): nobody waits forever
                for futures, _data in itertools.chain(batch.values(), self._waiting.values()):
                    for future in futures:
                        future.cancel()
                self._waiting.clear()
                raise
            for key, (futures, _data) in batch.items():
                value = found.get(key)
                for future in futures:
                    if not future.done():  # a cancelled caller's future is done
                        future.set_result(value)


def _groups(keys: Iterable[Sequence[Any]], varying: int) -> dict[tuple[Any, ...], list[Any]]:
    """The keys grouped by their other columns: other columns' values -> the ``varying`` column's."""
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for key in keys:  # slices, not a generator per key: thousands of keys per second in a burst
        groups.setdefault(tuple(key[:varying]) + tuple(key[varying + 1 :]), []).append(key[varying])
    return groups


class KeyQuery(Generic[S]):
    """The one way our stores write a batched keyed lookup (a SELECT or a DELETE): the rows whose
    ``columns`` equal one of the keys — what ``tuple_(*columns).in_(keys)`` means, written so that SQLite
    can use an index on ``columns``, in a statement built once per number of key groups.

    SQLite plans a row-value ``IN`` list (``(a, b, c) IN (VALUES (?, ?, ?), …)``) as a scan of the whole
    table, whatever the primary key: with 100,000 conversations a batch of ten keys took 130–190 ms, and a
    burst of new chats scanned the growing table once per batch (docs/PERFORMANCE.md). Grouped by the
    other columns, with the ``varying`` one in a plain ``IN`` list, each group is an index search on
    SQLite and PostgreSQL alike; a burst's keys usually differ in one column only (the chat), so this is
    one group, and the statement's shape stays the same.

    Bound parameters, not values in the statement: in a burst of new chats every batched read
    (conversations, owners) built a fresh ``select`` with the batch's values in it, and SQLAlchemy coerced
    each value and walked the statement for its cache key — a measurable part of a first message's cost
    (docs/PERFORMANCE.md). Here group ``g``'s fixed columns are ``k{g}_0``, ``k{g}_1``, … and its varying
    column an expanding ``k{g}_in``; ``build`` makes the statement around the WHERE clause. Still one
    statement per batch, whatever its groups. (This replaced ``match_keys``, the same clause with the
    values in it: two builders of one clause drift apart.)
    """

    MAX_SHAPES = 16  # statements kept (by number of groups); more groups than that are built each time

    def __init__(
        self,
        columns: Sequence[ColumnElement[Any]],
        build: Callable[[ColumnElement[bool]], S],
        *,
        varying: int = -1,
    ) -> None:
        self._columns = list(columns)
        self._varying = varying % len(columns)
        self._build = build
        self._shapes: dict[int, S] = {}

    def __call__(self, keys: Iterable[Sequence[Any]]) -> tuple[S, dict[str, Any]]:
        """The statement for ``keys`` and the parameters to execute it with (once)."""
        groups = _groups(keys, self._varying)
        statement = self._shapes.get(len(groups))
        if statement is None:
            statement = self._build(self._where(len(groups)))
            if len(groups) <= self.MAX_SHAPES:
                self._shapes[len(groups)] = statement
        params: dict[str, Any] = {}
        for g, (group, values) in enumerate(groups.items()):
            params.update((f"k{g}_{i}", value) for i, value in enumerate(group))
            params[f"k{g}_in"] = values
        return statement, params

    def _where(self, count: int) -> ColumnElement[bool]:
        fixed = [column for i, column in enumerate(self._columns) if i != self._varying]
        return or_(
            *(
                and_(
                    *(column == bindparam(f"k{g}_{i}") for i, column in enumerate(fixed)),
                    self._columns[self._varying].in_(bindparam(f"k{g}_in", expanding=True)),
                )
                for g in range(count)
            )
        )
