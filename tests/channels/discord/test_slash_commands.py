"""Slash commands: registered once as application commands, answered as interactions within 3 s.

Every answer here goes through the fake's interaction callback, which refuses a second callback (40060)
and one later than 3 s (10062) as Discord does, so an accepted callback is the proof of timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from channels.discord.channel import DiscordChannel
from config.schema import Settings
from tests.channels.discord.conftest import USER_ID, discord_config, eventually
from tests.conftest import make_settings
from tests.fakes.discord import FakeDiscord, FakeInteraction, FakeMessage
from tests.fakes.openai_server import Reply
from tests.harness import Harness

COMMAND = {
    "type": 1,
    "name": "help",
    "description": "list the commands",
    "options": [{"type": 3, "name": "args", "description": "what follows", "required": False}],
}


async def _registered(fake: FakeDiscord) -> list[dict[str, Any]]:
    return await eventually(lambda: fake.app_commands, what="the slash commands to be registered")


@pytest.fixture
async def slash(settings: Settings, discord_fake: FakeDiscord) -> AsyncIterator[Harness]:
    channel = DiscordChannel(discord_config(discord_fake), settings=settings)
    async with Harness.running(settings, channels={"discord": channel}) as harness:  # type: ignore[dict-item]
        await _registered(discord_fake)
        yield harness


async def answer(fake: FakeDiscord, interaction: FakeInteraction, needle: str) -> FakeMessage:
    """The interaction's message (original or followup) whose text contains ``needle``."""

    def probe() -> FakeMessage | None:
        return next((m for m in fake.interaction_messages(interaction.id) if needle in m.text), None)

    return await eventually(probe, what=f"an interaction answer containing {needle!r}")


# --- registration -----------------------------------------------------------------------------------


async def test_the_commands_become_slash_commands_with_one_bulk_overwrite_and_not_again_unchanged(
    settings, discord_fake
):
    channel = DiscordChannel(discord_config(discord_fake), settings=settings)
    async with Harness.running(settings, channels={"discord": channel}):  # type: ignore[dict-item]
        commands = await _registered(discord_fake)
    names = {c["name"] for c in commands}
    assert {"help", "new", "status", "connect", "stop"} <= names
    help_command = next(c for c in commands if c["name"] == "help")
    assert help_command["description"] == "list the commands"
    assert [(o["type"], o["name"]) for o in help_command["options"]] == [(3, "args")]
    assert "required" not in help_command["options"][0]  # optional
    assert len(discord_fake.calls_to("commands_put")) == 1

    again = DiscordChannel(discord_config(discord_fake), settings=settings)
    async with Harness.running(settings, channels={"discord": again}):  # type: ignore[dict-item]
        await eventually(lambda: again.commands_synced, what="the second start to check the commands")
    assert len(discord_fake.calls_to("commands")) == 2, "each start reads what is registered"
    assert len(discord_fake.calls_to("commands_put")) == 1, "an unchanged set is not overwritten again"


async def test_commands_registered_by_an_older_version_are_replaced(settings, discord_fake):
    discord_fake.app_commands = [{**COMMAND, "id": discord_fake.new_id(), "name": "oldcommand"}]
    channel = DiscordChannel(discord_config(discord_fake), settings=settings)
    async with Harness.running(settings, channels={"discord": channel}):  # type: ignore[dict-item]
        await eventually(lambda: discord_fake.calls_to("commands_put"), what="an overwrite")
    names = {c["name"] for c in discord_fake.app_commands}
    assert "oldcommand" not in names and "help" in names


async def test_the_fake_validates_a_bulk_overwrite_as_discord_documents(discord_fake):
    url = f"{discord_fake.api_base_url}/applications/{discord_fake.bot_id}/commands"
    headers = {"Authorization": f"Bot {discord_fake.token}"}
    option = COMMAND["options"][0]  # type: ignore[index]
    bad = [
        {**COMMAND, "name": "Help"},  # uppercase
        {**COMMAND, "name": "two words"},
        {**COMMAND, "name": "x" * 33},
        {**COMMAND, "description": ""},
        {**COMMAND, "description": "d" * 101},
        {**COMMAND, "options": [{**option, "name": "Args"}]},
        {**COMMAND, "options": [option, {**option, "name": "later", "required": True}]},
    ]
    async with aiohttp.ClientSession(headers=headers) as session:
        for command in bad:
            async with session.put(url, json=[command]) as response:
                assert response.status == 400, command
                assert (await response.json())["code"] == 50035
        async with session.put(url, json=[COMMAND, COMMAND]) as response:
            assert response.status == 400  # duplicate names
        async with session.put(url, json=[{**COMMAND, "name": "släpp-1"}]) as response:
            assert response.status == 200  # any lowercase letter or digit, - and _


