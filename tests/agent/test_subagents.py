"""Subagents (docs/subagents.md): the ``task`` tool runs jobs in parallel, within their limits, and stops.

The runtime is real (LangGraph, the sandbox, the database); the model is the fake OpenAI server, which
tells the turn's requests from each subagent's by their prompts (``script_for``) and holds answers back
(``Hold``) to prove that two subagents' model calls were in flight at the same time. The task cards are
the bot's side of the seam (agent.events.TaskReporter); here a recorder stands in for them.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agent import tables as agent_tables
from agent.events import (
    CHAT_ONLY_PROFILE,
    FULL_PROFILE,
    ApprovalDecision,
    TaskStatus,
    ToolProfile,
    TrustLevel,
    TurnFinished,
    TurnRequest,
)
from agent.runtime import AgentRuntime
from agent.subagents import task_id_for
from agent.task_store import TaskStore
from bot.db import Database
from tests.agent.helpers import agent_settings, tool_results, wait_until
from tests.agent.test_sandbox import HEARTBEAT, beat, beating
from tests.fakes.openai_server import FakeOpenAI, Hold, Reply, ToolCall, prompt_text
from tests.harness import Harness

pytestmark = pytest.mark.slow  # real sandboxed processes and a fake model server

PARENT = "PARENT-PROMPT-7731"


class Cards:
    """Records what the agent tells the chat's task cards; Stop is an event the test sets."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []  # (what, task_id, text or status)
        self.stops: dict[str, asyncio.Event] = {}

    async def started(self, *, task_id: str, title: str, kind: str) -> None:
        self.calls.append(("started", task_id, title))

    async def step(self, *, task_id: str, text: str, status: TaskStatus = "running") -> None:
        self.calls.append((f"step:{status}", task_id, text))

    async def finished(self, *, task_id: str, status: TaskStatus, result: str) -> None:
        self.calls.append((f"finished:{status}", task_id, result))

    def stop_requested(self, task_id: str) -> asyncio.Event:
        return self.stops.setdefault(task_id, asyncio.Event())

    def ids(self, what: str) -> list[str]:
        return [task_id for kind, task_id, _ in self.calls if kind == what]


@asynccontextmanager
async def runtime_for(
    tmp_path: Path, llm: FakeOpenAI, database_url: str | None = None, **subagents: Any
) -> AsyncIterator[AgentRuntime]:
    settings = agent_settings(
        tmp_path, llm, agent={"system_prompt": PARENT, "subagents": {"enabled": True, **subagents}}
    )
    if database_url is not None:
        settings.database.url = database_url
    db = Database(settings.database.url)
    await db.create_schema([agent_tables.metadata])
    runtime = AgentRuntime(settings, checkpoint_path=tmp_path / "checkpoints.db", engine=db.engine)
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.close()
        await db.close()


