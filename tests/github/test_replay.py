"""A signed body replayed under a new ``X-GitHub-Delivery`` id (issue 28): GitHub's signature covers the
body only, so anyone who saw one delivery could send it again with a fresh id. The event's identity
(event, action, object id, update time) is stored with a delivery that runs an agent; the same event
again is a duplicate: 200, ``duplicate: true``, nothing runs."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from pathlib import Path

from tests.fakes.openai_server import Reply
from tests.github.conftest import BOT, REPO, comment_payload, github_settings, payload, running_service


async def test_a_replayed_body_under_a_new_delivery_id_is_a_duplicate_and_runs_nothing(
    tmp_path, llm, github, caplog
):
    llm.script(Reply(text="answered once"))
    settings = github_settings(tmp_path, llm, github)
    data = comment_payload(f"@{BOT} please look at this")
    caplog.set_level(logging.WARNING, logger="webhooks.processor")
    async with running_service(settings) as sb:
        first = await sb.deliver("issue_comment", data, delivery="original-1")
        await sb.idle()
        replay = await sb.deliver("issue_comment", data, delivery="replayed-2")
        await sb.idle()
        # An edit of the same comment is a new event (its updated_at moved): it is not a replay.
        edited = dict(data, comment={**data["comment"], "updated_at": "2019-05-15T15:25:00Z"})
        later = await sb.deliver("issue_comment", edited, delivery="edited-3")
        await sb.idle()

    assert first.json()["duplicate"] is False and first.json()["dispatch"]["fired"] == ["reviewer"]
    assert replay.status_code == 200
    assert replay.json()["duplicate"] is True
    assert replay.json()["dispatch"]["fired"] == ["reviewer"]  # what the original did, not this one
    assert later.json()["duplicate"] is False
    assert len(llm.completions) == 2
    assert len(github.comments_on(REPO, 1)) == 2
    assert any("repeats the event of delivery original-1" in r.getMessage() for r in caplog.records)


async def test_the_same_event_arriving_under_several_ids_at_once_runs_once(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    data = payload("pull_request.opened")
    async with running_service(settings) as sb:
        answers = await asyncio.gather(
            *(sb.deliver("pull_request", data, delivery=f"race-{i}") for i in range(5))
        )
        await sb.idle()
    assert [a.status_code for a in answers] == [200] * 5
    assert sorted(a.json()["duplicate"] for a in answers) == [False, True, True, True, True]
    assert len(llm.completions) == 1
    assert len(github.comments_on(REPO, 2)) == 1


# github_deliveries as the previous release created it: no identity column, no index on it.
OLD_DELIVERIES = """
CREATE TABLE github_deliveries (
    delivery_id VARCHAR(100) NOT NULL PRIMARY KEY, event VARCHAR(64) NOT NULL, action VARCHAR(64),
    body TEXT NOT NULL, status VARCHAR(16) NOT NULL, attempts INTEGER NOT NULL, dispatch TEXT,
    error TEXT, created_at FLOAT NOT NULL, updated_at FLOAT NOT NULL
);
CREATE INDEX ix_github_deliveries_status ON github_deliveries (status);
INSERT INTO github_deliveries VALUES ('from-last-release', 'issue_comment', 'created', '', 'done', 1, NULL, NULL,
    {now}, {now});
"""


async def test_a_previous_releases_delivery_log_is_upgraded_and_then_refuses_replays(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    db = Path(settings.database.url.removeprefix("sqlite+aiosqlite:///"))
    db.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db) as conn:
        conn.executescript(OLD_DELIVERIES.format(now=time.time()))
    data = comment_payload(f"@{BOT} after the upgrade")
    async with running_service(settings) as sb:
        first = await sb.deliver("issue_comment", data, delivery="new-1")
        replay = await sb.deliver("issue_comment", data, delivery="new-2")
        old = await sb.deliver("issue_comment", comment_payload("no mention"), delivery="from-last-release")
        await sb.idle()
    assert (first.json()["duplicate"], replay.json()["duplicate"], old.json()["duplicate"]) == (
        False,
        True,
        True,
    )
    assert len(llm.completions) == 1
    with sqlite3.connect(db) as conn:
        indexes = {row[1]: row[2] for row in conn.execute("PRAGMA index_list(github_deliveries)")}
    assert indexes.get("ix_github_deliveries_identity") == 1  # unique
