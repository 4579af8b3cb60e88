"""Issue 34: ``memory: false`` on a named agent — the person's memory is neither read nor written."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.memory import EXTRACTION_MARKER
from channels.memory import MemoryChannel
from tests.agent.helpers import agent_settings, system_text
from tests.agent.test_memory import OneOwner, chat_requests, memory_model
from tests.fakes.openai_server import FakeOpenAI
from tests.harness import Harness

pytestmark = pytest.mark.slow  # the fake model server


async def test_an_agent_without_memory_neither_sees_nor_adds_to_what_the_person_told_another(
    tmp_path: Path, llm: FakeOpenAI
) -> None:
    llm.default_reply = memory_model(
        [{"content": "Prefers Rust for new services", "category": "preference", "confidence": 0.9}]
    )
    telegram, slack = MemoryChannel("telegram"), MemoryChannel("slack")
    settings = agent_settings(
        tmp_path,
        llm,
        remember=True,
        agents=[{"name": "forgetful", "system_prompt": "You keep nothing.", "memory": False}],
        bindings=[{"agent": "forgetful", "provider": "slack"}],
    )
    async with Harness.running(settings, channels={"telegram": telegram, "slack": slack}) as h:
        h.manager.identity = OneOwner()
        await h.ask("I'm Alice; I prefer Rust", channel=telegram)  # the built-in agent remembers
        await h.ask("and I also like Go", channel=slack, chat="C1")
        await h.ask("what do I prefer?", channel=telegram, chat="t2")
    extractions = [b for b in llm.completions if EXTRACTION_MARKER in system_text(b)]
    assert len(extractions) == 2  # after each built-in turn, none after the forgetful one
    assert all("like Go" not in str(b["messages"]) for b in extractions)
    _first, forgetful, remembered_again = chat_requests(llm)
    assert "Prefers Rust for new services" not in system_text(forgetful)
    assert system_text(forgetful).startswith("You keep nothing.")
    assert "Prefers Rust for new services" in system_text(remembered_again)
