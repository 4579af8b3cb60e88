"""Files both ways: a user's document lands in the owner's uploads; the agent's outputs go back."""

from __future__ import annotations

from pathlib import Path

from channels.types import InboundMessage, Sender
from tests.fakes.telegram import FakeTelegram

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def uploads_named(data_dir: Path, name: str) -> list[Path]:
    return list(data_dir.glob(f"users/*/threads/*/user-data/uploads/{name}"))


async def test_a_document_sent_to_the_bot_lands_in_the_owners_uploads(tg: FakeTelegram, tg_harness, llm):
    report = b"quarterly numbers\n1,2,3\n"
    tg.user_message(42, caption="please summarise", document=("report.csv", report, "text/csv"))
    tg.user_message(42, photo=PNG, caption="and this picture")

    await tg.wait_for_bot_text(42, "echo: please summarise")
    await tg.wait_for_bot_text(42, "echo: and this picture")
    await tg_harness.idle()

    data_dir = Path(tg_harness.settings.data_dir)
    [stored] = uploads_named(data_dir, "report.csv")
    assert stored.read_bytes() == report
    assert "users/telegram_-_1001/" in stored.as_posix(), "it belongs to the sender's owner space"
    [photo] = list(data_dir.glob("users/*/threads/*/user-data/uploads/photo_*.jpg"))
    assert photo.read_bytes() == PNG
    prompt = str(llm.completions[0]["messages"])
    assert "report.csv" in prompt
    assert len(tg.calls("getFile")) == 2 and len(tg.calls("downloadFile")) == 2


async def test_a_file_over_the_configured_limit_is_skipped_with_a_notice(tg: FakeTelegram, tg_settings, llm):
    from channels.telegram.channel import TelegramChannel
    from tests.harness import Harness

    from .conftest import telegram_config

    channel = TelegramChannel(telegram_config(tg, max_file_bytes=1024), settings=tg_settings)
    async with Harness.running(tg_settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
        tg.user_message(42, caption="big one", document=("big.bin", b"x" * 5000, "application/octet-stream"))
        reply = await tg.wait_for_bot_text(42, "echo: big one")
        await harness.idle()

    assert "big.bin is too large" in "\n".join(reply.history)
    assert uploads_named(Path(tg_settings.data_dir), "big.bin") == []
    assert tg.calls("downloadFile") == []


async def test_files_from_the_agent_go_out_as_a_photo_and_a_document(tg: FakeTelegram, tg_harness, tmp_path):
    chart, notes = tmp_path / "chart.png", tmp_path / "notes.txt"
    chart.write_bytes(PNG)
    notes.write_text("all done\n")
    channel = tg_harness.channels["telegram"]
    tg.open_chat(42)
    message = InboundMessage(
        provider="telegram", workspace="", chat="42", sender=Sender("1001", "Alice"),
        text="make me a chart", platform_message_id="900", is_private=True,
    )  # fmt: skip

    await channel.open_reply(message).finish("Here you go: **two files**.", [chart, notes])

    messages = tg.bot_messages(42)
    assert [m.kind for m in messages] == ["text", "photo", "document"]
    assert messages[0].text == "Here you go: two files."
    assert tg.files[messages[1].file_id].data == PNG
    assert messages[2].file_name == "notes.txt" and tg.files[messages[2].file_id].data == b"all done\n"
