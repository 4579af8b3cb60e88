"""Telegram's own conventions: drafts in private chats, "typing…", the command menu, quotes."""

from __future__ import annotations

import asyncio

import httpx

from channels.telegram.channel import TelegramChannel
from channels.telegram.markup import markdown_to_html
from tests.fakes.openai_server import Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import Harness

from .conftest import BOT_USERNAME, telegram_config


async def test_a_private_answer_streams_as_a_draft_and_lands_as_one_new_message(
    tg: FakeTelegram, tg_settings, llm
):
    channel = TelegramChannel(telegram_config(tg, private_drafts=True), settings=tg_settings)
    words = " ".join(f"word{i}" for i in range(40))
    llm.script(Reply(text=words, chunk_size=8, delay=0.03))
    async with Harness.running(tg_settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
        tg.user_message(42, "talk")
        await tg.wait_for_bot_text(42, "word39")
        await harness.idle()

    drafts = tg.calls("sendMessageDraft")
    assert len(drafts) >= 2, "the placeholder and at least one partial text went out as a draft"
    assert {d["params"]["draft_id"] for d in drafts} == {drafts[0]["params"]["draft_id"]} != {0}
    assert all(d["status"] == 200 for d in drafts)
    assert any("word" in d["params"]["text"] for d in drafts), "partial answer text was drafted"
    assert tg.calls("editMessageText") == []
    [sent] = tg.calls("sendMessage")
    assert [m.text for m in tg.bot_messages(42)] == [words]
    assert tg.bot_messages(42)[0].history == [words], "the persisted message was never a placeholder"
    assert sent["params"]["parse_mode"] == "HTML"


async def test_groups_keep_the_edited_message_because_drafts_are_for_private_chats(
    tg: FakeTelegram, tg_settings, llm
):
    channel = TelegramChannel(telegram_config(tg, private_drafts=True), settings=tg_settings)
    llm.script(Reply(text="Group answer, edited in place.", chunk_size=4, delay=0.03))
    async with Harness.running(tg_settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
        tg.user_message(-100, f"@{BOT_USERNAME} hi", chat_type="supergroup")
        await tg.wait_for_bot_text(-100, "edited in place.")
        await harness.idle()

    assert tg.calls("sendMessageDraft") == []
    assert len(tg.calls("editMessageText")) >= 1


async def test_a_refused_draft_falls_back_to_editing_a_message(tg: FakeTelegram, tg_settings, llm):
    channel = TelegramChannel(telegram_config(tg, private_drafts=True), settings=tg_settings)
    tg.fail_next("sendMessageDraft", status=400, description="Bad Request: TEXTDRAFT_PEER_INVALID")
    llm.script(Reply(text="Still answered after the refusal.", chunk_size=4, delay=0.03))
    async with Harness.running(tg_settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
        tg.user_message(42, "hi")
        await tg.wait_for_bot_text(42, "after the refusal.")
        await harness.idle()

    assert len(tg.calls("sendMessageDraft")) == 1
    assert tg.bot_texts(42) == ["Still answered after the refusal."]
    assert tg.bot_messages(42)[0].history[0] == "…", "the edit path's placeholder took over"


async def test_the_fake_accepts_drafts_only_in_private_chats_and_with_a_non_zero_id(tg: FakeTelegram):
    tg.open_chat(-100, "supergroup")
    tg.open_chat(42)
    async with httpx.AsyncClient(base_url=f"{tg.url}/bot{tg.token}") as client:
        group = (
            await client.post("/sendMessageDraft", data={"chat_id": -100, "draft_id": 1, "text": "x"})
        ).json()
        zero = (
            await client.post("/sendMessageDraft", data={"chat_id": 42, "draft_id": 0, "text": "x"})
        ).json()
        empty = (
            await client.post("/sendMessageDraft", data={"chat_id": 42, "draft_id": 5, "text": ""})
        ).json()
    assert group == {"ok": False, "error_code": 400, "description": "Bad Request: TEXTDRAFT_PEER_INVALID"}
    assert zero["ok"] is False and zero["error_code"] == 400
    assert empty == {"ok": True, "result": True}, 'an empty draft is the "Thinking…" placeholder'


async def test_typing_is_shown_while_the_model_thinks_and_stops_with_the_answer(
    tg: FakeTelegram, tg_settings, llm
):
    channel = TelegramChannel(telegram_config(tg, typing_interval_seconds=0.1), settings=tg_settings)
    llm.script(Reply(text="Thought about it.", chunk_size=100, delay=1.0))  # one chunk, after a long think
    async with Harness.running(tg_settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
        tg.user_message(42, "think hard")
        await tg.wait_for_bot_text(42, "Thought about it.")
        await harness.idle()
        typing = tg.calls("sendChatAction")
        await asyncio.sleep(0.5)  # five intervals: a heartbeat still running would have sent more
        after = tg.calls("sendChatAction")

    assert len(typing) >= 2, "re-sent while nothing visible changed"
    assert all(c["params"] == {"chat_id": 42, "action": "typing"} and c["status"] == 200 for c in typing)
    assert len(after) == len(typing), "the heartbeat stopped with the finished reply"


async def test_typing_stays_quiet_while_text_keeps_changing(tg: FakeTelegram, tg_settings, llm):
    channel = TelegramChannel(telegram_config(tg, typing_interval_seconds=5.0), settings=tg_settings)
    llm.script(Reply(text=" ".join(f"w{i}" for i in range(30)), chunk_size=6, delay=0.02))
    async with Harness.running(tg_settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
        tg.user_message(42, "quick")
        await tg.wait_for_bot_text(42, "w29")
        await harness.idle()
    assert tg.calls("sendChatAction") == []


async def test_start_registers_every_chat_command_in_the_menu(tg: FakeTelegram, tg_harness):
    [call] = tg.calls("setMyCommands")
    names = [name for name, _ in tg.my_commands]
    assert call["status"] == 200
    assert {"help", "stop", "status", "new", "connect"} <= set(names)
    registry = tg_harness.service.manager.commands
    assert names == [c.name for c in registry.commands]
    assert all(description for _, description in tg.my_commands)


async def test_the_fake_rejects_a_command_menu_telegram_would_reject(tg: FakeTelegram):
    async with httpx.AsyncClient(base_url=f"{tg.url}/bot{tg.token}") as client:
        bad_name = await client.post(
            "/setMyCommands", json={"commands": [{"command": "Help", "description": "x"}]}
        )
        no_text = await client.post(
            "/setMyCommands", json={"commands": [{"command": "help", "description": ""}]}
        )
    assert bad_name.json()["description"] == "Bad Request: BOT_COMMAND_INVALID"
    assert no_text.json()["description"] == "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID"


def test_quoted_lines_render_as_one_blockquote():
    html = markdown_to_html("Before\n> first **bold**\n> second\nafter")
    assert html == "Before\n<blockquote>first <b>bold</b>\nsecond</blockquote>\nafter"


async def test_a_quote_in_an_answer_reaches_telegram_as_a_blockquote(tg: FakeTelegram, tg_harness, llm):
    llm.script(Reply(text="He said:\n> ship it\nSo we did.", chunk_size=50))
    tg.user_message(42, "what happened?")
    reply = await tg.wait_for_bot_text(42, "So we did.")
    assert "<blockquote>ship it</blockquote>" in reply.raw[-1]
    assert reply.text == "He said:\nship it\nSo we did."


async def test_with_drafts_a_queued_notice_is_still_a_message_that_becomes_the_answer(
    tg: FakeTelegram, tg_settings, llm
):
    channel = TelegramChannel(telegram_config(tg, private_drafts=True), settings=tg_settings)
    llm.script(
        Reply(text=" ".join(f"first{i}" for i in range(30)), chunk_size=6, delay=0.05),
        Reply(text="The second answer.", chunk_size=6, delay=0.01),
    )
    async with Harness.running(tg_settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
        tg.user_message(42, "first")
        await tg.wait_until(lambda: tg.calls("sendMessageDraft"))
        tg.user_message(42, "second")
        notice = await tg.wait_for_bot_text(42, "⏳ Queued")
        await tg.wait_for_bot_text(42, "The second answer.")
        await harness.idle()
    assert notice.history[0].startswith("⏳ Queued") and notice.text == "The second answer."
    assert sorted(tg.bot_texts(42)) == ["The second answer.", " ".join(f"first{i}" for i in range(30))]
