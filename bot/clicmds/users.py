"""``switchboard users export|delete OWNER``: one person's data, as JSON or gone (docs/data.md).

``export`` prints (or writes) everything the service keeps of a person: their rows in every table,
their connected accounts, thread ids and the list of their files. ``delete`` removes all of it — rows,
the agent's stored conversation history (checkpoints) and the files under ``data_dir/users/OWNER`` —
after ``--yes``. OWNER is a user id (``alice``) or an unconnected account's owner id
(``telegram:-:4242``, as ``inbox list`` and the logs show it).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from config.schema import Settings

if TYPE_CHECKING:
    from bot.db import Database
    from bot.people import PeopleData

EXIT_FAILED = 1


async def _open(settings: Settings) -> tuple[Database, PeopleData]:
    from agent.tables import metadata as agent_metadata
    from bot import approvals, inbox, pairing, schedules, threads
    from bot.db import Database
    from bot.people import PeopleData
    from bot.spend import tables as spend_tables
    from connections.tables import metadata as connections_metadata

    db = Database(settings.database.url)
    async with db.engine.begin() as conn:  # a database the service never used answers "nothing found"
        for metadata in (
            connections_metadata,
            agent_metadata,
            approvals.metadata,
            inbox.metadata,
            pairing.metadata,
            schedules.metadata,
            threads.metadata,
            spend_tables.metadata,
        ):
            await conn.run_sync(metadata.create_all)
    return db, PeopleData(db, Path(settings.data_dir))


async def export(settings: Settings, owner: str, out: str | None) -> int:
    db, people = await _open(settings)
    try:
        data = await people.export(owner)
    finally:
        await db.close()
    if not data["tables"] and not data["files"]:
        print(f"nothing is stored for {owner!r}", file=sys.stderr)
        return EXIT_FAILED
    text = json.dumps(data, indent=2, ensure_ascii=False, default=str)
    if out:
        await asyncio.to_thread(Path(out).write_text, text + "\n", encoding="utf-8")
        print(f"wrote {owner}'s data to {out}")
    else:
        print(text)
    return 0


async def delete(settings: Settings, owner: str, yes: bool) -> int:
    from agent.thread_history import delete_histories

    db, people = await _open(settings)
    try:
        person = await people.find(owner)
        if not yes:
            print(
                f"this deletes everything of {owner!r}: {len(person.thread_ids)} thread(s), "
                f"{len(person.accounts)} account(s), memory, schedules and files; run again with --yes"
            )
            return EXIT_FAILED
        histories = await delete_histories(settings.database.url, db.checkpoint_path, person.thread_ids)
        counts = await people.delete(owner)
    finally:
        await db.close()
    if not counts and not histories:
        print(f"nothing was stored for {owner!r}")
        return EXIT_FAILED
    summary = ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))
    print(f"deleted {owner}: {summary}; conversation history of {histories} thread(s)")
    return 0


def register(subparsers: Any, load_or_exit: Callable[[str | None], Settings]) -> None:
    parser = subparsers.add_parser("users", help="one person's data: export it as JSON, or delete all of it")
    sub = parser.add_subparsers(dest="users_command", required=True)

    exporting = sub.add_parser("export", help="print (or --out FILE) everything stored of a person, as JSON")
    exporting.add_argument("owner", help="user id, or an unconnected account's owner id (telegram:-:4242)")
    exporting.add_argument("--out", help="write the JSON here instead of printing it")
    exporting.add_argument("--config", help="path to config.yaml")
    exporting.set_defaults(func=lambda a: asyncio.run(export(load_or_exit(a.config), a.owner, a.out)))

    deleting = sub.add_parser("delete", help="delete everything of a person: rows, history, files")
    deleting.add_argument("owner", help="user id, or an unconnected account's owner id (telegram:-:4242)")
    deleting.add_argument("--yes", action="store_true", help="really delete (without it: say what would go)")
    deleting.add_argument("--config", help="path to config.yaml")
    deleting.set_defaults(func=lambda a: asyncio.run(delete(load_or_exit(a.config), a.owner, a.yes)))
