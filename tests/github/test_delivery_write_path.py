"""The delivery log's write path on SQLite: a 2xx means the delivery is committed, whether its batch
committed on the event loop or had to wait for another writer (off the loop), and a rejected delivery
leaves nothing behind."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from pathlib import Path
from typing import Any

from bot.retention import CHUNK_ROWS
from config.schema import Settings
from tests.github.conftest import comment_payload, github_settings, running_service


def stored_row(settings: Settings, delivery: str, columns: str) -> tuple[Any, ...] | None:
    """The delivery's ``columns`` as another process sees them: a second connection reads only
    committed rows."""
    path = Path(settings.database.url.removeprefix("sqlite+aiosqlite:///"))
    conn = sqlite3.connect(path)
    try:
        row = conn.execute(
            f"SELECT {columns} FROM github_deliveries WHERE delivery_id = ?", (delivery,)
        ).fetchone()
    finally:
        conn.close()
    return tuple(row) if row else None


def stored(settings: Settings, delivery: str) -> tuple[Any, ...] | None:
    """(status, event), or None when the delivery is not committed."""
    return stored_row(settings, delivery, "status, event")


async def test_every_acknowledged_delivery_of_a_burst_is_committed_once(tmp_path, llm, github):
    """Thirty deliveries at once (they share commits) plus a redelivery of each: every 200 is on disk
    for a second connection, and each redelivery is answered as the duplicate it is."""
    settings = github_settings(tmp_path, llm, github)
    ids = [str(uuid.uuid4()) for _ in range(30)]
    async with running_service(settings) as sb:
        data = comment_payload("no mention here")  # stored and acknowledged, no agent run
        first = await asyncio.gather(*(sb.deliver("issue_comment", data, delivery=i) for i in ids))
        assert [r.status_code for r in first] == [200] * len(ids)
        assert [stored(settings, i) for i in ids] == [("done", "issue_comment")] * len(ids)
        again = await asyncio.gather(*(sb.deliver("issue_comment", data, delivery=i) for i in ids))
        assert [(r.status_code, r.json()["duplicate"]) for r in again] == [(200, True)] * len(ids)
        forged = await sb.deliver("issue_comment", data, delivery="forged-1", secret="not-the-secret")
        assert forged.status_code == 401
    assert stored(settings, "forged-1") is None


async def test_a_delivery_that_finds_the_database_locked_is_acknowledged_only_once_committed(
    tmp_path, llm, github
):
    """Another writer (``switchboard webhooks retry``, say) holds SQLite's lock: the delivery waits for
    it without holding up the service (the health check still answers), then commits and gets its 200."""
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        warm = await sb.deliver("issue_comment", comment_payload("before"), delivery="before-lock")
        assert warm.status_code == 200
        path = Path(settings.database.url.removeprefix("sqlite+aiosqlite:///"))
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        try:
            delivering = asyncio.create_task(
                sb.deliver("issue_comment", comment_payload("while locked"), delivery="during-lock")
            )
            await asyncio.sleep(0.3)
            assert not delivering.done(), "acknowledged before the delivery could be committed"
            health = await asyncio.wait_for(sb.client.get("/health"), 5)
            assert health.status_code in (200, 503)
            assert stored(settings, "during-lock") is None
        finally:
            other.execute("COMMIT")
            other.close()
        response = await asyncio.wait_for(delivering, 15)
        assert response.status_code == 200 and response.json()["duplicate"] is False
        assert stored(settings, "during-lock") == ("done", "issue_comment")


async def test_a_delivery_that_fires_nothing_keeps_its_outcome_but_not_its_payload(tmp_path, llm, github):
    """Most of a busy repository's deliveries mention nobody: the log keeps the fact and the reason (so
    a redelivery is a duplicate, and `webhooks list` says why nothing ran), not the 5-25 KB payload.
    A delivery that starts an agent keeps its payload, which a retry of a failed fan-out re-reads."""
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        ignored = await sb.deliver("issue_comment", comment_payload("no mention here"), delivery="quiet-1")
        fired = await sb.deliver("issue_comment", comment_payload("@switchboard-bot hi"), delivery="loud-1")
        assert (ignored.status_code, fired.status_code) == (200, 200)
        await sb.idle()
        again = await sb.deliver("issue_comment", comment_payload("no mention here"), delivery="quiet-1")
        assert again.json()["duplicate"] is True
    status, body, dispatch = stored_row(settings, "quiet-1", "status, body, dispatch") or ()
    assert (status, body) == ("done", "")
    assert dispatch is not None and "not mentioned" in dispatch
    status, body, _ = stored_row(settings, "loud-1", "status, body, dispatch") or ()
    assert status == "done" and "@switchboard-bot hi" in body
    assert len(llm.completions) == 1


async def test_finished_deliveries_past_the_retention_period_are_deleted_failed_ones_kept(
    tmp_path, llm, github
):
    settings = github_settings(tmp_path, llm, github, bus={"queue_size": 1})
    github.pause("create_comment")  # the first turn holds the only slot, so the second delivery fails
    async with running_service(settings) as sb:
        fired = await sb.deliver("issue_comment", comment_payload("@switchboard-bot one", number=1))
        failed = await sb.deliver(
            "issue_comment", comment_payload("@switchboard-bot two", number=2), delivery="fail-1"
        )
        assert (fired.status_code, failed.status_code) == (200, 503)
        github.resume("create_comment")
        await sb.idle()
        old = await sb.deliver("issue_comment", comment_payload("no mention"), delivery="old-1")
        recent = await sb.deliver("issue_comment", comment_payload("no mention"), delivery="recent-1")
        assert (old.status_code, recent.status_code) == (200, 200)
        path = Path(settings.database.url.removeprefix("sqlite+aiosqlite:///"))
        conn = sqlite3.connect(path)
        with conn:  # a month passes for two of them
            conn.execute(
                "UPDATE github_deliveries SET updated_at = updated_at - 31 * 86400 "
                "WHERE delivery_id IN ('old-1', 'fail-1')"
            )
        conn.close()
        deleted = await sb.service.retention.run_once()
        assert deleted["GitHub deliveries"] == 1
        assert stored(settings, "old-1") is None
        assert stored(settings, "recent-1") == ("done", "issue_comment")
        assert stored(settings, "fail-1") == ("failed", "issue_comment")


async def test_a_backlog_larger_than_one_chunk_is_deleted_in_one_pass(tmp_path, llm, github):
    """The first pass after an upgrade may have months to delete: it goes on chunk after chunk."""
    settings = github_settings(tmp_path, llm, github)
    ids = [f"old-{i}" for i in range(CHUNK_ROWS * 2 + 37)]
    async with running_service(settings) as sb:
        data = comment_payload("no mention here")
        answers = await asyncio.gather(*(sb.deliver("issue_comment", data, delivery=i) for i in ids))
        assert {r.status_code for r in answers} == {200}
        path = Path(settings.database.url.removeprefix("sqlite+aiosqlite:///"))
        conn = sqlite3.connect(path)
        with conn:
            conn.execute("UPDATE github_deliveries SET updated_at = updated_at - 31 * 86400")
        conn.close()
        deleted = await sb.service.retention.run_once()
    assert deleted["GitHub deliveries"] == len(ids)
    assert stored(settings, ids[0]) is None and stored(settings, ids[-1]) is None
