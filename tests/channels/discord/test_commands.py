"""Commands typed in Discord reach the manager's router: /connect, /new, /status, /help."""

from __future__ import annotations

from tests.channels.discord.conftest import USER_ID, final_reply
from tests.fakes.openai_server import last_user_text


async def test_connect_with_a_code_binds_this_discord_account(discord_harness, discord_fake, llm):
    dm = discord_fake.new_id()
    discord_fake.message_create(dm, USER_ID, "/connect not-a-real-code")
    await final_reply(discord_fake, dm, "invalid or expired")
    store = discord_harness.manager.connections
    assert store is not None
    issued = await store.create_code("alice", "discord")
    discord_fake.message_create(dm, USER_ID, f"/connect {issued.code}")
    await final_reply(discord_fake, dm, "now belongs to alice")
    await discord_harness.idle()
    assert llm.completions == []  # commands never reach the model


async def test_a_command_after_a_mention_in_a_channel_is_still_a_command(discord_harness, discord_fake, llm):
    bot = discord_fake.bot_id
    asked = discord_fake.message_create(discord_fake.channel_id, USER_ID, f"<@{bot}> /help", mentions=[bot])
    reply = await final_reply(discord_fake, asked["id"], "/new")
    await discord_harness.idle()
    assert "/status" in reply.text
    assert llm.completions == []


async def test_new_starts_a_fresh_conversation_and_status_shows_it(discord_harness, discord_fake, llm):
    dm = discord_fake.new_id()
    discord_fake.message_create(dm, USER_ID, "remember the word pineapple")
    await final_reply(discord_fake, dm, "echo: remember the word pineapple")
    await discord_harness.idle()

    discord_fake.message_create(dm, USER_ID, "/status")
    status = await final_reply(discord_fake, dm, "Thread:")
    assert "Model: default" in status.text and "State: idle" in status.text
    old_thread = status.text.splitlines()[0].removeprefix("Thread: ")

    discord_fake.message_create(dm, USER_ID, "/new")
    started = await final_reply(discord_fake, dm, "Started a new conversation")
    assert old_thread[:8] not in started.text
    discord_fake.message_create(dm, USER_ID, "what was the word?")
    await final_reply(discord_fake, dm, "echo: what was the word?")
    await discord_harness.idle()
    assert last_user_text(llm.completions[-1]) == "what was the word?"
    assert "pineapple" not in str(llm.completions[-1]["messages"])


async def test_help_lists_the_commands(discord_harness, discord_fake, llm):
    dm = discord_fake.new_id()
    discord_fake.message_create(dm, USER_ID, "/help")
    reply = await final_reply(discord_fake, dm, "/status")
    assert "/new" in reply.text and "/help" in reply.text
    await discord_harness.idle()
