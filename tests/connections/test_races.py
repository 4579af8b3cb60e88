"""SCENARIOS 27-29 under real concurrency: several workers (each its own engine and pool, as separate
processes would have) against one database — SQLite always, PostgreSQL when SWITCHBOARD_TEST_PG_URL is set.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator

import pytest

from bot.db import Database
from connections import CodeRejected, ConnectionStore, PlatformIdentity, TooManyPendingCodes
from connections import metadata as connections_metadata

PG_URL = os.environ.get("SWITCHBOARD_TEST_PG_URL")
WORKERS = 3


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param(
            "postgresql",
            marks=[
                pytest.mark.postgres,
                pytest.mark.skipif(
                    not PG_URL,
                    reason="set SWITCHBOARD_TEST_PG_URL=postgresql+asyncpg://… to run the PostgreSQL races",
                ),
            ],
        ),
    ]
)
async def workers(request, tmp_path) -> AsyncIterator[list[ConnectionStore]]:  # type: ignore[no-untyped-def]
    url = f"sqlite+aiosqlite:///{tmp_path / 'race.db'}" if request.param == "sqlite" else PG_URL
    databases = [Database(url) for _ in range(WORKERS)]
    await databases[0].create_schema([connections_metadata])
    try:
        yield [ConnectionStore(db.engine) for db in databases]
    finally:
        for db in databases:
            await db.close()


def _unique(prefix: str) -> str:
    """Names unique per test run, so a shared PostgreSQL database needs no clean-up between runs."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def test_one_code_consumed_by_several_workers_at_once_binds_exactly_once(workers):
    owner = _unique("alice")
    for _round in range(5):
        issued = await workers[0].create_code(owner, "telegram")
        identities = [PlatformIdentity("telegram", "", _unique("sender")) for _ in range(6)]
        results = await asyncio.gather(
            *(
                workers[i % len(workers)].bind_with_code(issued.code, identity)
                for i, identity in enumerate(identities)
            ),
            return_exceptions=True,
        )
        wins = [r for r in results if not isinstance(r, BaseException)]
        losses = [r for r in results if isinstance(r, BaseException)]
        assert len(wins) == 1
        assert all(isinstance(r, CodeRejected) and r.reason == "used" for r in losses), losses
        assert wins[0].connection.owner == owner


async def test_two_owners_racing_for_one_identity_leave_exactly_one_active_owner(workers):
    for _round in range(5):
        identity = PlatformIdentity("telegram", "", _unique("shared"))
        owners = [_unique("owner") for _ in range(4)]
        codes = [await workers[0].create_code(owner, "telegram") for owner in owners]
        results = await asyncio.gather(
            *(workers[i % len(workers)].bind_with_code(code.code, identity) for i, code in enumerate(codes))
        )
        active = await workers[0].active_connections(identity)
        assert len(active) == 1
        # Binds were serialised: each later one revoked exactly the one before it.
        assert sorted(r.replaced_owner is None for r in results) == [False, False, False, True]
        assert active[0].owner in owners
        assert await workers[1].owner_of(identity) == active[0].owner


async def test_concurrent_code_creators_never_exceed_five_pending(workers):
    owner = _unique("bob")
    results = await asyncio.gather(
        *(workers[i % len(workers)].create_code(owner, "slack") for i in range(12)),
        return_exceptions=True,
    )
    made = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(made) == 5
    assert len(refused) == 7 and all(isinstance(r, TooManyPendingCodes) for r in refused), refused
    assert await workers[2].pending_codes(owner, "slack") == 5
    # The cap is per provider: another platform still gets codes.
    await workers[0].create_code(owner, "telegram")


async def test_a_revoked_identity_can_be_bound_again(workers):
    owner = _unique("carol")
    identity = PlatformIdentity("discord", "guild-1", _unique("member"))
    first = await workers[0].bind_with_code((await workers[0].create_code(owner, "discord")).code, identity)
    assert await workers[1].revoke(owner, first.connection.id) is not None
    assert await workers[1].owner_of(identity) is None
    again = await workers[2].bind_with_code((await workers[2].create_code(owner, "discord")).code, identity)
    assert not again.already_bound
    assert [c.id for c in await workers[0].active_connections(identity)] == [again.connection.id]
