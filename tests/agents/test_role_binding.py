"""Issue 34 on Discord: a binding by the sender's role (carried in the event), and the room window."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from channels.discord.channel import DiscordChannel
from tests.agent.helpers import system_text
from tests.channels.discord.conftest import USER_ID, discord_config, final_reply
from tests.conftest import make_settings
from tests.fakes.discord import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI
from tests.harness import Harness

pytestmark = pytest.mark.slow  # fake platform and model servers


@pytest.fixture
def discord_fake() -> Iterator[FakeDiscord]:
    with FakeDiscord() as fake:
        yield fake  # type: ignore[misc]


async def test_a_role_binding_picks_the_agent_for_holders_of_the_role_only(
    tmp_path: Path, llm: FakeOpenAI, discord_fake: FakeDiscord
) -> None:
    staff, visitors = discord_fake.add_role("staff"), discord_fake.add_role("visitors")
    guild = discord_fake.guild_id
    settings = make_settings(
        tmp_path,
        llm,
        agents=[
            {"name": "staff", "system_prompt": "You help the staff."},
            {"name": "public", "system_prompt": "You help visitors."},
        ],
        bindings=[
            {"agent": "public", "provider": "discord", "workspace": guild},
            {"agent": "staff", "provider": "discord", "workspace": guild, "role": staff},
        ],
    )
    channel = DiscordChannel(discord_config(discord_fake), settings=settings)
    bot = discord_fake.bot_id
    async with Harness.running(settings, channels={"discord": channel}) as h:  # type: ignore[dict-item]
        for roles, text in (([visitors, staff], "from staff"), ([visitors], "from a visitor")):
            asked = discord_fake.message_create(
                discord_fake.channel_id, USER_ID, f"<@{bot}> {text}", mentions=[bot], roles=roles
            )
            await final_reply(discord_fake, asked["id"], f"echo: {text}")
        await h.idle()
    prompts = {str(b["messages"][-1]["content"]): system_text(b).splitlines()[0] for b in llm.completions}
    assert prompts == {"from staff": "You help the staff.", "from a visitor": "You help visitors."}


async def test_on_discord_the_room_window_holds_server_messages_that_did_not_mention_the_bot(
    tmp_path: Path, llm: FakeOpenAI, discord_fake: FakeDiscord
) -> None:
    settings = make_settings(
        tmp_path,
        llm,
        agents=[{"name": "room", "context": {"ambient": 2}}],
        bindings=[{"agent": "room", "provider": "discord"}],
    )
    channel = DiscordChannel(discord_config(discord_fake), settings=settings)
    bot = discord_fake.bot_id
    async with Harness.running(settings, channels={"discord": channel}):  # type: ignore[dict-item]
        for n in range(1, 4):
            discord_fake.message_create(discord_fake.channel_id, "5151", f"deploy note {n}")
        asked = discord_fake.message_create(
            discord_fake.channel_id, USER_ID, f"<@{bot}> what changed?", mentions=[bot]
        )
        await final_reply(discord_fake, asked["id"], "echo: what changed?")
    [request] = llm.completions
    lines = [line for line in system_text(request).splitlines() if line.startswith("[")]
    assert [line.split("] ", 1)[1] for line in lines] == ["deploy note 2", "deploy note 3"]
