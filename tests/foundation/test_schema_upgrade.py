"""A database written by the previous release is upgraded in place at start (bot/migrations.py).

What an operator would notice without the steps: the first approval request or ``/approval`` after an
upgrade fails with "no such column", because ``create_all`` never alters a table that exists.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from channels.memory import MemoryChannel
from tests.conftest import make_settings
from tests.harness import Harness

# The two tables as the previous release created them (before notice_ref and approval).
OLD_SCHEMA = """
CREATE TABLE conversations (
    provider VARCHAR(32) NOT NULL, workspace VARCHAR(200) NOT NULL, chat VARCHAR(200) NOT NULL,
    topic VARCHAR(200) NOT NULL, thread_id VARCHAR(64) NOT NULL UNIQUE, owner VARCHAR(200) NOT NULL,
    model VARCHAR(100), created_at FLOAT NOT NULL, updated_at FLOAT NOT NULL,
    PRIMARY KEY (provider, workspace, chat, topic)
);
CREATE TABLE approvals (
    id VARCHAR(16) NOT NULL PRIMARY KEY, thread_id VARCHAR(64) NOT NULL, requester VARCHAR(200) NOT NULL,
    message TEXT NOT NULL, command TEXT NOT NULL, reason VARCHAR(200) NOT NULL,
    status VARCHAR(16) NOT NULL, decided_by VARCHAR(200), created_at FLOAT NOT NULL, decided_at FLOAT
);
CREATE TABLE schema_version (step INTEGER NOT NULL PRIMARY KEY, name VARCHAR(200) NOT NULL);
INSERT INTO schema_version VALUES (1, 'discord_cursors');
INSERT INTO conversations VALUES ('memory', '', 'team', '', 'old-thread', 'memory:-:user-1', NULL, 1, 1);
"""


def columns(db: Path, table: str) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


async def test_a_previous_releases_database_gains_the_new_columns_and_keeps_its_conversations(tmp_path, llm):
    settings = make_settings(tmp_path, llm)
    db = tmp_path / "data" / "switchboard.db"
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as conn:
        conn.executescript(OLD_SCHEMA)
    chat = MemoryChannel("memory", admins=["user-1"])
    async with Harness.running(settings, channels={"memory": chat}) as h:
        group = {"chat": "team", "private": False, "mentioned": True}
        assert "now always" in await h.ask("/approval always", **group)
        conversation = await h.manager.threads.get(("memory", "", "team", ""))
        assert conversation is not None and conversation.thread_id == "old-thread"
        assert conversation.approval == "always"
    assert "notice_ref" in columns(db, "approvals") and "approval" in columns(db, "conversations")
