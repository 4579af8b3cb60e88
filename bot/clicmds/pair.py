"""``switchboard pair list|approve|deny|remove``: pairing from the operator's shell (docs/security.md).

The same store ``/pair`` uses in chat, on the configured database, so an operator can let a stranger in
without being one of a channel's ``admins`` — e.g. before any admin is configured. Approving here does
not message the sender (this command talks to no platform): their next message is answered.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from config.schema import Settings

if TYPE_CHECKING:
    from bot.db import Database
    from bot.pairing import PairingStore

EXIT_FAILED = 1


async def _open(settings: Settings) -> tuple[Database, PairingStore]:
    from bot import pairing
    from bot.db import Database

    db = Database(settings.database.url)
    async with db.engine.begin() as conn:
        await conn.run_sync(pairing.metadata.create_all)
    return db, pairing.PairingStore(db)


async def list_requests(settings: Settings, provider: str) -> int:
    db, store = await _open(settings)
    try:
        waiting = await store.pending(provider, time.time())
    finally:
        await db.close()
    if not waiting:
        print(f"nobody is waiting for pairing on {provider}")
        return 0
    print(f"{'CODE':10} {'SENDER':24} NAME")
    for request in waiting:
        print(f"{request.code:10} {request.sender_id:24} {request.sender_name or '-'}")
    return 0


async def decide(settings: Settings, provider: str, code: str, *, approve: bool) -> int:
    db, store = await _open(settings)
    try:
        now = time.time()
        found = (
            await store.approve(provider, code, "operator:cli", now)
            if approve
            else await store.deny(provider, code, now)
        )
    finally:
        await db.close()
    if found is None:
        print(f"no open pairing request {code.upper()} on {provider} (codes expire after an hour)")
        return EXIT_FAILED
    if approve:
        print(f"paired: {found.sender_name or found.sender_id} ({found.sender_id}) is a member of {provider} now; "
              "their next message is answered")  # fmt: skip
    else:
        print(f"denied pairing request {found.code}")
    return 0


async def remove(settings: Settings, provider: str, sender_id: str) -> int:
    db, store = await _open(settings)
    try:
        removed = await store.remove(provider, sender_id)
    finally:
        await db.close()
    print(
        f"removed: {sender_id} is a guest again" if removed else f"{sender_id} was not paired on {provider}"
    )
    return 0 if removed else EXIT_FAILED


def register(subparsers: Any, load_or_exit: Callable[[str | None], Settings]) -> None:
    parser = subparsers.add_parser("pair", help="let strangers talk to the bot: pairing requests and members")
    sub = parser.add_subparsers(dest="pair_command", required=True)

    def command(
        name: str,
        help: str,
        argument: str | None,
        run: Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, int]],
    ) -> None:
        action = sub.add_parser(name, help=help)
        action.add_argument("provider", help="the platform: telegram, slack, discord, feishu, dingtalk")
        if argument:
            action.add_argument(argument)
        action.add_argument("--config", help="path to config.yaml")
        action.set_defaults(func=lambda args: asyncio.run(run(load_or_exit(args.config), args)))

    command("list", "open pairing requests of a platform", None, lambda s, a: list_requests(s, a.provider))
    command(
        "approve",
        "make a code's sender a member",
        "code",
        lambda s, a: decide(s, a.provider, a.code, approve=True),
    )
    command(
        "deny", "drop a pairing request", "code", lambda s, a: decide(s, a.provider, a.code, approve=False)
    )
    command(
        "remove",
        "make a paired sender a guest again",
        "sender_id",
        lambda s, a: remove(s, a.provider, a.sender_id),
    )
