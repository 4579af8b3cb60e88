"""Issue 36: a coding agent over ACP as a ``task`` subagent, seen from the chat.

The turn's model delegates to a profile that runs a coding-agent CLI in the thread's sandbox (here the
fake ACP agent, ``tests/fakes/acp_agent.py``, written from the protocol's description). What a person
notices on Telegram: the agent's request to write a file arrives as the usual approval request; Approve
lets it write into the thread's workspace and its answer reaches the turn; Deny leaves the workspace as
it was; ⏹ Stop on the task's card ends the agent and everything it started in the sandbox. The real
channel against the platform's fake, the real runtime and sandbox, the fake model.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agent.task_store import TaskStore
from channels.telegram.channel import TelegramChannel
from tests.agent.helpers import agent_settings, all_tool_results, wait_until
from tests.agent.test_acp import placed_outside_usr
from tests.agent.test_sandbox import beat, beating
from tests.channels.telegram.conftest import BOT_USERNAME, telegram_config
from tests.fakes import acp_agent
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.fakes.telegram import FakeTelegram
from tests.harness import Harness
from tests.tasks.kit import card_body, card_status, is_card, stop_heartbeat_on_card

pytestmark = pytest.mark.slow  # platform fake, the fake model and a sandboxed agent process

PARENT = "PARENT-PROMPT-7720"
CHAT = 6262
MODES = pytest.mark.parametrize("mode", ["bwrap", "host"])
#: The fake agent runs on the sandbox's own Python, from its source (the test tree is not mounted there).
AGENT = ["/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable, "-I", "-c"]


def settings_for(
    tmp_path: Path, llm: FakeOpenAI, mode: str, env: dict[str, str] | None = None, **limits: Any
) -> Any:
    acp = limits.pop("acp", None) or {"command": [*AGENT, Path(acp_agent.__file__).read_text()]}
    coder = {
        "name": "coder",
        "description": "a coding agent that edits files in the workspace",
        "acp": {**acp, "env": env or {}},
    }
    return agent_settings(
        tmp_path,
        llm,
        agent={"system_prompt": PARENT, "subagents": {"enabled": True, "profiles": [coder], **limits}},
        sandbox={"mode": mode},
        memory={"enabled": False},
    )


def delegate(brief: str) -> Reply:
    return Reply(tool_calls=[ToolCall("task", {"title": "ask the coder", "prompt": brief, "kind": "coder"})])


@asynccontextmanager
async def telegram_bot(
    tmp_path: Path, llm: FakeOpenAI, mode: str, env: dict[str, str] | None = None, **limits: Any
) -> AsyncIterator[tuple[Harness, FakeTelegram]]:
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=0.5) as tg:
        settings = settings_for(tmp_path, llm, mode, env, **limits)
        channel = TelegramChannel(telegram_config(tg), settings=settings)
        async with Harness.running(settings, channels={"telegram": channel}) as h:  # type: ignore[dict-item]
            yield h, tg


def workspace_of(h: Harness) -> Path:
    [workspace] = Path(h.service.settings.data_dir).glob("users/*/threads/*/user-data/workspace")
    return workspace


@MODES
async def test_approving_the_agents_request_writes_the_file_and_its_answer_reaches_the_turn(
    tmp_path: Path, llm: FakeOpenAI, mode: str
):
    llm.script_for(
        PARENT, delegate("WRITE notes.txt: written by the coding agent"), Reply(text="The coder is done.")
    )
    async with telegram_bot(tmp_path, llm, mode) as (h, tg):
        tg.user_message(CHAT, "have the coder write the notes", user_id=CHAT)
        request = await tg.wait_for_bot_text(CHAT, "🔐 Approval needed", timeout=60)
        assert "Write notes.txt" in request.text, request.text
        assert "/mnt/user-data/workspace/notes.txt" in request.text, (
            "the request shows the path as the agent sees it"
        )
        workspace = workspace_of(h)
        assert not (workspace / "notes.txt").exists(), "written before anyone approved"
        await tg.wait_until(
            lambda: any(
                is_card(m.text) and "✋ Waiting for approval" in card_status(m.text)
                for m in tg.bot_messages(CHAT)
            ),
            30,
        )
        tg.press(CHAT, request.message_id, "Approve", user_id=CHAT)
        await tg.wait_for_bot_text(CHAT, "The coder is done.", timeout=60)
        await h.idle(timeout=30)
        [card] = [m for m in tg.bot_messages(CHAT) if is_card(m.text)]
        written = (workspace / "notes.txt").read_text()
    assert written == "written by the coding agent"
    [result] = [r for r in all_tool_results(llm) if r.startswith("[task ")]
    assert result.split("\n", 1)[0].endswith("done: coder]"), result
    assert result.split("\n", 1)[1] == "WROTE notes.txt"
    assert card_status(card.text) == "✅ Done"
    assert card_body(card.text) == "WROTE notes.txt"
    assert any("Write notes.txt" in v for v in card.history), "the agent's tool call never showed on the card"


async def test_denying_the_agents_request_writes_nothing_and_the_turn_hears_so(
    tmp_path: Path, llm: FakeOpenAI
):
    llm.script_for(PARENT, delegate("WRITE notes.txt: must not appear"), Reply(text="The coder was refused."))
    async with telegram_bot(tmp_path, llm, "host") as (h, tg):
        tg.user_message(CHAT, "have the coder write the notes", user_id=CHAT)
        request = await tg.wait_for_bot_text(CHAT, "🔐 Approval needed", timeout=60)
        tg.press(CHAT, request.message_id, "Deny", user_id=CHAT)
        await tg.wait_for_bot_text(CHAT, "The coder was refused.", timeout=60)
        await h.idle(timeout=30)
        workspace = workspace_of(h)
        assert list(workspace.iterdir()) == [], "the denied agent left files behind"
    [result] = [r for r in all_tool_results(llm) if r.startswith("[task ")]
    assert result.split("\n", 1)[1] == "NOT WRITTEN: permission was refused."


@MODES
async def test_stop_on_the_card_kills_the_agent_and_what_it_started(
    tmp_path: Path, llm: FakeOpenAI, mode: str
):
    llm.script_for(PARENT, delegate("HANG until told"), Reply(text="The coder was stopped."))
    async with telegram_bot(tmp_path, llm, mode) as (h, tg):
        live = await stop_heartbeat_on_card(
            h, tg, tmp_path, CHAT, "have the coder watch the disk", "The coder was stopped.", timeout=60
        )
        assert not await beating(tmp_path), "the agent's child still runs after Stop"
        assert (workspace_of(h) / "cancelled").read_text() == "sess-1", "the agent never got session/cancel"
    assert card_status(live.text) == "⏹ Stopped"
    [result] = [r for r in all_tool_results(llm) if r.startswith("[task ")]
    assert "stopped: a person stopped this task" in result


async def test_an_agent_past_its_time_limit_is_cancelled_killed_and_the_task_fails(
    tmp_path: Path, llm: FakeOpenAI
):
    llm.script_for(PARENT, delegate("HANG forever"), Reply(text="The coder ran out of time."))
    async with telegram_bot(tmp_path, llm, "host", timeout_seconds=3) as (h, tg):
        tg.user_message(CHAT, "have the coder watch the disk", user_id=CHAT)
        await wait_until(lambda: beat(tmp_path) != "", timeout=60)
        await tg.wait_for_bot_text(CHAT, "The coder ran out of time.", timeout=60)
        await h.idle(timeout=30)
        assert not await beating(tmp_path), "the agent's child still runs after its time limit"
        assert (workspace_of(h) / "cancelled").exists(), "the agent never got session/cancel"
    [result] = [r for r in all_tool_results(llm) if r.startswith("[task ")]
    assert result.split("\n", 1)[0].endswith("failed: coder]"), result
    assert "ran longer than its time limit of 3 s" in result


#: A made-up key under a name that does not look secret: only acp.env makes it one.
LOGIN = "lg-" + "5" * 21


@MODES
async def test_the_agent_gets_its_key_bash_does_not_and_the_key_never_reaches_card_turn_or_logs(
    tmp_path: Path, llm: FakeOpenAI, mode: str, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    llm.script_for(
        PARENT,
        delegate("ENV FAKE_LOGIN"),
        delegate("LEAK FAKE_LOGIN"),
        Reply(tool_calls=[ToolCall("bash", {"command": 'echo "bash sees [${FAKE_LOGIN:-nothing}]"'})]),
        Reply(text="Checked the coder."),
    )
    async with telegram_bot(tmp_path, llm, mode, env={"FAKE_LOGIN": LOGIN}) as (h, tg):
        tg.user_message(CHAT, "check the coder's key", user_id=CHAT)
        await tg.wait_for_bot_text(CHAT, "Checked the coder.", timeout=90)
        await h.idle(timeout=30)
        cards = [m for m in tg.bot_messages(CHAT) if is_card(m.text)]
        shown = [v for m in tg.bot_messages(CHAT) for v in m.history]
        store = TaskStore(h.service.db.engine)
        steps = [
            step.text
            for task in await store.tasks_of_thread(workspace_of(h).parent.parent.name)
            for step in await store.steps(task.task_id)
        ]
    seen, leaked, bash = all_tool_results(llm)
    assert seen.split("\n", 1)[1] == f"ENV FAKE_LOGIN set=yes length={len(LOGIN)}"
    assert leaked.split("\n", 1)[1] == "My key is ***, do not tell anyone."
    assert bash == "[exit code 0]\nbash sees [nothing]", bash
    assert card_body(cards[1].text) == "My key is ***, do not tell anyone."
    assert "login ***" in steps, "the leaking tool call is not among the task's steps"
    assert not [text for text in steps if LOGIN in text], "the key reached the task's steps"
    assert LOGIN not in json.dumps(llm.completions), "the key reached the model"
    assert not [v for v in shown if LOGIN in v], "the key reached the chat"
    assert LOGIN not in caplog.text, "the key reached the logs"


async def test_a_profiles_mounts_let_its_agent_run_from_outside_usr(tmp_path: Path, llm: FakeOpenAI):
    script = placed_outside_usr(tmp_path)
    acp = {"command": [AGENT[0], "-I", str(script)], "mounts": [str(script.parent)]}
    llm.script_for(PARENT, delegate("WHERE"), Reply(text="The coder said where."))
    async with telegram_bot(tmp_path, llm, "bwrap", acp=acp) as (h, tg):
        tg.user_message(CHAT, "where does the coder run?", user_id=CHAT)
        await tg.wait_for_bot_text(CHAT, "The coder said where.", timeout=60)
        await h.idle(timeout=30)
    [result] = all_tool_results(llm)
    assert result.split("\n", 1)[1] == f"RUNNING FROM {script}; beside it: read-only", result
