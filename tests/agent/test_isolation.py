"""Issue 10: the agent's bash runs in a bubblewrap sandbox that sees nothing of the host or other people.

Every probe goes through the real path: the fake model asks for a ``bash`` tool call, the service runs
it in the sandbox, and the test reads what the model was sent back and what reached the chat.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent.helpers import agent_settings, everything_shown, tool_results, wait_until
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall, last_user_text
from tests.harness import Harness

ENV_CANARIES = {
    "OPENAI_API_KEY": "sk-canary-model-key-4f1c9a",
    "TELEGRAM_BOT_TOKEN": "123456:canary-telegram-token-77aa",
    "SLACK_BOT_TOKEN": "xoxb-canary-slack-token-9911",
    "GITHUB_WEBHOOK_SECRET": "canary-github-webhook-secret-31",
    "SWITCHBOARD_JWT_SECRET": "canary-jwt-secret-abcdefghijkl",
    "DISCORD_BOT_TOKEN": "canary-discord-token-zz00yy11",
}
CONFIGURED_KEY = "sk-canary-configured-key-5e5e5e"


def run_commands(request: dict[str, Any]) -> Reply:
    """A scripted model: ``RUN: cmd`` → a bash call; a tool result → report it; anything else → echo."""
    last = request["messages"][-1]
    if last["role"] == "tool":
        return Reply(text=f"result: {last['content']}")
    text = last_user_text(request)
    if text.startswith("RUN: "):
        return Reply(tool_calls=[ToolCall("bash", {"command": text[5:]})])
    return Reply(text=f"echo: {text}")


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(default_reply=run_commands) as server:
        yield server


def sandbox_settings(tmp_path: Path, model: FakeOpenAI, **sandbox: Any):  # type: ignore[no-untyped-def]
    # These tests probe the sandbox itself, the boundary under the approval guard rail, with commands an
    # attacker would write (curl to loopback, unshare, inline code): nothing waits for a person here.
    sandbox.setdefault("approval", "never")
    settings = agent_settings(tmp_path, model, sandbox=sandbox)
    settings.models[0].api_key = CONFIGURED_KEY
    return settings


def results(model: FakeOpenAI) -> list[str]:
    return [r for body in model.completions for r in tool_results(body)]


async def run(h: Harness, command: str, chat: str = "chat-1", **kwargs: Any) -> str:
    """The tool result of one bash command, as the model received it."""
    answer = await h.ask(f"RUN: {command}", chat=chat, **kwargs)
    assert answer.startswith("result: "), answer
    return answer.removeprefix("result: ")


async def test_bash_cannot_read_the_config_database_other_threads_service_env_home_or_host_tmp(
    tmp_path, model, monkeypatch
):
    for name, value in ENV_CANARIES.items():
        monkeypatch.setenv(name, value)
    config = tmp_path / "config.yaml"
    config.write_text(f"models:\n  - name: default\n    api_key: {CONFIGURED_KEY}\n")
    host_tmp = Path("/tmp") / f"switchboard-canary-{uuid.uuid4().hex}"
    host_tmp.write_text("HOST-TMP-CANARY")
    home_canary = Path.home() / f".switchboard-canary-{uuid.uuid4().hex}"
    home_canary.write_text("HOME-CANARY")
    settings = sandbox_settings(tmp_path, model)
    try:
        async with Harness.running(settings) as h:
            # Another person's thread, with a file in its workspace.
            await run(h, "echo OTHER-PERSONS-SECRET > diary.txt", chat="chat-bob", sender="bob")
            [diary] = (tmp_path / "data" / "users").rglob("diary.txt")
            database = tmp_path / "data" / "switchboard.db"
            assert database.exists() and diary.exists()  # the targets are real on the host
            probes = {
                "config": f"cat {config}",
                "database": f"cat {database} | head -c 200 | od -c | head -3",
                "other thread": f"cat {diary}; cat {diary.parents[3]}/*/*/user-data/workspace/diary.txt",
                # Written around the approval blocklist (which refuses /proc/<pid>/environ on sight): the
                # blocklist is a guard rail; these probes test the sandbox underneath it.
                "service environ": f"cd /proc/{os.getpid()} && tr '\\0' '\\n' < environ",
                "all environs": "cd /proc && cat */environ | tr '\\0' '\\n'; cd /proc/$PPID && tr '\\0' '\\n' < environ",
                "service home": f"cat {home_canary}; ls -a {Path.home()}",
                "host tmp": f"cat {host_tmp}",
                "host tmp listing": "ls -A /tmp; echo END-OF-LISTING",
                "environment": "env",
            }
            seen = {
                name: await run(h, command, chat="chat-eve", sender="eve") for name, command in probes.items()
            }
    finally:
        host_tmp.unlink()
        home_canary.unlink()
    assert "No such file or directory" in seen["config"]
    assert "No such file or directory" in seen["database"]
    assert "No such file or directory" in seen["other thread"]
    assert "OTHER-PERSONS-SECRET" not in "".join(seen.values())
    assert "No such file or directory" in seen["service environ"]
    assert "HOME-CANARY" not in seen["service home"]
    assert "HOST-TMP-CANARY" not in seen["host tmp"]
    assert seen["host tmp listing"] == "[exit code 0]\nEND-OF-LISTING"  # a private, empty /tmp
    everything = "\n".join([*results(model), *everything_shown(h.chat)])
    for secret in [*ENV_CANARIES.values(), CONFIGURED_KEY]:
        assert secret not in everything


async def test_every_secret_the_service_knows_is_masked_in_chat_and_progress_lines(
    tmp_path, model, monkeypatch
):
    for name, value in ENV_CANARIES.items():
        monkeypatch.setenv(name, value)
    settings = sandbox_settings(tmp_path, model)
    leaky = Reply(text=f"The key is {CONFIGURED_KEY} and the bot token {ENV_CANARIES['TELEGRAM_BOT_TOKEN']}.")
    model.script(Reply(tool_calls=[ToolCall("bash", {"command": f"echo {CONFIGURED_KEY}"})]), leaky)
    async with Harness.running(settings) as h:
        answer = await h.ask("what is the key?")
    assert answer == "The key is *** and the bot token ***."
    assert results(model) == ["[exit code 0]\n***"]
    shown = "\n".join(everything_shown(h.chat))
    assert "⏳ running `echo ***`" in shown
    assert CONFIGURED_KEY not in shown and "sk-canary" not in shown


async def test_writes_outside_the_thread_tree_fail_and_outputs_still_reach_the_chat(tmp_path, model):
    model.script(
        Reply(
            tool_calls=[
                ToolCall("bash", {"command": f"echo x > {tmp_path}/escaped.txt"}),
                ToolCall("bash", {"command": "echo x > /usr/escaped.txt"}),
                ToolCall("bash", {"command": "echo x > /mnt/user-data/uploads/escaped.txt"}),
                ToolCall("bash", {"command": "echo kept > notes.txt && echo report > ../outputs/report.txt"}),
            ]
        ),
        Reply(tool_calls=[ToolCall("present_files", {"paths": ["/mnt/user-data/outputs/report.txt"]})]),
        Reply(text="Sent."),
    )
    async with Harness.running(sandbox_settings(tmp_path, model)) as h:
        await h.ask("write some files")
    assert [m.text for m in h.chat.in_chat("chat-1")] == ["Sent.", ""]  # the answer, then the file
    outside, system, uploads, inside = results(model)[:4]
    assert "No such file or directory" in outside
    assert "Read-only file system" in system
    assert "Read-only file system" in uploads
    assert inside == "[exit code 0]\n(no output)"
    assert not (tmp_path / "escaped.txt").exists()
    [notes] = (tmp_path / "data" / "users").rglob("workspace/notes.txt")
    assert notes.read_text() == "kept\n"
    assert [path.name for path in h.chat.sent_files] == ["report.txt"]


LIMITS = {"cpu_seconds": 2, "memory_mb": 256, "processes": 64, "file_size_mb": 8}


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("while :; do :; done", "[stopped: the command used more than 2 s of CPU time]"),
        # Built at run time, so the approval blocklist (which refuses a literal fork bomb) does not see it
        # and the sandbox's own process limit is what stops it.
        ("eval \"$(echo ':(){ :|:& };:')\" ; sleep 3", "[the sandbox allows at most 64 processes]"),
        ("head -c 10G /dev/zero > big.bin; ls -l big.bin", "[stopped: a file grew past the 8 MB size limit]"),
        (
            "python3 -c 'x = bytearray(2 * 1024**3)'",
            "[the sandbox allows at most 256 MB of memory per process]",
        ),
    ],
    ids=["infinite-loop", "fork-bomb", "10GB-write", "memory-hog"],
)
async def test_runaway_commands_end_with_a_clear_result_while_other_chats_get_answers(
    tmp_path, model, command, expected
):
    settings = sandbox_settings(tmp_path, model, limits=LIMITS, command_timeout_seconds=20, approval="never")
    async with Harness.running(settings) as h:
        runaway = asyncio.create_task(h.chat.say(f"RUN: {command}", chat="chat-runaway"))
        await h.chat.wait_for_text("⏳ running", chat="chat-runaway")
        # While the runaway command runs, somebody else's question is answered.
        await h.chat.say("hello?", chat="chat-other")
        await h.chat.wait_for_text("echo: hello?", chat="chat-other", timeout=15)
        await runaway
        await h.idle(timeout=30)
    [result] = results(model)
    assert expected in result
    # What the user sees ends with the same plain sentence (a long answer is split into several messages).
    assert expected in h.chat.in_chat("chat-runaway")[-1].text
    if "big.bin" in command:
        [big] = (tmp_path / "data" / "users").rglob("big.bin")
        assert big.stat().st_size == 8 * 1024 * 1024


#: A fork bomb whose processes stay (each waits on a pipe nobody writes to), so it keeps its sandbox at the
#: process limit; built at run time, past the approval blocklist. Its error output goes to ``bomb.log``
#: in the workspace, where the test sees the first refused fork; then the shell waits (a builtin ``read``,
#: it cannot fork either) for the test's word on a second pipe. When it exits, the runner kills the bomb.
HOLDING_BOMB = (
    "mkfifo /tmp/never release && exec 3<>/tmp/never 4<>release"
    " && eval \"$(echo ':(){ :|:& read -t 120 -u 3; }')\""
    " && { : 2>>bomb.log & } ; read -t 120 -u 4 && echo released"
)


@pytest.mark.parametrize("network", [False, True], ids=["no-network", "egress"])
async def test_a_fork_bomb_at_its_process_limit_leaves_other_threads_sandboxes_able_to_start(
    tmp_path, model, network
):
    """As an ordinary user every sandbox runs as the service's uid, so the process limit must count each
    sandbox's processes (in its own user namespace), not the uid's: while one thread's fork bomb is being
    refused forks, a new sandbox for another person's thread starts and forks. Run as root, each thread
    has a uid of its own; CI runs this file again as an ordinary user, the case this test guards."""
    limits = {**LIMITS, "cpu_seconds": 30}
    settings = sandbox_settings(tmp_path, model, limits=limits, command_timeout_seconds=60, network=network)
    users = tmp_path / "data" / "users"

    def bomb_refused() -> bool:
        return any("Resource temporarily unavailable" in log.read_text() for log in users.rglob("bomb.log"))

    async with Harness.running(settings) as h:
        await h.chat.say(f"RUN: {HOLDING_BOMB}", chat="chat-bomb", sender="mallory")
        await wait_until(lambda: bomb_refused() or bool(results(model)), timeout=60)
        assert results(model) == []  # the bomb's command still runs
        # Now somebody else's first command: a sandbox that did not exist yet, and eight processes in it.
        await h.chat.say(
            "RUN: for i in 1 2 3 4 5 6 7 8; do /bin/true || exit; done; /bin/echo B-ran",
            chat="chat-bob",
            sender="bob",
        )
        await h.chat.wait_for_text("result: ", chat="chat-bob", timeout=30)
        [release] = users.rglob("workspace/release")
        await asyncio.to_thread(release.write_text, "go\n")
        await h.idle(timeout=30)
    bob, bomb_result = results(model)
    assert bob == "[exit code 0]\nB-ran"
    assert bomb_result.endswith("released")  # the bomb was still held when the other command had run


async def test_the_model_is_told_the_truth_about_its_environment(tmp_path, model):
    async with Harness.running(sandbox_settings(tmp_path, model, network=False)) as h:
        await h.ask("hi")
    system = "\n".join(str(m["content"]) for m in model.completions[0]["messages"] if m["role"] == "system")
    assert "isolated Linux sandbox" in system
    assert "no network access" in system
    assert "read-only" in system
    async with Harness.running(sandbox_settings(tmp_path / "host", model, mode="host")) as h:
        await h.ask("hi again")
    system = "\n".join(str(m["content"]) for m in model.completions[-1]["messages"] if m["role"] == "system")
    assert "without isolation" in system
    assert "isolated Linux sandbox" not in system


async def test_a_presented_file_swapped_for_a_symlink_to_a_host_file_is_not_delivered(tmp_path, model):
    host_file = tmp_path / "service-secret.txt"
    host_file.write_text("HOST-FILE-CONTENT")
    model.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "echo harmless > /mnt/user-data/outputs/a.txt"})]),
        Reply(tool_calls=[ToolCall("present_files", {"paths": ["/mnt/user-data/outputs/a.txt"]})]),
        # Inside the sandbox the target does not exist; on the host, where the chat upload reads, it does.
        Reply(tool_calls=[ToolCall("bash", {"command": f"ln -sf {host_file} /mnt/user-data/outputs/a.txt"})]),
        Reply(text="Sent you a.txt."),
    )
    async with Harness.running(sandbox_settings(tmp_path, model)) as h:
        answer = await h.ask("send me a file")
    assert answer == "Sent you a.txt.\n\n⚠️ Not sent: a.txt changed after it was presented."
    assert h.chat.sent_files == []
    assert "HOST-FILE-CONTENT" not in "\n".join(everything_shown(h.chat))
