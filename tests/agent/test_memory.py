"""SCENARIOS 20 and 49: per-owner memory, extracted in one chat and used on another platform."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agent.memory import EXTRACTION_MARKER
from bot.identity import Identity
from channels.memory import MemoryChannel
from channels.types import InboundMessage
from tests.agent.helpers import agent_settings, everything_shown, system_text, wait_until
from tests.fakes.openai_server import Reply, echo_reply, last_user_text
from tests.harness import Harness


class OneOwner:
    """Both platform accounts belong to alice (what a /connect binding does in production)."""

    async def resolve(self, message: InboundMessage) -> Identity:
        return Identity(owner="alice", bound=True)


def memory_model(facts: list[dict[str, Any]], summary: str = "Alice writes Rust."):  # type: ignore[no-untyped-def]
    """The fake model: answers extraction prompts with ``facts``, echoes everything else."""

    def reply(body: dict[str, Any]) -> Reply:
        if EXTRACTION_MARKER in system_text(body):
            return Reply(text="```json\n" + json.dumps({"facts": facts, "summary": summary}) + "\n```")
        return echo_reply(body)

    return reply


def chat_requests(llm) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    return [b for b in llm.completions if EXTRACTION_MARKER not in system_text(b)]


async def test_facts_learned_on_one_platform_are_used_on_another_platform_of_the_same_owner(tmp_path, llm):
    llm.default_reply = memory_model(
        [
            {"content": "Prefers Rust for new services", "category": "preference", "confidence": 0.9},
            {"content": "Works on the billing project", "category": "project", "confidence": 0.8},
            {"content": "Might like tea", "category": "preference", "confidence": 0.2},
        ]
    )
    telegram, slack = MemoryChannel("telegram"), MemoryChannel("slack")
    settings = agent_settings(tmp_path, llm, remember=True)
    async with Harness.running(settings, channels={"telegram": telegram, "slack": slack}) as h:
        h.manager.identity = OneOwner()
        await h.ask("I'm Alice; I prefer Rust and I work on billing", channel=telegram)
        extraction = [b for b in llm.completions if EXTRACTION_MARKER in system_text(b)]
        assert len(extraction) == 1
        assert "User: I'm Alice; I prefer Rust and I work on billing" in last_user_text(extraction[0])

        answer = await h.ask("write a service for rust billing", channel=slack, chat="C1")
        assert answer == "echo: write a service for rust billing"
        prompt = system_text(chat_requests(llm)[-1])
        assert "Prefers Rust for new services (preference)" in prompt
        assert "Works on the billing project (project)" in prompt
        assert "Summary: Alice writes Rust." in prompt
        assert "Might like tea" not in prompt  # too unsure to keep
        # The memory block is context for the model, never chat text.
        assert not any("Prefers Rust" in text for text in everything_shown(slack))

        shown = await h.ask("/memory", channel=slack, chat="C1")
        assert "• Prefers Rust for new services (preference, 90%)" in shown
        assert "Summary: Alice writes Rust." in shown

        cleared = await h.ask("/memory clear", channel=telegram)
        assert "Forgot everything" in cleared and "(2 fact(s))" in cleared
        assert await h.ask("/memory", channel=slack, chat="C1") == "I don't remember anything about you yet."
        llm.default_reply = echo_reply
        await h.ask("anything about me?", channel=slack, chat="C1")
        assert "Prefers Rust" not in system_text(chat_requests(llm)[-1])


async def test_duplicate_facts_merge_and_the_weakest_are_evicted_at_the_cap(tmp_path, llm):
    settings = agent_settings(tmp_path, llm, memory={"enabled": True, "debounce_seconds": 0, "max_facts": 2})
    async with Harness.running(settings) as h:
        llm.default_reply = memory_model(
            [
                {"content": "Uses vim as editor", "category": "preference", "confidence": 0.7},
                {"content": "Lives in Lisbon", "category": "profile", "confidence": 0.6},
            ]
        )
        await h.ask("I use vim and live in Lisbon")
        llm.default_reply = memory_model(
            [
                {"content": "uses Vim as editor", "category": "preference", "confidence": 0.95},
                {"content": "Maintains the payments API", "category": "project", "confidence": 0.9},
            ]
        )
        await h.ask("I maintain the payments API, in vim of course")
        shown = await h.ask("/memory")
    assert "• uses Vim as editor (preference, 95%)" in shown
    assert "• Maintains the payments API (project, 90%)" in shown
    assert "Lisbon" not in shown  # the weakest fact made room
    assert shown.count("Vim") + shown.count("vim") == 1


async def test_memory_is_not_shared_between_different_owners(tmp_path, llm):
    llm.default_reply = memory_model(
        [{"content": "Is allergic to peanuts", "category": "profile", "confidence": 0.9}]
    )
    async with Harness.running(agent_settings(tmp_path, llm, remember=True)) as h:
        await h.ask("I'm allergic to peanuts", sender="user-1")
        llm.default_reply = echo_reply
        await h.ask("hello", sender="user-2", chat="chat-2")
        assert await h.ask("/memory", sender="user-2", chat="chat-2") == (
            "I don't remember anything about you yet."
        )
    assert "peanuts" not in system_text(chat_requests(llm)[-1])


async def test_extraction_waits_until_the_conversation_settles_and_covers_every_turn(tmp_path, llm):
    settings = agent_settings(tmp_path, llm, memory={"enabled": True, "debounce_seconds": 4})
    llm.default_reply = memory_model([{"content": "Uses emacs", "category": "preference", "confidence": 0.9}])
    async with Harness.running(settings) as h:
        await h.ask("I use emacs")
        await h.ask("and I live in Oslo")
        assert not [b for b in llm.completions if EXTRACTION_MARKER in system_text(b)]
        await wait_until(
            lambda: any(EXTRACTION_MARKER in system_text(b) for b in llm.completions), timeout=20
        )
        [extraction] = [b for b in llm.completions if EXTRACTION_MARKER in system_text(b)]
        transcript = last_user_text(extraction)
        assert "User: I use emacs" in transcript and "User: and I live in Oslo" in transcript
        await wait_until_memory(h, "Uses emacs")


async def wait_until_memory(h: Harness, needle: str) -> None:
    memory = h.service.agent.memory  # type: ignore[union-attr]
    for _ in range(200):
        if any(needle in f.content for f in await memory.store.facts("memory:-:user-1")):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{needle!r} never stored")
