"""A long thread's stored history stays the size of the thread, not of every step it ever took.

LangGraph saves a checkpoint per step, each with the whole message list; the runtime deletes the ones a
finished turn superseded (agent/checkpoint_pruning.py) and compacts long threads early
(``agent.compact_history_tokens``). Crash-and-resume with pruning on is covered by the restart tests
(tests/foundation/test_restart_order.py, tests/agent/test_checkpoint_shutdown.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agent.context import SUMMARY_MARKER
from agent.events import TurnFinished, TurnRequest
from agent.runtime import AgentRuntime, message_text
from tests.agent.helpers import agent_settings, system_text
from tests.fakes.openai_server import Reply, ToolCall, echo_reply


async def turn(runtime: AgentRuntime, thread_id: str, text: str) -> str:
    final = None
    async for event in runtime.run(TurnRequest(thread_id=thread_id, owner="owner", text=text)):
        if isinstance(event, TurnFinished):
            final = event
    assert final is not None
    return final.text


async def checkpoints_of(runtime: AgentRuntime, thread_id: str) -> int:
    assert runtime.checkpointer is not None
    return len([c async for c in runtime.checkpointer.alist({"configurable": {"thread_id": thread_id}})])


async def five_turns_keep_one_checkpoint_and_the_whole_thread(runtime: AgentRuntime, llm: Any) -> None:
    llm.script(Reply(tool_calls=[ToolCall("bash", {"command": "echo tooled"})]), Reply(text="ran it"))
    assert await turn(runtime, "long", "run something") == "ran it"
    for n in range(2, 6):
        assert await turn(runtime, "long", f"turn {n}") == f"echo: turn {n}"
    await turn(runtime, "other", "hello")
    # Without pruning: several checkpoints per turn (input, model, tools, model …), 15+ here.
    assert await checkpoints_of(runtime, "long") == 1
    assert await checkpoints_of(runtime, "other") == 1
    texts = [message_text(m) for m in await runtime.thread_messages("long")]
    assert texts[0] == "run something" and "tooled" in texts[2] and texts[-1] == "echo: turn 5"
    assert len(texts) == 12  # user, tool call, tool result, answer, then 4 × (user, answer)


async def test_after_five_turns_only_the_latest_checkpoint_remains_and_history_survives_a_restart(
    tmp_path: Path, llm: Any
) -> None:
    settings = agent_settings(tmp_path, llm)
    path = tmp_path / "checkpoints.db"
    runtime = AgentRuntime(settings, checkpoint_path=path)
    await runtime.start()
    try:
        await five_turns_keep_one_checkpoint_and_the_whole_thread(runtime, llm)
    finally:
        await runtime.close()
    again = AgentRuntime(settings, checkpoint_path=path)
    await again.start()
    try:
        assert await turn(again, "long", "still there?") == "echo: still there?"
        sent = [m["role"] for m in llm.completions[-1]["messages"] if m["role"] != "system"]
        assert sent == ["user", "assistant", "tool", "assistant"] + ["user", "assistant"] * 4 + ["user"]
        assert await checkpoints_of(again, "long") == 1
    finally:
        await again.close()


@pytest.mark.postgres
@pytest.mark.skipif(
    not os.environ.get("SWITCHBOARD_TEST_PG_URL"), reason="set SWITCHBOARD_TEST_PG_URL to run"
)
async def test_on_postgres_only_the_latest_checkpoint_remains(tmp_path: Path, llm: Any, pg_url: str) -> None:
    pytest.importorskip("langgraph.checkpoint.postgres.aio")
    runtime = AgentRuntime(agent_settings(tmp_path, llm, database={"url": pg_url}))
    await runtime.start()
    try:
        await five_turns_keep_one_checkpoint_and_the_whole_thread(runtime, llm)
    finally:
        await runtime.close()


async def test_a_long_thread_is_compacted_by_default_even_with_a_large_context_window(
    tmp_path: Path, llm: Any
) -> None:
    def reply(body: dict[str, Any]) -> Reply:
        if SUMMARY_MARKER in system_text(body):
            return Reply(text="SUMMARY-NOTE: numbered questions so far.")
        return echo_reply(body)

    llm.default_reply = reply
    settings = agent_settings(tmp_path, llm, agent={"compact_history_tokens": 1000})
    assert settings.models[0].context_tokens >= 100_000  # the window alone would never compact this
    padding = ("lorem ipsum dolor sit amet " * 20).strip()
    runtime = AgentRuntime(settings, checkpoint_path=tmp_path / "checkpoints.db")
    await runtime.start()
    try:
        for n in range(1, 21):
            assert await turn(runtime, "t", f"question {n} {padding}") == f"echo: question {n} {padding}"
        kept = await runtime.thread_messages("t")
    finally:
        await runtime.close()
    assert 2 <= len(kept) < 20  # 40 messages were said; older ones live on in the summary
    last = llm.completions[-1]
    assert "SUMMARY-NOTE" in system_text(last)
    assert "question 1 " not in str(last["messages"])