# --- answering ---------------------------------------------------------------------------------------


async def test_slash_help_is_answered_as_the_interaction_response_after_it_was_stored(
    slash, discord_fake, llm
):
    dm = discord_fake.new_id()
    interaction = discord_fake.interaction_create(dm, USER_ID, "help")
    reply = await answer(discord_fake, interaction, "/status")
    assert interaction.callback_type == 4 and interaction.callback_after is not None
    assert interaction.callback_after < 3.0
    assert not reply.ephemeral
    assert reply.allowed_mentions == [{"parse": []}]
    await slash.idle()
    assert await slash.service.inbox.counts() == {"done": 1}
    assert discord_fake.calls_to("send") == [], "no ordinary channel message besides the answer"
    assert llm.completions == []


async def test_slash_status_in_a_server_channel_is_seen_only_by_the_sender(slash, discord_fake):
    interaction = discord_fake.interaction_create(discord_fake.channel_id, USER_ID, "status")
    reply = await answer(discord_fake, interaction, "Thread:")
    assert reply.ephemeral and interaction.ephemeral
    assert discord_fake.in_channel(discord_fake.channel_id) == [reply]
    await slash.idle()


async def test_a_slash_command_in_the_bots_thread_belongs_to_that_threads_conversation(slash, discord_fake):
    bot = discord_fake.bot_id
    asked = discord_fake.message_create(
        discord_fake.channel_id, USER_ID, f"<@{bot}> how do I deploy?", mentions=[bot]
    )
    thread_id = asked["id"]
    await eventually(lambda: any("echo:" in m.text for m in discord_fake.in_channel(thread_id)))
    await slash.idle()
    discord_fake.message_create(thread_id, USER_ID, "/status")  # typed in the thread: public
    typed = await eventually(
        lambda: next((m for m in discord_fake.in_channel(thread_id) if "Thread:" in m.text), None)
    )
    interaction = discord_fake.interaction_create(thread_id, USER_ID, "status")
    slashed = await answer(discord_fake, interaction, "Thread:")
    assert slashed.channel_id == thread_id and slashed.ephemeral
    assert slashed.text.splitlines()[0] == typed.text.splitlines()[0], "the same conversation's thread"
    await slash.idle()


async def test_the_args_option_reaches_the_command_like_typed_text(slash, discord_fake):
    interaction = discord_fake.interaction_create(discord_fake.new_id(), USER_ID, "connect", "not-a-code")
    await answer(discord_fake, interaction, "invalid or expired")
    await slash.idle()


async def test_a_slow_command_is_deferred_in_time_and_its_answer_replaces_thinking(slash, discord_fake, llm):
    dm = discord_fake.new_id()
    for text in ("first question", "second question"):
        discord_fake.message_create(dm, USER_ID, text)
        await eventually(lambda t=text: any(f"echo: {t}" in m.text for m in discord_fake.in_channel(dm)))
        await slash.idle()
    llm.script(Reply(text="a short summary", delay=2.0))  # the summariser takes longer than 1 s
    interaction = discord_fake.interaction_create(dm, USER_ID, "compact")
    await eventually(lambda: interaction.callback_type, what="the deferral")
    assert interaction.callback_type == 5 and interaction.callback_after is not None
    assert interaction.callback_after < 3.0
    reply = await answer(discord_fake, interaction, "Compacted")
    assert discord_fake.interaction_messages(interaction.id) == [reply]  # the "thinking" message itself
    assert [c["route"] for c in discord_fake.calls_to("callback")] == ["callback"]
    assert discord_fake.calls_to("original")[-1]["method"] == "PATCH"
    await slash.idle()


