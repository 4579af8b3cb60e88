"""Shutting down in the middle of a checkpoint write must not lock the next start out of its history.

LangGraph saves checkpoints from background tasks, so a stop can land between one write's statement
and its commit. agent/sqlite_checkpoints.py explains why that once left the SQLite file locked for
the next runtime in the same process; the crash-and-restart test in
tests/foundation/test_bus_and_inbox.py hit it only now and then. Here the cut-off write is made on
purpose, so the outcome does not depend on timing.
"""

from __future__ import annotations

from agent.runtime import AgentRuntime
from channels.memory import MemoryChannel
from tests.agent.helpers import agent_settings
from tests.harness import Harness


async def test_a_checkpoint_write_cut_off_by_shutdown_does_not_lock_out_the_next_start(tmp_path, llm):
    settings = agent_settings(tmp_path, llm)
    chat = MemoryChannel("memory")
    first = Harness(settings, channels={"memory": chat})
    await first.start()
    await first.service.agent_ready()
    runtime = first.service.agent
    assert isinstance(runtime, AgentRuntime)
    saver = runtime.checkpointer
    # What a saver write looks like when shutdown cuts it off: statement run, commit not yet, and its
    # cursor still referenced (as the cut-off task's traceback keeps it).
    cut_off = await saver.conn.cursor()  # type: ignore[union-attr]
    await cut_off.executemany(
        "INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel) "
        "VALUES (?, '', ?, ?, ?, ?)",
        [("cut-off-thread", "cut-off-checkpoint", "cut-off-task", 0, "messages")],
    )
    await first.stop()

    second = Harness(settings, channels={"memory": chat})
    await second.start()
    try:
        # The answer needs checkpoint writes: with the file still locked they failed ("database is locked").
        assert await second.ask("are you still there?", channel=chat) == "echo: are you still there?"
    finally:
        await second.stop()
    assert cut_off is not None  # held to here on purpose: the first runtime's cursor outlives its close
