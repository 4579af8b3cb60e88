"""Who the bot answers on Telegram, and which conversation a message belongs to.

Fake Telegram Bot API ↔ real python-telegram-bot ↔ Switchboard service ↔ fake model.
"""

from __future__ import annotations

import json

from tests.fakes.openai_server import Reply
from tests.fakes.telegram import FakeTelegram

from .conftest import BOT_USERNAME

GROUP = -1001234


def prompt_text(request: dict) -> str:
    """Everything the model was shown for one request, as one string."""
    return json.dumps(request.get("messages", []), ensure_ascii=False)


async def test_a_direct_message_is_answered_by_one_message_edited_in_place_to_the_final_text(
    tg: FakeTelegram, tg_harness, llm
):
    llm.script(Reply(text="Hello there, **how** can I help you today?", chunk_size=4, delay=0.03))
    tg.user_message(42, "hi")

    reply = await tg.wait_for_bot_text(42, "can I help you today?")
    await tg_harness.idle()

    assert len(tg.calls("sendMessage")) == 1
    assert len(tg.calls("editMessageText")) >= 1
    assert tg.bot_messages(42) == [reply]
    assert reply.history[0] == "…"
    assert reply.text == "Hello there, how can I help you today?"
    assert "<b>how</b>" in reply.raw[-1] and reply.parse_mode == "HTML"


async def test_a_group_message_without_a_mention_is_ignored_and_with_a_mention_answered(
    tg: FakeTelegram, tg_harness, llm
):
    tg.user_message(GROUP, "just chatting among humans", chat_type="supergroup")
    tg.user_message(GROUP, "/help@some_other_bot", chat_type="supergroup")
    asked = tg.user_message(GROUP, f"@{BOT_USERNAME} what is 2+2?", chat_type="supergroup")

    reply = await tg.wait_for_bot_text(GROUP, "echo: what is 2+2?")
    await tg_harness.idle()

    assert len(llm.completions) == 1, "only the mention reached the model"
    assert "just chatting" not in prompt_text(llm.completions[0])
    assert f"@{BOT_USERNAME}" not in prompt_text(llm.completions[0]), "the leading mention is stripped"
    assert tg.bot_messages(GROUP) == [reply]
    assert reply.reply_to == asked["message_id"], "in groups the answer quotes the question"


async def test_bots_messages_are_ignored_even_when_they_mention_the_bot(tg: FakeTelegram, tg_harness, llm):
    tg.user_message(GROUP, f"@{BOT_USERNAME} ping", chat_type="supergroup", is_bot=True, user_id=55)
    tg.user_message(42, "and a human")

    await tg.wait_for_bot_text(42, "echo: and a human")
    await tg_harness.idle()
    assert tg.bot_messages(GROUP) == []
    assert len(llm.completions) == 1


async def test_a_reply_chain_in_a_group_is_its_own_conversation(tg: FakeTelegram, tg_harness, llm):
    tg.user_message(GROUP, f"@{BOT_USERNAME} my favourite colour is teal", chat_type="supergroup")
    first_answer = await tg.wait_for_bot_text(GROUP, "echo: my favourite colour is teal")
    await tg_harness.idle()

    # Replying to the bot's answer continues that conversation — no mention needed.
    tg.user_message(GROUP, "what colour did I say?", reply_to=first_answer.message_id, user_id=1002)
    await tg.wait_for_bot_text(GROUP, "echo: what colour did I say?")
    await tg_harness.idle()
    # A new mention outside the chain starts another conversation.
    tg.user_message(GROUP, f"@{BOT_USERNAME} what colour did I say, again?")
    await tg.wait_for_bot_text(GROUP, "echo: what colour did I say, again?")
    await tg_harness.idle()

    in_chain, fresh = llm.completions[1], llm.completions[2]
    assert "teal" in prompt_text(in_chain)
    assert "teal" not in prompt_text(fresh)


async def test_a_forum_topic_is_one_conversation_and_the_answer_stays_in_the_topic(
    tg: FakeTelegram, tg_harness, llm
):
    tg.user_message(GROUP, f"@{BOT_USERNAME} remember the word kiwi", chat_type="supergroup", thread_id=7)
    answer = await tg.wait_for_bot_text(GROUP, "echo: remember the word kiwi")
    await tg_harness.idle()
    tg.user_message(GROUP, f"@{BOT_USERNAME} which word?", thread_id=7)
    second = await tg.wait_for_bot_text(GROUP, "echo: which word?")
    await tg_harness.idle()

    assert answer.thread_id == 7 and second.thread_id == 7
    assert all(c["params"].get("message_thread_id") == 7 for c in tg.calls("sendMessage"))
    assert "kiwi" in prompt_text(llm.completions[1])


