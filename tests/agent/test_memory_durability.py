"""SCENARIO 57: ``/memory clear`` survives a restart; pending extractions survive one; memory stays private.

Restarts run the real ``switchboard chat`` process against the fake model.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent.goals import EVALUATOR_MARKER
from agent.memory import EXTRACTION_MARKER
from tests.agent.helpers import agent_settings, everything_shown, system_text
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_reply, last_user_text
from tests.harness import Harness

EMPTY = "I don't remember anything about you yet."


def kiwi_memory(body: dict[str, Any]) -> Reply:
    """Extraction finds the kiwi fact only if the user's kiwi line is in the transcript it is sent."""
    if EXTRACTION_MARKER in system_text(body):
        facts = []
        if "User: I grow kiwis" in last_user_text(body):
            facts = [{"content": "Grows kiwis", "category": "profile", "confidence": 0.9}]
        return Reply(text=json.dumps({"facts": facts, "summary": ""}))
    return echo_reply(body)


def chat_config(tmp_path: Path, llm: FakeOpenAI, debounce: float) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"data_dir: {tmp_path / 'data'}\n"
        f"database: {{url: 'sqlite+aiosqlite:///{tmp_path / 'data' / 'sb.db'}'}}\n"
        f"models: [{{name: default, model: fake-model, api_key: sk-fake, base_url: '{llm.base_url}', "
        "max_retries: 0}]\n"
        f"memory: {{enabled: true, debounce_seconds: {debounce}}}\n"
    )
    return path


def chat(config: Path, text: str) -> str:
    command = [sys.executable, "-m", "bot", "--log-level", "WARNING", "chat", "--config", str(config)]
    result = subprocess.run(command, input=text, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.slow
def test_a_cleared_fact_does_not_come_back_after_a_restart_and_a_new_message(tmp_path, llm):
    llm.default_reply = kiwi_memory
    config = chat_config(tmp_path, llm, debounce=0)
    chat(config, "I grow kiwis\n")
    assert "Grows kiwis" in chat(config, "/memory\n")
    assert "Forgot everything" in chat(config, "/memory clear\n")
    chat(config, "what's new?\n")  # a new turn after the restart: extraction runs again
    assert chat(config, "/memory\n").strip() == EMPTY
    transcripts = [last_user_text(b) for b in llm.completions if EXTRACTION_MARKER in system_text(b)]
    assert "User: what's new?" in transcripts[-1]
    assert "I grow kiwis" not in transcripts[-1]


def wait_for_pending(database: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # OperationalError: the table is not created yet.
        with (
            contextlib.closing(sqlite3.connect(database, timeout=5)) as conn,
            contextlib.suppress(sqlite3.OperationalError),
        ):
            if conn.execute("SELECT count(*) FROM agent_memory_pending").fetchone()[0]:
                return
        time.sleep(0.05)
    raise AssertionError("the pending extraction was never recorded")


@pytest.mark.slow
def test_a_pending_extraction_survives_a_hard_kill_and_is_flushed_at_the_next_shutdown(tmp_path, llm):
    llm.default_reply = kiwi_memory
    config = chat_config(tmp_path, llm, debounce=600)  # far longer than the test: only a flush runs it
    command = [sys.executable, "-m", "bot", "--log-level", "WARNING", "chat", "--config", str(config)]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"I grow kiwis\n")
        proc.stdin.flush()
        assert proc.stdout.readline().decode().strip() == "echo: I grow kiwis"
        wait_for_pending(tmp_path / "data" / "sb.db")  # noted just after the reply was delivered
    finally:
        proc.kill()  # before the debounce ends: the extraction is only recorded
        proc.communicate(timeout=10)
    assert not [b for b in llm.completions if EXTRACTION_MARKER in system_text(b)]
    chat(config, "")  # starts, reschedules it, and flushes it when it stops
    assert "Grows kiwis" in chat(config, "/memory\n")


async def test_memory_in_a_group_chat_posts_no_fact_there(tmp_path, llm):
    llm.default_reply = kiwi_memory
    async with Harness.running(agent_settings(tmp_path, llm, remember=True)) as h:
        await h.ask("I grow kiwis")
        group = {"chat": "team-room", "private": False}
        shown = await h.ask("/memory", **group)
        assert shown.startswith("Ask me in a private chat")
        assert (await h.ask("/memory clear", **group)).startswith("Ask me in a private chat")
        assert not any("kiwi" in m.text.lower() for m in h.chat.in_chat("team-room"))
        assert "Grows kiwis" in await h.ask("/memory")  # nothing was cleared from the group


async def test_goal_continuation_prompts_are_not_given_to_the_extractor_as_the_users_words(tmp_path, llm):
    def reply(body: dict[str, Any]) -> Reply:
        if EVALUATOR_MARKER in system_text(body):
            done = "[Goal continuation 1/8]" in last_user_text(body)
            return Reply(text=json.dumps({"decision": "satisfied" if done else "continue", "reason": "ok"}))
        return kiwi_memory(body)

    llm.default_reply = reply
    async with Harness.running(agent_settings(tmp_path, llm, remember=True)) as h:
        await h.chat.say("/goal label the kiwis")
        await h.chat.wait_for_text("🎯 Goal reached: ok")
        await h.idle()
    transcripts = "\n".join(last_user_text(b) for b in llm.completions if EXTRACTION_MARKER in system_text(b))
    assert "Assistant: echo: [Goal continuation 1/8]" in transcripts  # the answer is there…
    assert "User: [Goal continuation" not in transcripts  # …but not the hidden prompt as the user's line
    assert any("echo: [Goal continuation 1/8]" in t for t in everything_shown(h.chat))
