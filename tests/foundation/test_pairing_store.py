"""Pairing and the schedules' ``trust`` column on SQLite and PostgreSQL (bot/pairing.py, bot/migrations.py).

A database of the previous release (schedules without ``trust``, no pairing tables) is upgraded in place;
an approval is durable and taken once; a code is one per sender, expires, and only its platform's admin
can use it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from bot import migrations, pairing, schedules
from bot.db import Database
from bot.pairing import MAX_PENDING, PAIRING_TTL_SECONDS, PairingStore, TooManyRequests
from channels.memory import MemoryChannel
from tests.conftest import fresh_pg_database
from tests.foundation.test_cli import cli_env, config_for

OLD_SCHEDULES = """
CREATE TABLE schedules (
    id VARCHAR(16) NOT NULL PRIMARY KEY, owner VARCHAR(200) NOT NULL, conversation VARCHAR(800) NOT NULL,
    message TEXT NOT NULL, when_text VARCHAR(200) NOT NULL, cron VARCHAR(100), timezone VARCHAR(64) NOT NULL,
    next_at FLOAT, created_at FLOAT NOT NULL, cancelled_at FLOAT
)
"""


@pytest.fixture(params=["sqlite", "postgresql"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    async def opened(url: str) -> Database:
        database = Database(url)
        async with database.engine.begin() as conn:
            await conn.execute(text(OLD_SCHEDULES))
        await database.create_schema([schedules.metadata, pairing.metadata, migrations.metadata])
        return database

    if request.param == "sqlite":
        database = await opened(f"sqlite+aiosqlite:///{tmp_path / 'pairing.db'}")
        yield database
        await database.close()
    else:
        async with fresh_pg_database() as url:
            database = await opened(url)
            yield database
            await database.close()


async def test_an_old_database_is_upgraded_and_a_pairing_is_durable_and_taken_once(db: Database) -> None:
    async with db.engine.connect() as conn:
        columns = await conn.run_sync(
            lambda sync: {c["name"] for c in inspect(sync).get_columns("schedules")}
        )
    assert "trust" in columns

    store = PairingStore(db)
    chat = MemoryChannel("telegram")
    asking = chat.make_message("hi, can I use you?", chat="55", sender="55", sender_name="Mallory")
    first = await store.request(asking, now=1000.0)
    again = await store.request(chat.make_message("hello?", chat="55", sender="55"), now=1010.0)
    assert again.code == first.code and again.message.text == "hi, can I use you?"
    assert [r.sender_id for r in await store.pending("telegram", now=1020.0)] == ["55"]

    assert await store.approve("slack", first.code, "slack:boss", now=1030.0) is None  # another platform's
    approved = await store.approve("telegram", first.code.lower(), "telegram:boss", now=1030.0)
    assert approved is not None and approved.message.text == "hi, can I use you?"
    assert await store.approve("telegram", first.code, "telegram:boss", now=1031.0) is None  # used
    assert await PairingStore(db).is_paired("telegram", "55")  # a second store (instance) sees it
    assert not await store.is_paired("slack", "55")
    assert await store.remove("telegram", "55") and not await store.is_paired("telegram", "55")


async def test_codes_expire_and_strangers_cannot_grow_the_table_without_bound(db: Database) -> None:
    store = PairingStore(db)
    chat = MemoryChannel("telegram")
    old = await store.request(chat.make_message("hi", chat="1", sender="1"), now=0.0)
    assert await store.approve("telegram", old.code, "telegram:boss", now=PAIRING_TTL_SECONDS + 1) is None
    for sender in range(MAX_PENDING):
        await store.request(chat.make_message("hi", chat=str(sender), sender=str(sender)), now=10_000.0)
    with pytest.raises(TooManyRequests):
        await store.request(chat.make_message("hi", chat="x", sender="x"), now=10_001.0)
    # Once they expire there is room again.
    later = 10_000.0 + PAIRING_TTL_SECONDS + 1
    assert (await store.request(chat.make_message("hi", chat="x", sender="x"), now=later)).sender_id == "x"


async def test_the_operator_pairs_from_the_shell(tmp_path: Path) -> None:
    config = config_for(tmp_path, "http://127.0.0.1:9/v1")
    url = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'sb.db'}"
    (tmp_path / "data").mkdir()
    db = Database(url)
    await db.create_schema([pairing.metadata])
    store = PairingStore(db)
    request = await store.request(
        MemoryChannel("telegram").make_message("hi", chat="77", sender="77", sender_name="Mallory"),
        now=time.time(),
    )

    def switchboard(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "bot", "pair", *args, "--config", str(config)]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, env=cli_env())

    listing = switchboard("list", "telegram")
    approved = switchboard("approve", "telegram", request.code.lower())
    again = switchboard("approve", "telegram", request.code)
    try:
        assert listing.returncode == 0, listing.stderr
        assert listing.stdout.splitlines()[1].split() == [request.code, "77", "Mallory"]
        assert approved.returncode == 0, approved.stderr
        assert approved.stdout.strip() == (
            "paired: Mallory (77) is a member of telegram now; their next message is answered"
        )
        assert again.returncode == 1
        assert "no open pairing request" in again.stdout
        assert await store.is_paired("telegram", "77")
    finally:
        await db.close()
