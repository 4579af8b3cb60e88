"""Talking to the bot on Discord: DMs, server channels and the threads a mention opens."""

from __future__ import annotations

import pytest

from channels.discord.channel import DiscordChannel
from tests.channels.discord.conftest import USER_ID, discord_config, eventually, final_reply
from tests.conftest import make_settings
from tests.fakes.openai_server import Reply, last_user_text
from tests.harness import Harness

NO_PINGS = {"parse": []}


async def test_a_direct_message_is_answered_by_one_message_edited_in_place(
    discord_harness, discord_fake, llm
):
    llm.script(Reply(text="Hello there, how can I help?", chunk_size=4, delay=0.05))
    dm = discord_fake.new_id()
    discord_fake.message_create(dm, USER_ID, "hi")
    reply = await final_reply(discord_fake, dm, "Hello there, how can I help?")
    await discord_harness.idle()
    assert discord_fake.in_channel(dm) == [reply]
    assert reply.history[0] == "…"
    assert reply.text == "Hello there, how can I help?"
    assert discord_fake.typing[0] == dm  # "switchboard is typing…" as soon as the message was taken
    assert discord_harness.service.channels["discord"].status.state == "connected"


async def test_a_server_message_without_a_mention_is_ignored(discord_harness, discord_fake, llm):
    channel = discord_fake.channel_id
    discord_fake.message_create(channel, USER_ID, "just chatting with friends")
    discord_fake.message_create(
        channel, "5151", f"<@{discord_fake.bot_id}> hello from a bot", author_is_bot=True
    )
    dm = discord_fake.new_id()
    discord_fake.message_create(dm, USER_ID, "control message")  # answered: proves the others were seen
    await final_reply(discord_fake, dm, "echo: control message")
    await discord_harness.idle()
    assert discord_fake.in_channel(channel) == []
    assert discord_fake.calls_to("thread") == []
    assert [last_user_text(r) for r in llm.completions] == ["control message"]


async def test_a_mention_in_a_channel_is_answered_inside_a_new_thread(discord_harness, discord_fake, llm):
    channel = discord_fake.channel_id
    bot = discord_fake.bot_id
    llm.script(Reply(text="Sure, @everyone should read the docs."))
    asked = discord_fake.message_create(channel, USER_ID, f"<@{bot}> how do I deploy?", mentions=[bot])
    thread_id = asked["id"]  # Discord gives a thread opened from a message that message's id
    reply = await final_reply(discord_fake, thread_id, "Sure, @everyone should read the docs.")
    await discord_harness.idle()
    [opened] = discord_fake.calls_to("thread")
    assert opened["path"].endswith(f"/channels/{channel}/messages/{asked['id']}/threads")
    assert opened["json"]["name"] == "how do I deploy?"
    assert discord_fake.threads[thread_id]["parent_id"] == channel
    assert discord_fake.in_channel(channel) == []  # nothing lands in the channel itself
    assert last_user_text(llm.completions[-1]).endswith("how do I deploy?")
    assert f"<@{bot}>" not in last_user_text(llm.completions[-1])
    # and it never pings: every send and edit carried allowed_mentions=none
    assert reply.allowed_mentions and all(a == NO_PINGS for a in reply.allowed_mentions)
    for call in discord_fake.calls_to("send") + discord_fake.calls_to("edit"):
        assert call["json"]["allowed_mentions"] == NO_PINGS

    # A follow-up inside the bot's thread needs no mention and continues the same conversation.
    discord_fake.message_create(thread_id, USER_ID, "and how do I roll back?")
    await final_reply(discord_fake, thread_id, "echo: and how do I roll back?")
    await discord_harness.idle()
    history = str(llm.completions[-1]["messages"])
    assert "how do I deploy?" in history and "Sure, @everyone should read the docs." in history
    assert len(discord_fake.calls_to("thread")) == 1


async def test_the_same_message_delivered_twice_is_answered_once(discord_harness, discord_fake, llm):
    channel = discord_fake.channel_id
    bot = discord_fake.bot_id
    first = discord_fake.message_create(channel, USER_ID, f"<@{bot}> count to three", mentions=[bot])
    discord_fake.message_create(
        channel, USER_ID, f"<@{bot}> count to three", mentions=[bot], message_id=first["id"]
    )
    await final_reply(discord_fake, first["id"], "echo: count to three")
    await discord_harness.idle()
    assert len(discord_fake.in_channel(first["id"])) == 1
    assert len(llm.completions) == 1
    assert len(discord_fake.threads) == 1

    dm = discord_fake.new_id()
    again = discord_fake.message_create(dm, USER_ID, "once please")
    discord_fake.message_create(dm, USER_ID, "once please", message_id=again["id"])
    await final_reply(discord_fake, dm, "echo: once please")
    await discord_harness.idle()
    assert len(discord_fake.in_channel(dm)) == 1
    assert len(llm.completions) == 2


async def test_servers_outside_allowed_guilds_are_ignored_but_dms_still_work(settings, discord_fake, llm):
    channel = DiscordChannel(discord_config(discord_fake, allowed_guilds=["1"]), settings=settings)
    async with Harness.running(settings, channels={"discord": channel}) as harness:  # type: ignore[dict-item]
        bot = discord_fake.bot_id
        discord_fake.message_create(discord_fake.channel_id, USER_ID, f"<@{bot}> hello?", mentions=[bot])
        dm = discord_fake.new_id()
        discord_fake.message_create(dm, USER_ID, "hello in private")
        await final_reply(discord_fake, dm, "echo: hello in private")
        await harness.idle()
    assert discord_fake.calls_to("thread") == []
    assert discord_fake.in_channel(discord_fake.channel_id) == []
    assert [last_user_text(r) for r in llm.completions] == ["hello in private"]


async def test_with_mention_only_off_channel_messages_are_answered_in_the_channel(
    settings, discord_fake, llm
):
    channel = DiscordChannel(discord_config(discord_fake, mention_only=False), settings=settings)
    async with Harness.running(settings, channels={"discord": channel}) as harness:  # type: ignore[dict-item]
        asked = discord_fake.message_create(discord_fake.channel_id, USER_ID, "anyone there?")
        reply = await final_reply(discord_fake, discord_fake.channel_id, "echo: anyone there?")
        await harness.idle()
    assert reply.reference == asked["id"]  # shown as a reply to the question, without pinging its author
    assert discord_fake.calls_to("thread") == []


@pytest.mark.slow
async def test_a_message_arriving_while_the_inbox_is_full_waits_for_room_instead_of_being_dropped(
    tmp_path, discord_fake, llm
):
    settings = make_settings(tmp_path, llm, bus={"queue_size": 1})
    channel = DiscordChannel(discord_config(discord_fake), settings=settings)
    llm.script(Reply(text="a slow and careful answer", chunk_size=3, delay=0.15))
    async with Harness.running(settings, channels={"discord": channel}) as harness:  # type: ignore[dict-item]
        first, second = discord_fake.new_id(), discord_fake.new_id()
        discord_fake.message_create(first, USER_ID, "take your time")
        await eventually(lambda: discord_fake.in_channel(first), what="the first reply to start")
        discord_fake.message_create(second, "7777", "me too please")
        await final_reply(discord_fake, first, "a slow and careful answer")
        await final_reply(discord_fake, second, "echo: me too please")
        await harness.idle()
        assert harness.service.bus.refused >= 1  # the gateway event was held back, then accepted
