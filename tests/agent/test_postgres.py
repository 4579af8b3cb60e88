"""On PostgreSQL, thread history lives in the database's checkpointer and survives a restart.

Runs when SWITCHBOARD_TEST_PG_URL points at a scratch database (CI sets it).
"""

from __future__ import annotations

import os
import uuid

import pytest

from tests.agent.helpers import agent_settings
from tests.fakes.openai_server import Reply, ToolCall
from tests.harness import Harness

PG_URL = os.environ.get("SWITCHBOARD_TEST_PG_URL")

# The lead adds langgraph-checkpoint-postgres + psycopg[binary] to the dependencies; without them the
# runtime falls back to an in-memory checkpointer and this test has nothing to check.
pytest.importorskip("langgraph.checkpoint.postgres.aio")

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not PG_URL, reason="set SWITCHBOARD_TEST_PG_URL=postgresql+asyncpg://… to run"),
]


async def test_on_postgres_a_thread_with_tool_calls_continues_after_a_restart(tmp_path, llm):
    settings = agent_settings(tmp_path, llm, database={"url": PG_URL})
    chat = f"pg-chat-{uuid.uuid4().hex[:8]}"  # the test database is shared between runs
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "echo from-a-checkpoint"})]), Reply(text="ran it")
    )
    async with Harness.running(settings) as first:
        assert await first.ask("run something", chat=chat, message_id=f"{chat}-1") == "ran it"
    async with Harness.running(settings) as second:
        await second.ask("and now?", chat=chat, message_id=f"{chat}-2")
    sent = llm.completions[-1]["messages"]
    assert [m["role"] for m in sent if m["role"] != "system"] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert any(m["role"] == "tool" and "from-a-checkpoint" in m["content"] for m in sent)
