"""The service's lifecycle guards (``async with``, one start per service) and the one hook told about
failed turns (``ChannelManager.on_turn_error``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.service import Service
from bot.turns import TurnError
from channels.memory import MemoryChannel
from config.schema import Settings
from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.harness import Harness


async def answered(service: Service, chat: MemoryChannel, text: str) -> list[str]:
    await chat.say(text, message_id=f"m-{text}")  # unique across the services sharing one inbox
    assert service.manager is not None
    await asyncio.wait_for(service.manager.wait_idle(), 20)
    return [m.text for m in chat.in_chat("chat-1")]


async def test_async_with_runs_the_service_once_and_stops_it_on_the_way_out(settings: Settings) -> None:
    chat = MemoryChannel("memory")
    async with Service(settings, channels={"memory": chat}) as service:
        assert await answered(service, chat, "hi") == ["echo: hi"]
        with pytest.raises(RuntimeError, match="already running"):
            await service.start()
        # The refused second start changed nothing: the same service still answers.
        assert await answered(service, chat, "still there?") == ["echo: hi", "echo: still there?"]
    with pytest.raises(RuntimeError, match="has stopped; build a new Service"):
        await service.start()
    # Stopped for real: the SQLite database is free for the next service (else DatabaseInUse).
    again = MemoryChannel("memory")
    async with Service(settings, channels={"memory": again}) as service:
        assert await answered(service, again, "back") == ["echo: back"]


async def test_a_start_that_fails_inside_async_with_lets_go_of_what_it_had_taken(settings: Settings) -> None:
    # The agent's checkpoint file cannot be opened: the agent's start fails after storage, channels and
    # features started (the database's instance lock among them).
    blocked = Path(settings.data_dir) / "switchboard-checkpoints.db"
    blocked.mkdir(parents=True)
    with pytest.raises(Exception, match="unable to open database file"):
        async with Service(settings, channels={"memory": MemoryChannel("memory")}):
            pytest.fail("the block must not run when the start failed")
    blocked.rmdir()
    chat = MemoryChannel("memory")
    async with Service(settings, channels={"memory": chat}) as service:
        assert await answered(service, chat, "hi") == ["echo: hi"]


def failing_model(tmp_path: Path, llm: FakeOpenAI) -> Settings:
    model = {"name": "default", "model": "m", "api_key": "sk-x", "base_url": llm.base_url, "max_retries": 0}
    return make_settings(tmp_path, llm, models=[model])


async def test_a_failed_turn_is_told_once_to_the_error_hook_with_the_trace_the_user_saw(
    tmp_path: Path, llm: FakeOpenAI
) -> None:
    seen: list[TurnError] = []

    async def record(failure: TurnError) -> None:
        seen.append(failure)

    llm.script(Reply(status=500, error="upstream exploded"))
    async with Harness.running(failing_model(tmp_path, llm)) as h:
        h.manager.on_turn_error = record
        answer = await h.ask("hello?")
        [failure] = seen
        assert failure.stage == "agent"
        assert failure.message.text == "hello?"
        assert f"(trace {failure.trace_id})" in answer
        conversation = await h.manager.threads.get(failure.message.conversation_key)
        assert conversation is not None and failure.thread_id == conversation.thread_id
        assert await h.ask("and now?") == "echo: and now?"
        assert len(seen) == 1, "a turn that went well is not reported"


async def test_an_error_hook_that_fails_changes_nothing_for_the_user(tmp_path: Path, llm: FakeOpenAI) -> None:
    async def broken(failure: TurnError) -> None:
        raise RuntimeError("the pager is down")

    llm.script(Reply(status=500, error="upstream exploded"))
    async with Harness.running(failing_model(tmp_path, llm)) as h:
        h.manager.on_turn_error = broken
        answer = await h.ask("hello?")
        assert answer.startswith(
            "⚠️ The model service had an error while answering. Please try again. (trace "
        )
        assert await h.service.inbox.counts() == {"done": 1}
        assert await h.ask("and now?") == "echo: and now?"
