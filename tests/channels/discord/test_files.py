"""Files both ways: a Discord attachment lands in the owner's uploads; agent files go out as attachments."""

from __future__ import annotations

from pathlib import Path

from channels.discord.channel import DiscordChannel
from channels.types import InboundMessage, Sender
from tests.channels.discord.conftest import USER_ID, discord_config, eventually, final_reply
from tests.harness import Harness


def dm_message(dm: str, text: str, message_id: str, **context: str) -> InboundMessage:
    """The stored message a reply answers: ``text`` from the test user in the DM ``dm``."""
    return InboundMessage(
        provider="discord",
        workspace="",
        chat=dm,
        sender=Sender(USER_ID, "someone"),
        text=text,
        platform_message_id=message_id,
        is_private=True,
        context={"reply_channel": dm, **context},
    )


async def test_an_attachment_lands_in_the_owners_uploads_and_the_model_is_told(
    discord_harness, discord_fake, llm, settings
):
    dm = discord_fake.new_id()
    discord_fake.message_create(
        dm, USER_ID, "summarise this", attachments=[("notes.txt", b"the quarterly numbers")]
    )
    await final_reply(discord_fake, dm, "echo: summarise this")
    await discord_harness.idle()
    [stored] = list(Path(settings.data_dir).glob("users/*/threads/*/user-data/uploads/notes.txt"))
    assert stored.read_bytes() == b"the quarterly numbers"
    assert "uploads/notes.txt" in str(llm.completions[-1]["messages"])
    [download] = discord_fake.calls_to("attachment")
    assert download["path"].endswith("/notes.txt")


async def test_files_from_the_agent_are_sent_as_discord_attachments(discord_harness, discord_fake, tmp_path):
    channel = discord_harness.service.channels["discord"]
    dm = discord_fake.dm_channel(USER_ID)
    report = tmp_path / "report.csv"
    report.write_text("a,b\n1,2\n")
    await channel.open_reply(dm_message(dm, "make a report", "1")).finish("Here is your report.", [report])
    messages = await eventually(
        lambda: discord_fake.in_channel(dm) if len(discord_fake.in_channel(dm)) == 2 else None
    )
    text, upload = messages
    assert text.text == "Here is your report."
    assert upload.files == {"report.csv": b"a,b\n1,2\n"}
    assert upload.allowed_mentions == [{"parse": []}]


async def test_files_answering_a_slash_command_are_its_followups_in_batches_of_ten_and_too_big_ones_are_named(
    settings, discord_fake, tmp_path
):
    """Through the live interaction (not the channel): at most ten attachments a followup, and a file
    over ``max_file_bytes`` is named in a line instead of sent."""
    channel = DiscordChannel(discord_config(discord_fake, max_file_bytes=1024), settings=settings)
    async with Harness.running(settings, channels={"discord": channel}) as harness:  # type: ignore[dict-item]
        await eventually(lambda: discord_fake.app_commands, what="the slash commands to be registered")
        dm = discord_fake.new_id()
        interaction = discord_fake.interaction_create(dm, USER_ID, "help")
        await eventually(lambda: interaction.callback_type, what="the /help answer")
        await harness.idle()
        files = []
        for i in range(11):
            files.append(tmp_path / f"part{i:02}.txt")
            files[-1].write_text(f"part {i}")
        big = tmp_path / "big.bin"
        big.write_bytes(b"x" * 1025)
        message = dm_message(dm, "/help", interaction.id, interaction=interaction.id)
        await channel.open_reply(message).finish("Here are the parts.", [*files, big])
        said = await eventually(
            lambda: next(
                (m for m in discord_fake.interaction_messages(interaction.id) if "not attached" in m.text),
                None,
            ),
            what="the line naming the file too big to send",
        )
        uploads = [m.files for m in discord_fake.interaction_messages(interaction.id) if m.files]
    assert said.text == "(not attached, larger than 0 MiB: big.bin)"
    assert [sorted(u) for u in uploads] == [[f.name for f in files[:10]], [files[10].name]]
    assert uploads[0]["part00.txt"] == b"part 0"
    assert discord_fake.calls_to("send") == [], "everything went through the interaction, not the channel"
