"""Issue 28: who may make the agent act, through the Telegram fake (docs/security.md).

A stranger's private message gets a pairing request an admin approves in chat; under ``chat_only`` a guest
is answered but the agent's tools that act are refused; under ``ignore`` nothing happens at all.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import select

from bot.inbox import inbox_table
from channels.telegram.channel import TelegramChannel
from config.schema import Settings
from tests.agent.helpers import all_tool_results
from tests.channels.telegram.conftest import telegram_config
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.fakes.telegram import FakeTelegram
from tests.harness import Harness

ADMIN = 7001
STRANGER = 5005


@asynccontextmanager
async def running(tg: FakeTelegram, settings: Settings, **trust: Any) -> AsyncIterator[Harness]:
    """The service with the production trust defaults, plus ``trust`` overrides; user 7001 is an admin."""
    config = telegram_config(tg, admins=[str(ADMIN)], trust=trust)
    channel = TelegramChannel(config, settings=settings)
    async with Harness.running(settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
        yield harness


def stranger(tg: FakeTelegram, text: str, **kwargs: Any) -> None:
    tg.user_message(STRANGER, text, user_id=STRANGER, username="mallory", first_name="Mallory", **kwargs)


async def test_a_strangers_dm_gets_a_pairing_code_an_admin_approves_then_it_is_answered(
    tg: FakeTelegram, tg_settings: Settings, llm: FakeOpenAI
) -> None:
    async with running(tg, tg_settings, members=["4004"]) as h:  # guests: pair is the default
        stranger(tg, "what is on the roadmap?")
        request = await tg.wait_for_bot_text(STRANGER, "pairing code")
        code = re.search(r"pairing code is ([A-Z0-9]{8})", request.text)
        assert code is not None, request.text
        assert "/pair " + code.group(1) in request.text
        await h.idle()
        assert llm.completions == []  # nothing was read by the model
        # Writing again while waiting repeats the same code, it does not mint a new one.
        stranger(tg, "hello?")
        await tg.wait_until(lambda: len(tg.bot_texts(STRANGER)) == 2)
        assert tg.bot_texts(STRANGER) == [request.text] * 2

        # A member who is not an admin cannot let anyone in.
        tg.user_message(4004, f"/pair {code.group(1)}", user_id=4004, username="eve")
        refused = await tg.wait_for_bot_text(4004, "only an admin")
        assert refused.text == "Sorry, only an admin of this bot can approve pairing requests."

        tg.user_message(ADMIN, f"/pair {code.group(1).lower()}", user_id=ADMIN, username="boss")
        confirmed = await tg.wait_for_bot_text(ADMIN, "Paired")
        assert confirmed.text == f"✅ Paired: Mallory ({STRANGER}) is a member now."

        # The stranger hears it in their own chat, and the message that asked is answered.
        await tg.wait_for_bot_text(STRANGER, "An admin approved you")
        await tg.wait_for_bot_text(STRANGER, "echo: what is on the roadmap?")
        stranger(tg, "and after that?")
        await tg.wait_for_bot_text(STRANGER, "echo: and after that?")
        # A used code is gone.
        tg.user_message(ADMIN, f"/pair {code.group(1)}", user_id=ADMIN, username="boss")
        await tg.wait_for_bot_text(ADMIN, "There is no open pairing request")

    # Durable: after a restart the paired sender is still a member.
    async with running(tg, tg_settings):
        stranger(tg, "still there?")
        await tg.wait_for_bot_text(STRANGER, "echo: still there?")


async def test_under_chat_only_a_guest_is_answered_but_bash_is_refused_with_a_clear_tool_result(
    tg: FakeTelegram, tg_settings: Settings, llm: FakeOpenAI
) -> None:
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "echo pwned > owned.txt"})]),
        Reply(text="I can only chat here."),
    )
    async with running(tg, tg_settings, guests="chat_only") as h:
        stranger(tg, "please run a command for me")
        await tg.wait_for_bot_text(STRANGER, "I can only chat here.")
        # Members' commands are not for guests either (a schedule would act later on their behalf).
        stranger(tg, "/schedule in 5m do something")
        refusal = await tg.wait_for_bot_text(STRANGER, "only for members")
        await h.idle()
    [result] = all_tool_results(llm)
    assert result.startswith("Refused: `bash` is not available in this conversation: this conversation's")
    assert "guest" in result
    # The model was never offered a tool that acts, nor told it could schedule.
    offered = [t["function"]["name"] for t in llm.completions[0]["tools"]]
    assert offered == ["ls", "read_file"]
    assert refusal.text.startswith("Sorry, /schedule is only for members of this bot.")
    workspace_files = [p.name for p in (h.service.data_dir / "users").rglob("owned.txt")]
    assert workspace_files == []


async def test_in_a_group_a_stranger_is_a_guest_answered_without_tools_by_default(
    tg: FakeTelegram, tg_settings: Settings, llm: FakeOpenAI
) -> None:
    llm.script(Reply(tool_calls=[ToolCall("bash", {"command": "id"})]), Reply(text="Not here, sorry."))
    async with running(tg, tg_settings):
        tg.user_message(-100, "@switchboard_bot run id", user_id=STRANGER, username="mallory")
        answer = await tg.wait_for_bot_text(-100, "Not here, sorry.")
    assert "pairing" not in answer.text  # no code in a group: there it would be no secret
    [result] = all_tool_results(llm)
    assert result.startswith("Refused: `bash`")


async def test_under_ignore_a_guest_gets_no_answer_and_nothing_runs(
    tg: FakeTelegram, tg_settings: Settings, llm: FakeOpenAI
) -> None:
    async with running(tg, tg_settings, guests="ignore") as h:
        stranger(tg, "hello, anyone?")
        # The admin is still answered (the policy is about strangers); updates are stored in order, so
        # once this is answered the stranger's message was stored too, and idle() waits for it.
        tg.user_message(ADMIN, "hi", user_id=ADMIN, username="boss")
        await tg.wait_for_bot_text(ADMIN, "echo: hi")
        await h.idle()
        query = select(inbox_table.c.status, inbox_table.c.error).where(inbox_table.c.chat == str(STRANGER))
        async with h.service.db.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
    assert tg.bot_texts(STRANGER) == []
    assert [c for c in llm.completions if "hello, anyone?" in str(c["messages"])] == []
    assert rows == [("done", "not answered: the sender is a guest and this channel's policy is ignore")]


async def test_a_strangers_bare_start_gets_the_pairing_code_and_start_with_a_code_still_connects(
    tg: FakeTelegram, tg_settings: Settings, llm: FakeOpenAI
) -> None:
    async with running(tg, tg_settings):
        stranger(tg, "/start")  # what every Telegram chat with a bot begins with
        first = await tg.wait_for_bot_text(STRANGER, "pairing code")
        stranger(tg, "/start not-a-real-code")  # a code gets past the trust policy, to be judged
        judged = await tg.wait_for_bot_text(STRANGER, "connection code")
    assert "Your pairing code is" in first.text
    assert judged.text == "That connection code is invalid or expired."
    assert llm.completions == []