async def test_a_private_answer_after_a_public_deferral_is_an_ephemeral_followup(slash, discord_fake, llm):
    dm = discord_fake.new_id()
    for text in ("first question", "second question"):
        discord_fake.message_create(dm, USER_ID, text)
        await eventually(lambda t=text: any(f"echo: {t}" in m.text for m in discord_fake.in_channel(dm)))
        await slash.idle()
    llm.script(Reply(text="a short summary", delay=2.5))
    asked = len(llm.completions)
    discord_fake.interaction_create(dm, USER_ID, "compact")
    await eventually(lambda: len(llm.completions) > asked, what="the summariser to be called")
    # /status waits for the conversation that /compact holds, so it is deferred ("thinking…", public).
    status = discord_fake.interaction_create(dm, USER_ID, "status")
    private = await answer(discord_fake, status, "Thread:")
    original, followup = discord_fake.interaction_messages(status.id)
    assert status.callback_type == 5 and not status.ephemeral
    assert original.text == "🔒 Answered privately." and not original.ephemeral
    assert followup is private and private.ephemeral
    await slash.idle()


async def test_a_turn_started_by_a_command_streams_into_followups(slash, discord_fake, llm):
    llm.script(Reply(text="working on it step by step", chunk_size=5, delay=0.1))
    dm = discord_fake.new_id()
    interaction = discord_fake.interaction_create(dm, USER_ID, "goal", "tidy the docs")
    await answer(discord_fake, interaction, "Goal set")
    followup = await answer(discord_fake, interaction, "working on it step by step")
    assert followup.id in interaction.followups
    assert len(followup.history) > 1, "the followup was edited as the answer streamed"
    assert discord_fake.calls_to("followup_edit")
    await slash.idle(timeout=30)


async def test_a_full_inbox_answers_busy_to_the_sender_only(tmp_path, llm, discord_fake):
    settings = make_settings(tmp_path, llm, bus={"queue_size": 1})
    llm.script(Reply(text="slow answer", chunk_size=1, delay=0.2))
    channel = DiscordChannel(discord_config(discord_fake), settings=settings)
    async with Harness.running(settings, channels={"discord": channel}) as harness:  # type: ignore[dict-item]
        await _registered(discord_fake)
        dm = discord_fake.new_id()
        discord_fake.message_create(dm, USER_ID, "keep the inbox busy")
        await eventually(lambda: discord_fake.typing, what="the first message to be taken")
        interaction = discord_fake.interaction_create(dm, USER_ID, "help")
        reply = await answer(discord_fake, interaction, "overloaded")
        assert reply.ephemeral and "does not resend" in reply.text
        await harness.idle(timeout=20)
        assert await harness.service.inbox.counts() == {"done": 1}, "the refused command was not stored"


async def test_a_server_outside_allowed_guilds_is_told_privately_and_nothing_is_stored(
    settings, discord_fake
):
    channel = DiscordChannel(discord_config(discord_fake, allowed_guilds=["1"]), settings=settings)
    async with Harness.running(settings, channels={"discord": channel}) as harness:  # type: ignore[dict-item]
        await _registered(discord_fake)
        interaction = discord_fake.interaction_create(discord_fake.channel_id, USER_ID, "help")
        reply = await answer(discord_fake, interaction, "not enabled in this server")
        assert reply.ephemeral
        assert await harness.service.inbox.counts() == {}


async def test_once_the_interaction_token_expired_the_answer_is_an_ordinary_message(slash, discord_fake):
    dm = discord_fake.new_id()
    interaction = discord_fake.interaction_create(dm, USER_ID, "help", age=16 * 60)
    reply = await eventually(
        lambda: next((m for m in discord_fake.in_channel(dm) if "/status" in m.text), None),
        what="the answer in the DM",
    )
    assert reply.interaction is None
    await slash.idle()
    await asyncio.sleep(1.5)  # past defer_after_seconds: an interaction this old is not acknowledged either
    assert discord_fake.calls_to("callback") == []
    assert interaction.callback_type is None


async def test_a_private_answer_after_the_interaction_expired_goes_to_the_senders_dms(slash, discord_fake):
    channel = discord_fake.channel_id
    discord_fake.interaction_create(channel, USER_ID, "status", age=16 * 60)
    dm = await eventually(
        lambda: next((c for c, u in discord_fake.dms.items() if u == USER_ID), None), what="a DM channel"
    )
    reply = await eventually(
        lambda: next((m for m in discord_fake.in_channel(dm) if "Thread:" in m.text), None)
    )
    assert not reply.ephemeral
    assert discord_fake.in_channel(channel) == [], "nothing about the sender lands in the channel"
    await slash.idle()