async def test_a_duplicate_delivery_of_the_same_message_is_answered_once(tg: FakeTelegram, tg_harness, llm):
    llm.script(Reply(text="only once", chunk_size=3, delay=0.05))
    message = tg.user_message(42, "say it once")
    tg.redeliver(message)
    await tg.wait_for_bot_text(42, "only once")
    await tg_harness.idle()
    # A late redelivery, after the answer is done, is also recognised.
    tg.redeliver(message)
    tg.user_message(42, "next")
    await tg.wait_for_bot_text(42, "echo: next")
    await tg_harness.idle()

    assert len(llm.completions) == 2
    assert [m.text for m in tg.bot_messages(42)] == ["only once", "echo: next"]


async def test_help_status_and_new_commands_answer_in_the_chat(tg: FakeTelegram, tg_harness, llm):
    tg.user_message(42, "/help")
    help_text = (await tg.wait_for_bot_text(42, "Commands:")).text
    assert "/new" in help_text and "/status" in help_text and "/help" in help_text

    tg.user_message(42, "remember pineapple")
    await tg.wait_for_bot_text(42, "echo: remember pineapple")
    await tg_harness.idle()
    tg.user_message(42, "/status")
    before = (await tg.wait_for_bot_text(42, "Thread:")).text
    tg.user_message(42, "/new")
    await tg.wait_for_bot_text(42, "Started a new conversation")
    tg.user_message(42, "/status@" + BOT_USERNAME)
    after = await tg.wait_until(lambda: [m.text for m in tg.bot_messages(42) if "Thread:" in m.text][1:])
    tg.user_message(42, "what fruit?")
    await tg.wait_for_bot_text(42, "echo: what fruit?")
    await tg_harness.idle()

    assert before.splitlines()[0] != after[0].splitlines()[0], "/new switched to another thread"
    assert "pineapple" not in prompt_text(llm.completions[-1])
    assert len(llm.completions) == 2, "commands never reach the model"


async def test_commands_in_a_group_need_no_mention_unless_addressed_to_another_bot(
    tg: FakeTelegram, tg_harness, llm
):
    tg.user_message(GROUP, "/status@some_other_bot", chat_type="supergroup")
    tg.user_message(GROUP, f"/status@{BOT_USERNAME}")
    await tg.wait_for_bot_text(GROUP, "Thread:")
    await tg_harness.idle()
    assert len(tg.bot_messages(GROUP)) == 1


async def test_start_with_a_code_reaches_the_connect_command_unchanged(tg: FakeTelegram, tg_harness, llm):
    tg.user_message(42, "/start not-a-real-code")
    private = await tg.wait_until(lambda: tg.bot_texts(42))
    tg.user_message(GROUP, f"/start@{BOT_USERNAME} not-a-real-code", chat_type="supergroup")
    group = await tg.wait_until(lambda: tg.bot_texts(GROUP))
    await tg_harness.idle()

    for answer in (private[0], group[0]):
        # Either the connect command judged the code, or (without it) the router named /start.
        assert "connection code is invalid or expired" in answer or "Unknown command /start" in answer
    assert llm.completions == []


async def test_only_allowed_users_are_answered_but_everyone_can_send_start(
    tg: FakeTelegram, tg_settings, llm
):
    from channels.telegram.channel import TelegramChannel
    from tests.harness import Harness

    from .conftest import telegram_config

    channel = TelegramChannel(telegram_config(tg, allowed_users=["@Bob", "1003"]), settings=tg_settings)
    async with Harness.running(tg_settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
        tg.user_message(42, "hello from alice", user_id=42, username="alice")
        refused = await tg.wait_for_bot_text(42, "not allowed")
        tg.user_message(43, "hello from bob", user_id=43, username="bob")
        tg.user_message(44, "hello from carol", user_id=1003, username="carol")
        await tg.wait_for_bot_text(43, "echo: hello from bob")
        await tg.wait_for_bot_text(44, "echo: hello from carol")
        tg.user_message(42, "/start some-code", user_id=42, username="alice")
        await tg.wait_until(lambda: len(tg.bot_texts(42)) == 2)
        await harness.idle()

    assert refused.text == "Sorry, you're not allowed to use this bot."
    assert "not allowed" not in tg.bot_texts(42)[1], "/start is handled before the allow-list"
    assert len(llm.completions) == 2
