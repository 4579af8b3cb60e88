"""Files both ways: a Discord attachment lands in the owner's uploads; agent files go out as attachments."""

from __future__ import annotations

from pathlib import Path

from channels.types import InboundMessage, Sender
from tests.channels.discord.conftest import USER_ID, eventually, final_reply


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
    message = InboundMessage(
        provider="discord",
        workspace="",
        chat=dm,
        sender=Sender(USER_ID, "someone"),
        text="make a report",
        platform_message_id="1",
        is_private=True,
        context={"reply_channel": dm},
    )
    await channel.open_reply(message).finish("Here is your report.", [report])
    messages = await eventually(
        lambda: discord_fake.in_channel(dm) if len(discord_fake.in_channel(dm)) == 2 else None
    )
    text, upload = messages
    assert text.text == "Here is your report."
    assert upload.files == {"report.csv": b"a,b\n1,2\n"}
    assert upload.allowed_mentions == [{"parse": []}]