async def test_with_slash_commands_off_nothing_is_registered(settings, discord_fake):
    channel = DiscordChannel(discord_config(discord_fake, slash_commands=False), settings=settings)
    async with Harness.running(settings, channels={"discord": channel}) as harness:  # type: ignore[dict-item]
        dm = discord_fake.new_id()
        discord_fake.message_create(dm, USER_ID, "/help")  # typed: still answered
        await eventually(lambda: any("/status" in m.text for m in discord_fake.in_channel(dm)))
        await harness.idle()
    assert discord_fake.calls_to("commands") == [] and discord_fake.calls_to("commands_put") == []


# --- the fake's interaction endpoints ------------------------------------------------------------------


async def test_the_fake_refuses_a_second_callback_and_a_late_one_as_discord_does(discord_fake):
    discord_fake.app_commands = [{**COMMAND, "id": discord_fake.new_id()}]
    base = discord_fake.api_base_url
    message = {"type": 4, "data": {"content": "hello"}}
    async with aiohttp.ClientSession() as session:
        first = discord_fake.interaction_create(discord_fake.new_id(), USER_ID, "help")
        url = f"{base}/interactions/{first.id}/{first.token}/callback"
        async with session.post(url, json=message) as response:
            assert response.status == 204
        async with session.post(url, json={"type": 5}) as response:
            assert response.status == 400 and (await response.json())["code"] == 40060

        late = discord_fake.interaction_create(discord_fake.new_id(), USER_ID, "help")
        discord_fake.age_interaction(late.id, 3.5)
        async with session.post(f"{base}/interactions/{late.id}/{late.token}/callback", json=message) as r:
            assert r.status == 404 and (await r.json())["code"] == 10062

        hook = f"{base}/webhooks/{discord_fake.bot_id}/{first.token}"
        async with session.post(hook, params={"wait": "true"}, json={"content": "more"}) as response:
            assert response.status == 200
        discord_fake.age_interaction(first.id, 15 * 60)
        async with session.post(hook, json={"content": "too late"}) as response:
            assert response.status == 401 and (await response.json())["code"] == 50027


# --- past the token's 15 minutes ----------------------------------------------------------------------

LONG_ANSWER = "step one is done, step two is done, step three is done, and the docs are tidy now"


async def test_an_answer_that_outlives_the_interaction_token_ends_in_the_same_message(
    slash, discord_fake, llm
):
    """A goal's turn streams into a followup; the token expires mid-answer (Discord answers 401, code
    50027). The answer still ends in that one message, edited as the bot's own channel message, instead
    of a second message under a stale, half-finished first one."""
    llm.script(Reply(text=LONG_ANSWER, chunk_size=6, delay=0.25))
    dm = discord_fake.new_id()
    interaction = discord_fake.interaction_create(dm, USER_ID, "goal", "tidy the docs")
    followup = await answer(discord_fake, interaction, "step one")
    assert not followup.ephemeral
    discord_fake.age_interaction(interaction.id, 15 * 60)
    await eventually(lambda: followup.text == LONG_ANSWER, what="the whole answer in the first message")
    await slash.idle(timeout=30)
    assert [m for m in discord_fake.in_channel(dm) if "step one" in m.text] == [followup], "no second message"
    assert discord_fake.calls_to("edit"), "edited through the channel once the token was refused"


async def test_the_fake_refuses_a_channel_edit_of_an_ephemeral_message_but_not_of_a_public_one(discord_fake):
    discord_fake.app_commands = [{**COMMAND, "id": discord_fake.new_id()}]
    base, auth = discord_fake.api_base_url, {"Authorization": f"Bot {discord_fake.token}"}
    dm = discord_fake.new_id()
    async with aiohttp.ClientSession() as session:
        for flags, status in ((64, 404), (0, 200)):
            interaction = discord_fake.interaction_create(dm, USER_ID, "help")
            callback = f"{base}/interactions/{interaction.id}/{interaction.token}/callback"
            body = {"type": 4, "data": {"content": "hello", "flags": flags}}
            async with session.post(callback, params={"with_response": "true"}, json=body) as response:
                message_id = (await response.json())["interaction"]["response_message_id"]
            edit = f"{base}/channels/{dm}/messages/{message_id}"
            async with session.patch(edit, headers=auth, json={"content": "edited"}) as response:
                assert response.status == status
                if status == 404:
                    assert (await response.json())["code"] == 10008