class Approver:
    """The chat's approval gate (the bot's side): a person who says yes, and what they were asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def approve(
        self, command: str, reason: str, *, patterns: Sequence[str] = (), trust: TrustLevel = "member"
    ) -> ApprovalDecision:
        self.asked.append(command)
        return ApprovalDecision(True, "approved in the chat")


async def turn(
    runtime: AgentRuntime,
    text: str,
    cards: Cards | None = None,
    thread: str = "thread-1",
    approvals: Approver | None = None,
    profile: ToolProfile = FULL_PROFILE,
) -> str:
    final = None
    request = TurnRequest(
        thread_id=thread, owner="owner-1", text=text, tasks=cards, approvals=approvals, profile=profile
    )
    async for event in runtime.run(request):
        if isinstance(event, TurnFinished):
            final = event
    assert final is not None
    return final.text


def task(title: str, prompt: str, kind: str = "general") -> ToolCall:
    return ToolCall("task", {"title": title, "prompt": prompt, "kind": kind})


def requests_for(llm: FakeOpenAI, marker: str) -> list[dict[str, Any]]:
    return [body for body in llm.completions if marker in prompt_text(body)]


def offered(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


async def test_two_tasks_run_at_the_same_time_and_the_turn_answers_once_with_both_results(tmp_path, llm):
    hold = Hold()
    llm.script_for(
        PARENT,
        Reply(tool_calls=[task("count", "JOB-A: count the files"), task("size", "JOB-B: measure them")]),
        Reply(text="Both jobs are done."),
    )
    llm.script_for("JOB-A", Reply(text="RESULT-A: 3 files", hold=hold))
    llm.script_for("JOB-B", Reply(text="RESULT-B: 12 kB", hold=hold))
    cards = Cards()
    async with runtime_for(tmp_path, llm) as runtime:
        running = asyncio.create_task(turn(runtime, "do both jobs", cards))
        try:
            # Both subagents' model calls wait at the hold at once: they overlap (sequential calls never would).
            await asyncio.to_thread(hold.wait_for_waiting, 2)
        finally:
            hold.open()
        answer = await running
        assert runtime.tasks is not None
        # Started together: the order of their rows is whichever was written first.
        stored = sorted(await runtime.tasks.tasks_of_thread("thread-1"), key=lambda t: t.title)
        steps = {t.task_id: await runtime.tasks.steps(t.task_id) for t in stored}
        assert runtime.usage is not None
        usage = await runtime.usage.get("thread-1")
    assert answer == "Both jobs are done."
    # The subagents' tokens count for the turn: 4 model calls of 10 prompt tokens each (the fake's count).
    assert usage is not None and usage.last_input == 40
    parent = requests_for(llm, PARENT)
    assert len(parent) == 2  # one call that delegated, one that answered: the turn answered once
    results = tool_results(parent[1])
    assert len(results) == 2
    assert results[0].startswith("[task task-") and " done: general" in results[0]
    assert results[0].endswith("RESULT-A: 3 files") and results[1].endswith("RESULT-B: 12 kB")
    # Each subagent had its own context: its brief, none of the turn's conversation; and no `task` tool.
    for marker in ("JOB-A", "JOB-B"):
        [body] = requests_for(llm, marker)
        assert [m["role"] for m in body["messages"]] == ["system", "system", "user"]
        assert "do both jobs" not in str(body["messages"])
        assert "bash" in offered(body) and "task" not in offered(body)
    # Stored, readable after the turn: the thread's tasks and each task's steps.
    assert [(t.title, t.kind, t.status) for t in stored] == [
        ("count", "general", "done"),
        ("size", "general", "done"),
    ]
    assert stored[0].result == "RESULT-A: 3 files" and stored[0].prompt == "JOB-A: count the files"
    kinds = [(s.kind, s.text) for s in steps[stored[0].task_id]]
    assert ("model", "RESULT-A: 3 files") in kinds and kinds[-1] == ("result", "done: RESULT-A: 3 files")
    # The cards heard of both, start to finish.
    assert sorted(cards.ids("started")) == sorted(t.task_id for t in stored)
    assert sorted(cards.ids("finished:done")) == sorted(t.task_id for t in stored)


async def test_five_tasks_with_a_limit_of_two_never_run_more_than_two_and_all_five_answer(tmp_path, llm):
    hold = Hold()
    llm.script_for(
        PARENT,
        Reply(tool_calls=[task(f"job {n}", f"JOB-{n}: do part {n}") for n in range(1, 6)]),
        Reply(text="All five parts are done."),
    )
    for n in range(1, 6):
        llm.script_for(f"JOB-{n}:", Reply(text=f"RESULT-{n}", hold=hold))
    cards = Cards()
    async with runtime_for(tmp_path, llm, max_concurrent=2) as runtime:
        running = asyncio.create_task(turn(runtime, "do the five parts", cards))
        try:
            await asyncio.to_thread(hold.wait_for_waiting, 2)
            # The other three were started too, and wait for a slot.
            await wait_until(lambda: len(cards.ids("step:queued")) == 3)
            for done in range(1, 4):  # one finishes, one queued task takes its slot
                hold.release()
                await asyncio.to_thread(hold.wait_for_passed, done)
                await asyncio.to_thread(hold.wait_for_waiting, 2)
            hold.release(2)
        finally:
            hold.open()
        answer = await running
    assert answer == "All five parts are done."
    assert hold.most == 2
    results = tool_results(requests_for(llm, PARENT)[1])
    assert [r.rsplit("\n", 1)[-1] for r in results] == [f"RESULT-{n}" for n in range(1, 6)]
    assert len(cards.ids("finished:done")) == 5


async def test_a_subagent_over_its_time_limit_ends_with_a_clear_result(tmp_path, llm):
    hold = Hold()  # the subagent's model never answers in time
    llm.script_for(
        PARENT, Reply(tool_calls=[task("slow", "JOB-SLOW: think hard")]), Reply(text="It timed out.")
    )
    llm.script_for("JOB-SLOW", Reply(text="too late", hold=hold))
    try:
        async with runtime_for(tmp_path, llm, timeout_seconds=1) as runtime:
            answer = await turn(runtime, "try the slow job")
            assert runtime.tasks is not None
            [stored] = await runtime.tasks.tasks_of_thread("thread-1")
    finally:
        hold.open()
    assert answer == "It timed out."
    [result] = tool_results(requests_for(llm, PARENT)[1])
    assert " failed: general]" in result
    assert "ran longer than its time limit of 1 s (agent.subagents.timeout_seconds)" in result
    assert stored.status == "failed"


async def test_a_subagent_asking_for_a_task_of_its_own_is_refused(tmp_path, llm):
    llm.script_for(PARENT, Reply(tool_calls=[task("outer", "JOB-OUTER: split this up")]), Reply(text="Done."))
    llm.script_for(
        "JOB-OUTER",
        Reply(tool_calls=[task("inner", "JOB-INNER: a part")]),
        Reply(text="I did it myself."),
    )
    async with runtime_for(tmp_path, llm) as runtime:
        answer = await turn(runtime, "split the work")
    assert answer == "Done."
    outer = requests_for(llm, "JOB-OUTER")
    assert len(outer) == 2
    [refusal] = tool_results(outer[1])
    assert refusal.startswith("Refused: a subagent may not start subagents of its own here")
    assert "max_depth is 1" in refusal
    assert requests_for(llm, "JOB-INNER") == []
    [result] = tool_results(requests_for(llm, PARENT)[1])
    assert result.endswith("I did it myself.")


async def test_with_depth_two_a_subagent_may_delegate_once_more(tmp_path, llm):
    llm.script_for(PARENT, Reply(tool_calls=[task("outer", "JOB-OUTER: split this up")]), Reply(text="Done."))
    llm.script_for("JOB-OUTER", Reply(tool_calls=[task("inner", "JOB-INNER: a part")]), Reply(text="Merged."))
    llm.script_for("JOB-INNER", Reply(text="INNER-RESULT"))
    async with runtime_for(tmp_path, llm, max_depth=2) as runtime:
        await turn(runtime, "split the work")
        assert runtime.tasks is not None
        stored = await runtime.tasks.tasks_of_thread("thread-1")
    [inner_result] = tool_results(requests_for(llm, "JOB-OUTER")[1])
    assert inner_result.endswith("INNER-RESULT")
    assert "task" in offered(requests_for(llm, "JOB-OUTER")[0])
    assert "task" not in offered(requests_for(llm, "JOB-INNER")[0])
    outer = next(t for t in stored if t.title == "outer")
    inner = next(t for t in stored if t.title == "inner")
    assert inner.parent_task_id == outer.task_id


async def test_stop_on_the_card_ends_the_subagent_and_kills_its_commands(tmp_path, llm):
    llm.script_for(
        PARENT, Reply(tool_calls=[task("watch", "JOB-BEAT: keep watching")]), Reply(text="Stopped it.")
    )
    llm.script_for("JOB-BEAT", Reply(tool_calls=[ToolCall("bash", {"command": HEARTBEAT})]))
    cards = Cards()
    async with runtime_for(tmp_path, llm) as runtime:
        running = asyncio.create_task(turn(runtime, "watch it", cards))
        await wait_until(lambda: beat(tmp_path) != "", timeout=30)
        assert await beating(tmp_path, within=10)
        [task_id] = cards.ids("started")
        cards.stop_requested(task_id).set()
        answer = await running
        assert not await beating(tmp_path)
        assert runtime.tasks is not None
        stored = await runtime.tasks.task(task_id)
        steps = await runtime.tasks.steps(task_id)
    assert answer == "Stopped it."
    [result] = tool_results(requests_for(llm, PARENT)[1])
    assert " stopped: general" in result and "a person stopped this task" in result
    assert stored is not None and stored.status == "stopped"
    assert any(s.kind == "tool" and s.text.startswith("running `(while") for s in steps)
    assert cards.ids("finished:stopped") == [task_id]


async def test_stopping_the_turn_stops_its_subagents_and_their_commands(tmp_path, llm):
    llm.script_for(PARENT, Reply(tool_calls=[task("watch", "JOB-BEAT: keep watching")]))
    llm.script_for("JOB-BEAT", Reply(tool_calls=[ToolCall("bash", {"command": HEARTBEAT})]))
    cards = Cards()
    async with runtime_for(tmp_path, llm) as runtime:
        running = asyncio.create_task(turn(runtime, "watch it", cards))
        await wait_until(lambda: beat(tmp_path) != "", timeout=30)
        running.cancel()  # what /stop does to a running turn
        with pytest.raises(asyncio.CancelledError):
            await running
        assert not await beating(tmp_path)
        assert runtime.tasks is not None
        [stored] = await runtime.tasks.tasks_of_thread("thread-1")
    assert stored.status == "stopped"
    assert stored.result == "stopped: the turn that started it was stopped"
    assert cards.ids("finished:stopped") == [stored.task_id]


async def test_a_subagent_over_its_token_budget_stops_before_running_more_tools(tmp_path, llm):
    llm.script_for(
        PARENT, Reply(tool_calls=[task("big", "JOB-BIG: read everything")]), Reply(text="Too big.")
    )
    llm.script_for(
        "JOB-BIG", Reply(tool_calls=[ToolCall("bash", {"command": "echo never"})], prompt_tokens=5000)
    )
    async with runtime_for(tmp_path, llm, max_tokens=1000) as runtime:
        await turn(runtime, "read it all")
    [result] = tool_results(requests_for(llm, PARENT)[1])
    assert "over its budget of 1,000 (agent.subagents.max_tokens)" in result
    assert len(requests_for(llm, "JOB-BIG")) == 1  # the bash call was never answered back to it


async def test_a_configured_kind_has_its_own_prompt_and_tools_and_an_unknown_kind_is_an_error(tmp_path, llm):
    reviewer = {
        "name": "reviewer",
        "description": "reads files and reviews them",
        "system_prompt": "REVIEWER-PROMPT-4410",
        "tools": ["read_file", "ls"],
    }
    llm.script_for(
        PARENT,
        Reply(
            tool_calls=[task("review", "JOB-REVIEW: look", kind="reviewer"), task("x", "JOB-X", kind="nope")]
        ),
        Reply(text="Reviewed."),
    )
    llm.script_for("REVIEWER-PROMPT-4410", Reply(text="LGTM"))
    async with runtime_for(tmp_path, llm, profiles=[reviewer]) as runtime:
        await turn(runtime, "review it")
    [body] = requests_for(llm, "REVIEWER-PROMPT-4410")
    assert offered(body) == ["ls", "read_file"]
    # The turn's model is told which kinds there are.
    assert "reviewer: reads files and reviews them" in prompt_text(requests_for(llm, PARENT)[0])
    review, unknown = tool_results(requests_for(llm, PARENT)[1])
    assert " done: reviewer" in review and review.endswith("LGTM")
    assert unknown == "Error: there is no subagent kind 'nope'; kinds: general, reviewer"


async def test_a_redelivered_task_call_gets_its_stored_result_without_running_again(tmp_path, llm):
    call = ToolCall("task", {"title": "once", "prompt": "JOB-ONCE: do it"}, id="call_fixed_1")
    llm.script_for(
        PARENT, Reply(tool_calls=[call]), Reply(text="first"), Reply(tool_calls=[call]), Reply(text="again")
    )
    llm.script_for("JOB-ONCE", Reply(text="ONCE-RESULT"))
    async with runtime_for(tmp_path, llm) as runtime:
        await turn(runtime, "do it once")
        await turn(runtime, "do it once more")
        assert runtime.tasks is not None
        stored = await runtime.tasks.tasks_of_thread("thread-1")
    assert [t.task_id for t in stored] == [task_id_for("thread-1", "call_fixed_1")]
    assert len(requests_for(llm, "JOB-ONCE")) == 1
    assert tool_results(requests_for(llm, PARENT)[-1])[-1].endswith("ONCE-RESULT")


async def test_a_subagents_risky_command_waits_for_the_chats_approval_and_its_card_says_so(tmp_path, llm):
    llm.script_for(PARENT, Reply(tool_calls=[task("clean", "JOB-CLEAN: tidy up")]), Reply(text="Tidied."))
    llm.script_for(
        "JOB-CLEAN",
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p build && rm -rf build && echo CLEANED"})]),
        Reply(text="Removed build."),
    )
    cards, approver = Cards(), Approver()
    async with runtime_for(tmp_path, llm) as runtime:
        await turn(runtime, "tidy up", cards, approvals=approver)
    assert approver.asked == ["mkdir -p build && rm -rf build && echo CLEANED"]
    waiting = [text for kind, _, text in cards.calls if kind == "step:waiting"]
    assert waiting == ["waiting for approval: mkdir -p build && rm -rf build && echo CLEANED"]
    [output] = tool_results(requests_for(llm, "JOB-CLEAN")[1])
    assert output == "[exit code 0]\nCLEANED"


async def test_an_operator_reads_a_threads_tasks_and_a_tasks_steps_with_the_cli(tmp_path, llm):
    llm.script_for(
        PARENT, Reply(tool_calls=[task("listing", "JOB-LS: list the workspace")]), Reply(text="ok")
    )
    llm.script_for(
        "JOB-LS", Reply(tool_calls=[ToolCall("bash", {"command": "echo LISTED-7"})]), Reply(text="LS-RESULT")
    )
    async with runtime_for(tmp_path, llm) as runtime:
        await turn(runtime, "list it")
        assert runtime.tasks is not None
        [stored] = await runtime.tasks.tasks_of_thread("thread-1")
        url = runtime.settings.database.url
    config = tmp_path / "config.yaml"
    config.write_text(f"database:\n  url: {url}\n")

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "bot", "tasks", *args, "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return done.stdout

    listing = await asyncio.to_thread(cli, "list", "thread-1")
    assert stored.task_id in listing and "done" in listing and "listing" in listing
    shown = await asyncio.to_thread(cli, "show", stored.task_id)
    assert "prompt:\nJOB-LS: list the workspace" in shown
    assert "tool    running `echo LISTED-7`" in shown
    assert "output  bash: [exit code 0]" in shown
    assert "result  done: LS-RESULT" in shown


async def test_slash_stop_in_the_chat_stops_a_running_subagent_and_its_commands(tmp_path, llm):
    settings = agent_settings(tmp_path, llm, agent={"system_prompt": PARENT, "subagents": {"enabled": True}})
    llm.script_for(PARENT, Reply(tool_calls=[task("watch", "JOB-BEAT: keep watching")]))
    llm.script_for("JOB-BEAT", Reply(tool_calls=[ToolCall("bash", {"command": HEARTBEAT})]))
    async with Harness.running(settings) as h:
        await h.chat.say("watch it")
        await wait_until(lambda: beat(tmp_path) != "", timeout=30)
        await h.chat.say("/stop")
        await h.chat.wait_for_text("⏹ Stopped.")
        assert not await beating(tmp_path)
        answer = await h.ask("still there?")
        conversation = await h.service.threads.get(h.chat.make_message("", chat="chat-1").conversation_key)
        assert conversation is not None
        [stored] = await TaskStore(h.service.db.engine).tasks_of_thread(conversation.thread_id)
    assert answer == "echo: still there?"
    assert stored.status == "stopped" and stored.title == "watch"


async def test_stop_on_a_queued_tasks_card_ends_it_at_once_while_the_running_one_goes_on(tmp_path, llm):
    hold = Hold()
    llm.script_for(
        PARENT,
        Reply(tool_calls=[task("first", "JOB-FIRST: one part"), task("second", "JOB-SECOND: other part")]),
        Reply(text="One done, one stopped."),
    )
    # Either may get the one slot first; the other waits for it.
    llm.script_for("JOB-FIRST", Reply(text="FIRST-RESULT", hold=hold))
    llm.script_for("JOB-SECOND", Reply(text="SECOND-RESULT", hold=hold))
    cards = Cards()
    async with runtime_for(tmp_path, llm, max_concurrent=1) as runtime:
        running = asyncio.create_task(turn(runtime, "two parts", cards))
        try:
            await asyncio.to_thread(hold.wait_for_waiting, 1)
            await wait_until(lambda: len(cards.ids("step:queued")) == 1)
            [queued] = cards.ids("step:queued")
            cards.stop_requested(queued).set()
            await wait_until(lambda: cards.ids("finished:stopped") == [queued])
            assert hold.waiting == 1 and hold.passed == 0  # the running one still runs
        finally:
            hold.open()
        answer = await running
    assert answer == "One done, one stopped."
    results = tool_results(requests_for(llm, PARENT)[1])
    [stopped] = [r for r in results if queued in r]
    [finished] = [r for r in results if queued not in r]
    assert " stopped: general]" in stopped and "a person stopped this task before it started" in stopped
    assert " done: general" in finished and finished.endswith("-RESULT")
    assert (
        len(llm.completions) == 3
    )  # the turn twice and the running subagent once: the stopped one never asked


async def test_a_guests_turn_is_neither_offered_nor_allowed_the_task_tool(tmp_path, llm):
    llm.script_for(PARENT, Reply(tool_calls=[task("sneak", "JOB-SNEAK: run bash")]), Reply(text="No."))
    async with runtime_for(tmp_path, llm) as runtime:
        await turn(runtime, "delegate this", profile=CHAT_ONLY_PROFILE)
        assert runtime.tasks is not None
        assert await runtime.tasks.tasks_of_thread("thread-1") == []
    first, second = requests_for(llm, PARENT)
    assert "task" not in offered(first)
    assert "Subagent kinds" not in prompt_text(first)
    [refusal] = tool_results(second)
    assert refusal.startswith("Refused: `task` is not available in this conversation")
    assert requests_for(llm, "JOB-SNEAK") == []


@pytest.mark.postgres
@pytest.mark.skipif(
    not os.environ.get("SWITCHBOARD_TEST_PG_URL"), reason="set SWITCHBOARD_TEST_PG_URL to run"
)
async def test_on_postgres_parallel_tasks_store_their_steps(tmp_path, llm, pg_url):
    llm.script_for(
        PARENT, Reply(tool_calls=[task("a", "JOB-PA: one"), task("b", "JOB-PB: two")]), Reply(text="Both.")
    )
    llm.script_for(
        "JOB-PA", Reply(tool_calls=[ToolCall("bash", {"command": "echo PA"})]), Reply(text="PA-DONE")
    )
    llm.script_for("JOB-PB", Reply(text="PB-DONE"))
    async with runtime_for(tmp_path, llm, database_url=pg_url) as runtime:
        assert await turn(runtime, "two on postgres") == "Both."
        assert runtime.tasks is not None
        stored = await runtime.tasks.tasks_of_thread("thread-1")
        steps = await runtime.tasks.steps(next(t.task_id for t in stored if t.title == "a"))
    assert sorted((t.title, t.status, t.result) for t in stored) == [
        ("a", "done", "PA-DONE"),
        ("b", "done", "PB-DONE"),
    ]
    assert [s.kind for s in steps] == ["note", "model", "tool", "output", "model", "result"]
    assert [s.number for s in steps] == list(range(1, len(steps) + 1))


async def test_a_subagent_whose_model_fails_ends_failed_and_the_turn_still_answers(tmp_path, llm):
    llm.script_for(PARENT, Reply(tool_calls=[task("doomed", "JOB-DOOMED: try")]), Reply(text="It failed."))
    llm.script_for("JOB-DOOMED", Reply(status=400, error="unknown model"))
    async with runtime_for(tmp_path, llm) as runtime:
        answer = await turn(runtime, "try it")
        assert runtime.tasks is not None
        [stored] = await runtime.tasks.tasks_of_thread("thread-1")
    assert answer == "It failed."
    [result] = tool_results(requests_for(llm, PARENT)[1])
    assert " failed: general]" in result
    # The same plain sentence a failed turn gets (agent/errors.py), and the error's class for the logs.
    assert result.split("\n")[1].startswith(
        "failed: The model rejected the request: unknown model. Send /new"
    )
    assert stored.status == "failed"
