"""Issue 34: a binding by the sender's platform role (Discord carries roles in the event)."""

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
