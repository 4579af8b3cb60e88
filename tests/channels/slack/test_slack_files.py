"""Files: a file shared with the bot lands in the owner's uploads; the bot's files go out via upload v2."""

from __future__ import annotations

from pathlib import Path

from channels.types import InboundMessage, Sender
from tests.channels.slack.conftest import running_bot
from tests.fakes.slack import TEAM_ID


async def test_a_file_shared_in_a_dm_lands_in_the_owners_uploads_and_the_model_is_told(bot, llm, tmp_path):
    item = bot.slack.host_file("notes.txt", b"quarterly numbers: 42", "text/plain")
    bot.slack.dm("U1", "please read this", files=[item])

    await bot.slack.wait_for_text("echo:", "DU1")
    await bot.harness.idle(timeout=30)

    stored = list(Path(bot.harness.settings.data_dir).glob("users/*/threads/*/user-data/uploads/notes.txt"))
    assert len(stored) == 1
    assert stored[0].read_bytes() == b"quarterly numbers: 42"
    downloads = [r for r in bot.slack.requests if "download" in r]
    assert downloads and all(r["authorized"] for r in downloads)  # fetched with the bot token
    assert "notes.txt" in str(llm.completions[-1]["messages"][-1])


async def test_a_file_over_the_upload_limit_is_skipped_with_a_notice(tmp_path, llm, slack):
    async with running_bot(
        tmp_path, llm, slack, settings_overrides={"sandbox": {"max_upload_bytes": 10}}
    ) as bot:
        item = bot.slack.host_file("big.bin", b"x" * 100)
        bot.slack.dm("U1", "here", files=[item])
        await bot.slack.wait_for_text("echo:", "DU1")
        await bot.harness.idle(timeout=30)
        [message] = bot.slack.channel_messages("DU1")
        # The manager shows the notice while the answer streams (the final text is the answer alone).
        assert any("big.bin is too large" in version for version in message.history)
        assert not list(
            Path(bot.harness.settings.data_dir).glob("users/*/threads/*/user-data/uploads/big.bin")
        )


async def test_files_from_the_bot_are_uploaded_into_the_thread_with_files_upload_v2(bot, tmp_path):
    report = tmp_path / "report.csv"
    report.write_text("a,b\n1,2\n")
    message = InboundMessage(
        provider="slack",
        workspace=TEAM_ID,
        chat="C1",
        topic="1700000000.000100",
        sender=Sender("U1"),
        text="make a report",
        platform_message_id="m-1",
    )

    await bot.channel.open_reply(message).finish("Here is the report.", [report])

    text_message, files_message = bot.slack.channel_messages("C1", "1700000000.000100")
    assert text_message.text == "Here is the report."
    assert [f["name"] for f in files_message.files] == ["report.csv"]
    [get_url] = bot.slack.calls_to("files.getUploadURLExternal")
    assert get_url.args["filename"] == "report.csv" and int(get_url.args["length"]) == 8
    [complete] = bot.slack.calls_to("files.completeUploadExternal")
    assert complete.args["channel_id"] == "C1" and complete.args["thread_ts"] == "1700000000.000100"
    [upload] = bot.slack.uploads.values()
    assert upload["data"] == b"a,b\n1,2\n" and upload["completed"]
