"""A message that fails every time is dead-lettered after ``bus.max_attempts``: the user is told once, it
never runs again by itself (not on redelivery, not at restart), and the operator sees and retries it
with ``switchboard inbox list --failed`` / ``switchboard inbox retry ID``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
import yaml

from bot.cli import main as cli_main
from bot.identity import Identity, unbound_owner
from channels.memory import MemoryChannel
from channels.types import InboundMessage
from tests.conftest import fresh_pg_database, make_settings
from tests.harness import Harness

DEAD_NOTE = "I tried 3 times and could not handle this message"


@pytest.fixture(params=["sqlite", "postgres"])
async def database(request) -> AsyncIterator[dict[str, str]]:  # type: ignore[no-untyped-def]
    """Both inbox backends: the failed/dead/retry writes are the same SQL on each (bot/inbox.py)."""
    source = fresh_pg_database() if request.param == "postgres" else contextlib.nullcontext(None)
    async with source as url:
        yield {"url": url} if url else {}


class BrokenDirectory:
    """An identity resolver (the manager's public hook) that fails for as long as ``broken`` is set."""

    def __init__(self) -> None:
        self.broken = True

    async def resolve(self, message: InboundMessage) -> Identity:
        if self.broken:
            raise RuntimeError("directory service unavailable")
        return Identity(unbound_owner(message), bound=False)


async def run_cli(*argv: str) -> int:
    return await asyncio.to_thread(cli_main, list(argv))


def cli_config(tmp_path, settings) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / "cli-config.yaml"
    path.write_text(
        yaml.safe_dump({"database": {"url": settings.database.url}, "data_dir": settings.data_dir})
    )
    return str(path)


async def test_a_poison_message_is_set_aside_after_max_attempts_and_the_operator_can_retry_it(
    tmp_path, llm, capsys, database
):
    settings = make_settings(
        tmp_path,
        llm,
        bus={"max_attempts": 3, "retry_poll_seconds": 0.1},
        **({"database": database} if database else {}),
    )
    config = cli_config(tmp_path, settings)
    async with Harness.running(settings) as h:
        directory = h.manager.identity = BrokenDirectory()
        message = h.chat.make_message("poison?", message_id="p1")
        await h.chat.deliver(message)
        # Retried in process (after 1 s, then 2 s); the third failure dead-letters it, and only then
        # is the user told — once.
        await h.idle(timeout=20)
        [note] = h.chat.in_chat("chat-1")
        assert DEAD_NOTE in note.text
        assert await h.service.inbox.counts() == {"dead": 1}

        assert await h.chat.deliver(message) is False  # a redelivery does not run it (or tell) again
        await h.idle()
        assert len(h.chat.in_chat("chat-1")) == 1

        capsys.readouterr()
        assert await run_cli("inbox", "list", "--failed", "--config", config) == 0
        listing = capsys.readouterr().out
        [entry] = await h.service.inbox.entries(failed_only=True)
        assert entry.id in listing and "dead" in listing and "directory service unavailable" in listing

        directory.broken = False  # the operator fixed the cause
        assert await run_cli("inbox", "retry", entry.id, "--config", config) == 0
        assert "retried: answered" in capsys.readouterr().out
        await h.idle()
        assert h.chat.in_chat("chat-1")[-1].text == "echo: poison?"
        assert await h.service.inbox.counts() == {"done": 1}
        assert await run_cli("inbox", "retry", entry.id, "--config", config) == 1
        assert "only failed or dead-lettered" in capsys.readouterr().out
    assert len(llm.completions) == 1


async def test_a_dead_lettered_message_is_not_resumed_at_restart(tmp_path, llm, database):
    settings = make_settings(
        tmp_path, llm, bus={"max_attempts": 1}, **({"database": database} if database else {})
    )
    async with Harness.running(settings) as h:
        h.manager.identity = BrokenDirectory()
        await h.chat.say("poison?", message_id="p1")
        await h.idle()
        assert await h.service.inbox.counts() == {"dead": 1}
    chat = MemoryChannel("memory")
    async with Harness.running(settings, channels={"memory": chat}) as again:
        await again.idle()
        assert chat.in_chat("chat-1") == []
        assert again.service.bus.load == 0
    assert llm.completions == []


class SecretsDown(MemoryChannel):
    """A platform whose per-turn credentials cannot be fetched: every turn fails after its "…" showed
    (outside the agent), as a bug in the bot would."""

    async def run_secrets(self, message: InboundMessage) -> dict[str, str]:
        raise RuntimeError("credential store unavailable")


async def test_the_set_aside_note_replaces_the_placeholder_instead_of_leaving_it_behind(tmp_path, llm):
    chat = SecretsDown("memory")
    settings = make_settings(tmp_path, llm, bus={"max_attempts": 3})
    async with Harness.running(settings, channels={"memory": chat}) as h:
        message = chat.make_message("why me?", message_id="p2")
        for _ in range(3):  # each redelivery runs it again, in the same message, until it is set aside
            await chat.deliver(message)
            await h.idle()
        assert await h.service.inbox.counts() == {"dead": 1}
    [shown] = chat.in_chat("chat-1")
    assert DEAD_NOTE in shown.text, "the '…' became the note; nothing stale stays"
    assert shown.history[0] == "…"
