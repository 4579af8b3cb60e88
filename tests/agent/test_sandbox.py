"""SCENARIOS 10, 44–46: cancelling and timing out commands, secrets, and path confinement."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from channels.memory import MemoryChannel
from channels.types import InboundMessage
from tests.agent.helpers import agent_settings, all_tool_results, everything_shown, wait_until
from tests.fakes.openai_server import Reply, ToolCall
from tests.harness import Harness

# A background job that proves it is alive by rewriting a file on the host side every 0.1 s. Its pid
# would mean nothing outside the sandbox's own PID namespace; the file works in every mode.
# Written to a temporary name and renamed: a kill between the shell's truncating ``>`` and ``date``'s write
# left an empty file, and "it really ran" read as not (seen as an ordinary user on a busy machine).
HEARTBEAT = (
    "(while :; do date +%s%N > /mnt/user-data/workspace/beat.new && mv -f /mnt/user-data/workspace/beat.new "
    "/mnt/user-data/workspace/beat; sleep 0.1; done) & wait"
)
MODES = pytest.mark.parametrize("mode", ["bwrap", "host"])


def beat_file(tmp_path: Path) -> Path | None:
    return next((tmp_path / "data" / "users").rglob("beat"), None)


def beat(tmp_path: Path) -> str:
    path = beat_file(tmp_path)
    return path.read_text() if path else ""


async def beating(tmp_path: Path, within: float = 1.0) -> bool:
    """True when the heartbeat file changes within ``within`` seconds.

    "Still beating" checks pass a long window: on a loaded machine a live heartbeat can miss a second,
    and the answer comes as soon as it beats. "Stopped" checks keep the short one (a slow machine can
    only make those pass later, never wrongly fail)."""
    before = beat(tmp_path)
    for _ in range(round(within / 0.05)):
        await asyncio.sleep(0.05)
        if beat(tmp_path) != before:
            return True
    return False


@MODES
async def test_stop_during_a_long_command_kills_it_and_the_thread_answers_the_next_message(
    tmp_path, llm, mode
):
    llm.script(Reply(tool_calls=[ToolCall("bash", {"command": HEARTBEAT})]))
    async with Harness.running(agent_settings(tmp_path, llm, sandbox={"mode": mode})) as h:
        await h.chat.say("run the long job")
        await wait_until(lambda: beat(tmp_path) != "")
        assert await beating(tmp_path, within=10)
        await h.chat.say("/stop")
        await h.chat.wait_for_text("⏹ Stopped.")
        await asyncio.sleep(0.3)  # a write already under way may still land
        assert not await beating(tmp_path)
        answer = await h.ask("are you still there?")
    assert answer == "echo: are you still there?"
    # The interrupted tool call was closed off, so the model API accepts the history.
    last = llm.completions[-1]["messages"]
    assert any(m["role"] == "tool" and "stopped this turn" in m["content"] for m in last)


@MODES
async def test_a_command_past_its_timeout_is_killed_with_everything_it_started(tmp_path, llm, mode):
    # Long enough that even a loaded machine starts the sandbox and the first beat inside it (4 s was
    # not, at a load average of 10 on two cores: docs/testing.md, "Flakes").
    settings = agent_settings(tmp_path, llm, sandbox={"mode": mode, "command_timeout_seconds": 8})
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": HEARTBEAT})]),
        Reply(text="That took too long."),
    )
    async with Harness.running(settings) as h:
        answer = await h.ask("run the long job")
        await asyncio.sleep(0.3)
        assert not await beating(tmp_path)
    assert answer == "That took too long."
    [result] = all_tool_results(llm)
    assert result.startswith("[timed out]")
    assert "ran longer than 8 s and was killed" in result
    assert beat(tmp_path) != ""  # it really ran before it was killed


@MODES
async def test_a_background_job_does_not_hold_the_turn_and_ends_with_the_command(tmp_path, llm, mode):
    llm.script(
        Reply(
            tool_calls=[
                ToolCall(
                    "bash",
                    {"command": "(while :; do date +%s%N > beat; sleep 0.1; done) & sleep 0.3; echo hi"},
                )
            ]
        ),
        Reply(text="Started it."),
    )
    # Were the turn to wait for the job's pipe, it would end in the timeout: "[timed out]", not "hi".
    settings = agent_settings(tmp_path, llm, sandbox={"mode": mode, "command_timeout_seconds": 8})
    async with Harness.running(settings) as h:
        answer = await h.ask("start a job in the background")
        await asyncio.sleep(0.3)
        assert not await beating(tmp_path)
    assert answer == "Started it."
    assert all_tool_results(llm) == ["[exit code 0]\nhi"]


async def test_command_output_is_bounded(tmp_path, llm):
    settings = agent_settings(tmp_path, llm, sandbox={"max_output_chars": 200})
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "yes abcdefgh | head -c 100000"})]),
        Reply(text="ok"),
    )
    async with Harness.running(settings) as h:
        await h.ask("print a lot")
    [result] = all_tool_results(llm)
    assert len(result) < 400
    assert "[output cut: about" in result


class TokenChannel(MemoryChannel):
    """A platform that hands this run a short-lived token, as the GitHub channel does."""

    async def run_secrets(self, message: InboundMessage) -> dict[str, str]:
        return {"GH_TOKEN": "ghs_runtoken_5f2a9c1e"}


async def test_host_secrets_never_reach_commands_and_injected_secrets_are_masked(tmp_path, llm, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-key-never-in-sandbox")
    monkeypatch.setenv("SWITCHBOARD_DB_PASSWORD", "hunter2-db-password")
    monkeypatch.setenv("DATABASE_URL", "postgresql://app:pw@db/app")
    monkeypatch.setenv("HARMLESS_SETTING", "visible-value")
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "env | sort > env.txt; echo token=$GH_TOKEN"})]),
        Reply(
            text="Done.",
            tool_calls=[
                ToolCall("bash", {"command": "echo again $GH_TOKEN"}),
                ToolCall("bash", {"command": "sleep 0.5; echo ghs_runtoken_5f2a9c1e | wc -c"}),
            ],
        ),
        Reply(text="The token was ghs_runtoken_5f2a9c1e, all set.", chunk_size=3, delay=0.01),
    )
    channel = TokenChannel("memory")
    # Reading $GH_TOKEN or piping env asks for approval; this test is about what the sandbox holds.
    settings = agent_settings(tmp_path, llm, sandbox={"approval": "never"})
    async with Harness.running(settings, channels={"memory": channel}) as h:
        answer = await h.ask("check the environment")
    env_file = next((tmp_path / "data" / "users").rglob("env.txt")).read_text()
    # The command really had the injected token, and none of the host's secret-looking variables.
    assert "GH_TOKEN=ghs_runtoken_5f2a9c1e" in env_file
    assert "HARMLESS_SETTING=visible-value" in env_file
    for leaked in ("OPENAI_API_KEY", "sk-host-key", "hunter2", "DATABASE_URL", "app:pw@"):
        assert leaked not in env_file
    # What the model and the chat see is masked.
    results = all_tool_results(llm)
    assert results[0] == "[exit code 0]\ntoken=***"
    assert results[1] == "[exit code 0]\nagain ***"
    assert answer == "Done.\n\nThe token was ***, all set."
    shown = everything_shown(channel)
    # Not even a prefix of the token, although the model streamed it in 3-character pieces.
    assert not any("ghs_" in text for text in shown)
    assert any("⏳ running `sleep 0.5; echo *** | wc -c`…" in text for text in shown)


async def test_paths_outside_user_data_dotdot_and_symlink_escapes_are_refused(tmp_path, llm):
    llm.script(
        Reply(
            tool_calls=[
                ToolCall("read_file", {"path": "/etc/passwd"}),
                ToolCall("read_file", {"path": "/mnt/user-data/workspace/../../../../etc/passwd"}),
                ToolCall("bash", {"command": "ln -s /etc /mnt/user-data/workspace/etc-link"}),
            ]
        ),
        Reply(
            tool_calls=[
                ToolCall("read_file", {"path": "/mnt/user-data/workspace/etc-link/passwd"}),
                ToolCall("write_file", {"path": "/tmp/escaped.txt", "content": "x"}),
                ToolCall("ls", {"path": "/mnt/user-data/workspace/etc-link"}),
                ToolCall("write_file", {"path": "inside.txt", "content": "fine"}),
                ToolCall("str_replace", {"path": "inside.txt", "old_str": "fine", "new_str": "edited"}),
                ToolCall("read_file", {"path": "/mnt/user-data/workspace/inside.txt"}),
            ]
        ),
        Reply(text="Checked."),
    )
    async with Harness.running(agent_settings(tmp_path, llm)) as h:
        await h.ask("poke around")
    results = all_tool_results(llm)
    assert not any("root:" in r for r in results)
    assert results[0] == "Error: /etc/passwd is outside /mnt/user-data; only files under it are reachable"
    assert results[1].startswith("Error: '..' is not allowed in paths")
    assert "through a symlink" in results[3]
    assert "outside /mnt/user-data" in results[4]
    assert "through a symlink" in results[5]
    assert results[-1] == "edited"
    assert not Path("/tmp/escaped.txt").exists()
