"""Issue 28 on Discord (docs/security.md): a stranger's DM gets a pairing code an admin approves; a server
member is a member only in a server the operator listed in ``allowed_guilds`` (servers are often public)
or, in any server the bot is allowed in, when they hold one of ``member_roles``."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from pydantic import ValidationError

from channels.discord.channel import DiscordChannel
from config.channels.discord import DiscordConfig
from config.schema import Settings
from tests.agent.helpers import tool_results
from tests.channels.discord.conftest import USER_ID, discord_config, final_reply
from tests.fakes.discord import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.harness import Harness

ADMIN_ID = "9001"


@asynccontextmanager
async def running(settings: Settings, fake: FakeDiscord, **config: Any) -> AsyncIterator[Harness]:
    """The production trust defaults (``trust: {}``) with ``ADMIN_ID`` as the admin."""
    channel = DiscordChannel(discord_config(fake, trust={}, admins=[ADMIN_ID], **config), settings=settings)
    async with Harness.running(settings, channels={"discord": channel}) as harness:  # type: ignore[dict-item]
        yield harness


async def test_a_strangers_dm_is_paired_by_an_admin_and_then_answered(
    settings: Settings, discord_fake: FakeDiscord, llm: FakeOpenAI
) -> None:
    async with running(settings, discord_fake):
        dm, admin_dm = discord_fake.new_id(), discord_fake.new_id()
        discord_fake.message_create(dm, USER_ID, "can you help me deploy?")
        request = await final_reply(discord_fake, dm, "pairing code")
        code = re.search(r"pairing code is ([A-Z0-9]{8})", request.text)
        assert code is not None and llm.completions == []
        discord_fake.message_create(admin_dm, ADMIN_ID, f"/pair {code.group(1)}")
        await final_reply(discord_fake, admin_dm, "is a member now")
        await final_reply(discord_fake, dm, "echo: can you help me deploy?")


@pytest.mark.parametrize(("allowed", "member"), [(True, True), (False, False)])
async def test_a_server_member_is_a_member_only_in_a_listed_server(
    settings: Settings, discord_fake: FakeDiscord, llm: FakeOpenAI, allowed: bool, member: bool
) -> None:
    llm.script(Reply(tool_calls=[ToolCall("bash", {"command": "echo ran"})]), Reply(text="Done."))
    guilds = [discord_fake.guild_id] if allowed else []
    async with running(settings, discord_fake, allowed_guilds=guilds) as h:
        bot = discord_fake.bot_id
        asked = discord_fake.message_create(
            discord_fake.channel_id, USER_ID, f"<@{bot}> run it", mentions=[bot]
        )
        await final_reply(discord_fake, asked["id"], "Done.")  # answered in the thread the mention opened
        await h.idle()
    [result] = tool_results(llm.completions[1])
    if member:
        assert result == "[exit code 0]\nran"
    else:
        assert result.startswith("Refused: `bash` is not available in this conversation")


@pytest.mark.parametrize(("has_role", "member"), [(True, True), (False, False)])
async def test_a_listed_role_makes_a_server_member_a_member(
    settings: Settings, discord_fake: FakeDiscord, llm: FakeOpenAI, has_role: bool, member: bool
) -> None:
    llm.script(Reply(tool_calls=[ToolCall("bash", {"command": "echo ran"})]), Reply(text="Done."))
    staff, other = discord_fake.add_role("staff"), discord_fake.add_role("visitors")
    async with running(settings, discord_fake, member_roles=[staff]) as h:  # no allowed_guilds
        bot = discord_fake.bot_id
        asked = discord_fake.message_create(
            discord_fake.channel_id,
            USER_ID,
            f"<@{bot}> run it",
            mentions=[bot],
            roles=[other, staff] if has_role else [other],
        )
        await final_reply(discord_fake, asked["id"], "Done.")
        await h.idle()
    [result] = tool_results(llm.completions[1])
    if member:
        assert result == "[exit code 0]\nran"
    else:
        assert result.startswith("Refused: `bash` is not available in this conversation")


def test_a_role_must_be_given_by_its_id() -> None:
    with pytest.raises(ValidationError, match="member_roles"):
        DiscordConfig(member_roles=["staff"])
