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


async def test_on_postgres_a_thread_with_tool_calls_continues_after_a_restart(tmp_path, llm, pg_url):
    # A database of its own: on PostgreSQL every instance on a database shares its work, so another
    # test's service on a shared database could claim (and answer) this test's messages.
    settings = agent_settings(tmp_path, llm, database={"url": pg_url})
    chat = f"pg-chat-{uuid.uuid4().hex[:8]}"
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


async def test_on_postgres_compaction_goal_steps_memory_cursors_and_usage_work(tmp_path, llm, pg_url):
    from agent.context import SUMMARY_MARKER
    from tests.agent.helpers import system_text
    from tests.agent.test_context import summarising

    llm.default_reply = summarising
    settings = agent_settings(tmp_path, llm, database={"url": pg_url})
    async with Harness.running(settings) as first:
        for n in range(1, 4):
            await first.ask(f"turn {n} on postgres", message_id=f"pg-{n}")
        assert (await first.ask("/compact", message_id="pg-c")).startswith("🗜 Compacted: 4 earlier")
    async with Harness.running(settings) as second:
        await second.ask("after restart", message_id="pg-r")
        status = await second.ask("/status", message_id="pg-s")
    body = [b for b in llm.completions if SUMMARY_MARKER not in system_text(b)][-1]
    assert "SUMMARY-NOTE" in system_text(body)
    assert [m["content"] for m in body["messages"] if m["role"] == "user"] == [
        "turn 3 on postgres",
        "after restart",
    ]
    assert "over 4 turn(s)" in status


async def test_on_postgres_goal_steps_and_memory_clear_are_durable(tmp_path, llm, pg_url):
    import json

    from agent.goals import EVALUATOR_MARKER
    from tests.agent.helpers import system_text
    from tests.agent.test_memory_durability import kiwi_memory
    from tests.fakes.openai_server import last_user_text

    def reply(body):  # type: ignore[no-untyped-def]
        if EVALUATOR_MARKER in system_text(body):
            done = "[Goal continuation 2/8]" in last_user_text(body)
            return Reply(text=json.dumps({"decision": "satisfied" if done else "continue", "reason": "ok"}))
        return kiwi_memory(body)

    llm.default_reply = reply
    settings = agent_settings(tmp_path, llm, remember=True, database={"url": pg_url})
    async with Harness.running(settings) as first:
        await first.ask("I grow kiwis", message_id="k1")
        assert "Grows kiwis" in await first.ask("/memory", message_id="k2")
        assert "Forgot everything" in await first.ask("/memory clear", message_id="k3")
        await first.chat.say("/goal tidy up", message_id="k4")
        await first.chat.wait_for_text("🎯 Goal reached: ok", timeout=30)
        await first.idle()
        steps = await first.service.agent.goals.store.unfinished()  # type: ignore[union-attr]
    assert steps == []
    async with Harness.running(settings) as second:
        await second.ask("anything new?", message_id="k5")
        assert await second.ask("/memory", message_id="k6") == "I don't remember anything about you yet."
        assert "Status: reached — 2/8 continuations used" in await second.ask("/goal", message_id="k7")


async def test_on_postgres_every_connection_comes_back_after_the_server_dropped_them_all(
    tmp_path, llm, pg_url
):
    """What a PostgreSQL restart does to a running service, on the shared server: every connection of
    the test's database is terminated by the server (the agent's checkpoints, the engine's pool, the
    cluster's LISTEN). The next turn is answered normally, with the thread's history, without a restart
    of the service; before, the checkpointer's one connection stayed dead and every turn failed."""
    import asyncpg
    from sqlalchemy.engine import make_url

    settings = agent_settings(tmp_path, llm, database={"url": pg_url})
    async with Harness.running(settings) as h:
        assert await h.ask("first", message_id="r1") == "echo: first"
        admin = await asyncpg.connect(make_url(pg_url).set(drivername="postgresql").render_as_string(False))
        try:
            dropped = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        finally:
            await admin.close()
        assert dropped >= 2  # at least the checkpoint pool's and the LISTEN connection
        assert await h.ask("second", message_id="r2") == "echo: second"
        assert (await h.service.readiness()) == (None, None, None)
    sent = llm.completions[-1]["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["first", "second"]
