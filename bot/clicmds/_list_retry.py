"""The shape ``switchboard inbox`` and ``switchboard webhooks`` share: ``list [--failed] [--limit]`` and
``retry ID [--wait]``, each running one coroutine on a store opened on the configured database (and
closed after it, whatever happens).

Both retries are the same exchange with a store that the running service polls: ask for the retry with
one conditional write, then watch the stored record until the service has run it (or the wait is over).
:func:`retry_and_wait` is that exchange; each command says only what its records are called and how an
outcome reads.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from config.schema import Settings

EXIT_FAILED = 1
Store = TypeVar("Store")


class Closable(Protocol):
    """The database a store was opened on (:class:`bot.db.Database`)."""

    async def close(self) -> None: ...


Opener = Callable[[Settings], Coroutine[Any, Any, tuple[Closable, Store]]]
Lister = Callable[[Store, bool, int], Coroutine[Any, Any, int]]
Retrier = Callable[[Store, str, float], Coroutine[Any, Any, int]]


class Stored(Protocol):
    """A stored inbox entry or webhook delivery, as far as a retry reads it."""

    @property
    def status(self) -> str: ...


Record = TypeVar("Record", bound=Stored, covariant=True)


class RetryQueue(Protocol[Record]):
    """The inbox or the delivery store: read a record, and queue it for the service to run again."""

    async def get(self, record_id: str, /) -> Record | None: ...

    async def request_retry(self, record_id: str, /) -> bool: ...


def age(seconds: float) -> str:
    """The AGE column of both listings: seconds up to two minutes, minutes up to two hours, then hours."""
    if seconds < 120:
        return f"{int(seconds)}s"
    if seconds < 7200:
        return f"{int(seconds // 60)}m"
    return f"{int(seconds // 3600)}h"


def register_list_retry(
    subparsers: Any,
    load_or_exit: Callable[[str | None], Settings],
    *,
    name: str,
    help: str,
    list_help: str,
    failed_help: str,
    retry_help: str,
    id_name: str,
    opener: Opener[Store],
    lister: Lister[Store],
    retrier: Retrier[Store],
) -> None:
    parser = subparsers.add_parser(name, help=help)
    sub = parser.add_subparsers(dest=f"{name}_command", required=True)

    listing = sub.add_parser("list", help=list_help)
    listing.add_argument("--config", help="path to config.yaml")
    listing.add_argument("--failed", action="store_true", help=failed_help)
    listing.add_argument("--limit", type=int, default=50)

    async def on_store(config: str | None, work: Callable[[Store], Coroutine[Any, Any, int]]) -> int:
        db, store = await opener(load_or_exit(config))
        try:
            return await work(store)
        finally:
            await db.close()

    def run_list(args: argparse.Namespace) -> int:
        return asyncio.run(on_store(args.config, lambda store: lister(store, args.failed, args.limit)))

    listing.set_defaults(func=run_list)

    retry = sub.add_parser("retry", help=retry_help)
    retry.add_argument(id_name)
    retry.add_argument("--config", help="path to config.yaml")
    retry.add_argument("--wait", type=float, default=30.0, help="seconds to wait for the outcome")

    def run_retry(args: argparse.Namespace) -> int:
        record_id = getattr(args, id_name)
        return asyncio.run(on_store(args.config, lambda store: retrier(store, record_id, args.wait)))

    retry.set_defaults(func=run_retry)


async def retry_and_wait(
    queue: RetryQueue[Record],
    record_id: str,
    wait: float,
    *,
    noun: str,
    retryable: str,
    label: Callable[[Record], str],
    outcome: Callable[[Record], tuple[int, str] | None],
    pending: str,
) -> int:
    """Queue ``record_id`` for a retry, then print its outcome once the service has run it.

    ``noun`` names a record (``delivery``) and ``retryable`` the ones that may be retried; ``label`` is
    shown after the id when it is queued; ``outcome`` reads a record the service has touched (an exit
    code and a line, or None while it is not done yet); ``pending`` is said when ``wait`` runs out
    (``{wait}`` is filled in). Returns the exit code.
    """
    before = await queue.get(record_id)
    if before is None:
        print(f"unknown {noun} {record_id}")
        return EXIT_FAILED
    if not await queue.request_retry(record_id):
        now = await queue.get(record_id)
        state = now.status if now else "unknown"
        print(f"{noun} {record_id} is {state}; only {retryable} can be retried")
        return EXIT_FAILED
    print(f"queued {record_id} ({label(before)}) for retry")
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        current = await queue.get(record_id)
        if current is None:
            continue
        if (done := outcome(current)) is not None:
            code, line = done
            print(line)
            return code
    print(pending.format(wait=f"{wait:g}"))
    return 0
