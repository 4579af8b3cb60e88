"""Talking to the bot in Slack: DMs, mentions in channels, threads, commands, the allow-list."""

from __future__ import annotations

from tests.channels.slack.conftest import running_bot
from tests.fakes.openai_server import Reply, last_user_text


def user_texts(llm) -> list[str]:  # type: ignore[no-untyped-def]
    return [last_user_text(body) for body in llm.completions]


async def test_a_dm_is_answered_by_one_message_updated_in_place_to_the_final_text(bot, llm):
    llm.script(Reply(text="Hello there, **how** can I help?", chunk_size=3, delay=0.02))
    sent = bot.slack.dm("U1", "hi")

    final = await bot.slack.wait_for_text("how* can I help?", "DU1")
    await bot.harness.idle(timeout=30)

    [message] = bot.slack.channel_messages("DU1")
    assert message is final
    assert message.text == "Hello there, *how* can I help?"  # Markdown bold rendered as mrkdwn
    assert message.history[0] == "…"
    assert message.updates >= 1
    assert message.thread_ts is None  # a DM without a thread is answered in the DM itself
    assert bot.slack.acked(sent["envelope_id"])
    assert user_texts(llm) == ["hi"]


async def test_a_channel_message_without_a_mention_is_ignored_and_a_mention_is_answered_in_its_thread(
    bot, llm
):
    ignored = bot.slack.channel_message("C1", "U1", "just chatting with colleagues")
    await bot.slack.wait_for(
        lambda: bot.slack.acked(ignored["envelope_id"]), what="ack of the ignored message"
    )

    mention = bot.slack.mention("C1", "U1", "what's the weather?")
    reply = await bot.slack.wait_for_text("echo: what's the weather?", "C1")
    await bot.harness.idle(timeout=30)

    assert reply.thread_ts == mention["event"]["ts"]  # the mention starts a thread; the answer goes there
    assert [m.text for m in bot.slack.channel_messages("C1")] == ["echo: what's the weather?"]
    assert user_texts(llm) == ["what's the weather?"]  # the <@BOT> mention is stripped


async def test_a_follow_up_mention_in_the_same_thread_continues_that_conversation(bot, llm):
    first = bot.slack.mention("C1", "U1", "remember the word banana")
    root = first["event"]["ts"]
    await bot.slack.wait_for_text("echo: remember the word banana", "C1", thread_ts=root)
    await bot.harness.idle(timeout=30)

    bot.slack.mention("C1", "U1", "which word?", thread_ts=root)
    await bot.slack.wait_for_text("echo: which word?", "C1", thread_ts=root)
    await bot.harness.idle(timeout=30)

    history = str(llm.completions[-1]["messages"])
    assert "remember the word banana" in history  # same agent thread as the first mention

    bot.slack.mention("C1", "U1", "fresh question")  # a new top-level mention: a new conversation
    await bot.slack.wait_for_text("echo: fresh question", "C1")
    await bot.harness.idle(timeout=30)
    assert "banana" not in str(llm.completions[-1]["messages"])


async def test_the_bots_own_messages_and_edits_are_ignored(bot, llm):
    own = bot.slack.send_event(
        {
            "type": "message",
            "channel": "DU1",
            "channel_type": "im",
            "user": bot.slack.bot_user_id,
            "bot_id": bot.slack.bot_id,
            "text": "I said this",
            "ts": "1.000001",
        }
    )
    edited = bot.slack.send_event(
        {
            "type": "message",
            "subtype": "message_changed",
            "channel": "DU1",
            "channel_type": "im",
            "message": {"user": "U1", "text": "edited"},
            "ts": "1.000002",
        }
    )
    await bot.slack.wait_for(
        lambda: bot.slack.acked(own["envelope_id"]) and bot.slack.acked(edited["envelope_id"]),
        what="both envelopes acknowledged",
    )
    bot.slack.dm("U1", "now a real one")
    await bot.slack.wait_for_text("echo: now a real one", "DU1")
    await bot.harness.idle(timeout=30)
    assert user_texts(llm) == ["now a real one"]


async def test_help_status_and_new_answer_in_the_dm(bot, llm):
    bot.slack.dm("U1", "/help")
    help_reply = await bot.slack.wait_for_text("Commands:", "DU1")
    for name in ("/new", "/status", "/help"):
        assert name in help_reply.text

    bot.slack.dm("U1", "remember the word mango")
    await bot.slack.wait_for_text("echo: remember the word mango", "DU1")
    await bot.harness.idle(timeout=30)

    bot.slack.dm("U1", "/status")
    status = await bot.slack.wait_for_text("Thread:", "DU1")
    assert "Model:" in status.text and "State: idle" in status.text

    bot.slack.dm("U1", "/new")
    await bot.slack.wait_for_text("Started a new conversation", "DU1")
    bot.slack.dm("U1", "what was the word?")
    await bot.slack.wait_for_text("echo: what was the word?", "DU1")
    await bot.harness.idle(timeout=30)
    assert "mango" not in str(llm.completions[-1]["messages"])  # the new thread has no memory of it
    assert user_texts(llm) == [
        "remember the word mango",
        "what was the word?",
    ]  # commands never hit the model


async def test_an_unknown_slash_word_gets_a_clear_answer(bot, llm):
    bot.slack.dm("U1", "/frobnicate now")
    reply = await bot.slack.wait_for_text("Unknown command /frobnicate", "DU1")
    assert "/help" in reply.text
    assert llm.completions == []


async def test_someone_not_on_allowed_users_is_told_so_in_a_dm_and_the_model_never_runs(tmp_path, llm, slack):
    async with running_bot(tmp_path, llm, slack, allowed_users=["UBOSS"]) as bot:
        bot.slack.dm("UOTHER", "let me in")
        await bot.slack.wait_for_text("not allowed", "DUOTHER")
        bot.slack.dm("UBOSS", "hello boss here")
        await bot.slack.wait_for_text("echo: hello boss here", "DUBOSS")
        await bot.harness.idle(timeout=30)
    assert user_texts(llm) == ["hello boss here"]


async def test_replies_in_a_thread_the_bot_was_mentioned_in_need_no_new_mention(bot, llm):
    root = bot.slack.mention("C1", "U1", "let's plan the release")["event"]["ts"]
    await bot.slack.wait_for_text("echo: let's plan the release", "C1", thread_ts=root)
    await bot.harness.idle(timeout=30)

    other_thread = bot.slack.channel_message(
        "C1", "U2", "unrelated thread talk", thread_ts="1600000000.000001"
    )
    follow_up = bot.slack.channel_message("C1", "U1", "and the date?", thread_ts=root)
    await bot.slack.wait_for_text("echo: and the date?", "C1", thread_ts=root)
    await bot.harness.idle(timeout=30)
    assert bot.slack.acked(other_thread["envelope_id"]) and bot.slack.acked(follow_up["envelope_id"])
    assert "let's plan the release" in str(llm.completions[-1]["messages"])  # same conversation

    # A mention inside the followed thread arrives as app_mention *and* message: answered once.
    twice = bot.slack.mention("C1", "U1", "<@U0BOT> summarise", thread_ts=root)
    as_message = dict(twice["event"], type="message", channel_type="channel")
    bot.slack.send_event(as_message)
    await bot.slack.wait_for_text("echo: summarise", "C1", thread_ts=root)
    await bot.harness.idle(timeout=30)
    assert user_texts(llm) == ["let's plan the release", "and the date?", "summarise"]
    assert len(bot.slack.channel_messages("C1", thread_ts=root)) == 3
