"""Files in (downloadCode → the owner's uploads) and out (uploaded, sent as file messages)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from tests.fakes.openai_server import last_user_text

pytestmark = pytest.mark.slow  # a whole service + fake DingTalk per test

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 2048


def uploads(rig) -> list[Path]:
    root = Path(rig.harness.settings.data_dir) / "users"
    return sorted(root.glob("*/threads/*/user-data/uploads/*"))


async def test_a_picture_lands_in_the_senders_uploads_and_the_model_is_told(rig, llm):
    rig.fake.add_file("dl-picture-1", PNG, "photo.png")
    rig.fake.send_bot_message("1", sender_id="alice", msgtype="picture", download_code="dl-picture-1")

    await rig.wait_text(rig.p2p("alice"), "Files attached")
    await rig.harness.idle()

    [stored] = uploads(rig)
    assert stored.read_bytes() == PNG
    assert "alice" in str(stored.relative_to(Path(rig.harness.settings.data_dir)))
    assert "/mnt/user-data/uploads/image.png" in last_user_text(llm.completions[-1])
    # The download went through the OpenAPI with the app's robotCode, then the temporary URL.
    [lookup] = rig.fake.calls("/v1.0/robot/messageFiles/download")
    assert lookup["body"] == {"downloadCode": "dl-picture-1", "robotCode": rig.fake.client_id}


async def test_a_file_message_keeps_its_name(markdown_rig, llm):
    markdown_rig.fake.add_file("dl-file-1", b"quarterly numbers", "report.csv")
    markdown_rig.fake.send_bot_message(
        "2",
        sender_id="bob",
        conversation_id="cid-team",
        at_bot=True,
        msgtype="file",
        download_code="dl-file-1",
        file_name="report.csv",
    )
    await markdown_rig.wait_text("cid-team", "report.csv")
    await markdown_rig.harness.idle()
    [stored] = uploads(markdown_rig)
    assert stored.name == "report.csv" and stored.read_bytes() == b"quarterly numbers"


async def test_a_rich_text_message_brings_its_text_and_its_pictures(markdown_rig, llm):
    markdown_rig.fake.add_file("dl-rich-1", PNG)
    markdown_rig.fake.send_bot_message(
        "1", "what is in this screenshot?", sender_id="alice", msgtype="richText", download_code="dl-rich-1"
    )
    await markdown_rig.wait_text(markdown_rig.p2p("alice"), "what is in this screenshot?")
    await markdown_rig.harness.idle()
    assert len(uploads(markdown_rig)) == 1
    assert last_user_text(llm.completions[-1]).startswith("what is in this screenshot?")


async def test_a_file_over_the_channel_cap_is_refused_with_a_notice(start_rig):
    rig = await start_rig("card", max_file_bytes=1024)
    rig.fake.add_file("dl-big", b"x" * 4096, "big.bin")
    rig.fake.send_bot_message(
        "1", sender_id="alice", msgtype="file", download_code="dl-big", file_name="big.bin"
    )

    def card_shows_notice():
        return any(
            "big.bin is too large" in text for b in rig.visible(rig.p2p("alice")) for text in b.history
        )

    await rig.fake.wait_for(card_shows_notice)
    await rig.harness.idle()
    assert uploads(rig) == []


async def test_files_in_a_reply_are_uploaded_and_sent_as_file_messages(rig, tmp_path):
    report = tmp_path / "summary.pdf"
    report.write_bytes(b"%PDF-1.4" + b"0" * 3000)
    message = rig.channel.to_inbound(rig.fake.build_message("1", "send me the report", sender_id="alice"))
    assert message is not None

    await rig.channel.open_reply(message).finish("Here is the report.", [report])

    text, attachment = rig.visible(rig.p2p("alice"))
    assert text.text == "Here is the report."
    assert attachment.kind == "file" and attachment.text == "summary.pdf"
    assert attachment.data == report.read_bytes()


async def test_files_in_a_group_reply_go_to_the_group(markdown_rig, tmp_path):
    chart = tmp_path / "chart.png"
    chart.write_bytes(PNG)
    data = markdown_rig.fake.build_message(
        "2", "chart?", sender_id="bob", conversation_id="cid-team", at_bot=True
    )
    message = markdown_rig.channel.to_inbound(data)
    assert message is not None

    await markdown_rig.channel.open_reply(message).finish("Chart attached.", [chart])

    assert [b.kind for b in markdown_rig.visible("cid-team")] == ["markdown", "image"]
    assert markdown_rig.fake.calls("/v1.0/robot/groupMessages/send")


async def test_a_picture_goes_as_a_picture_and_a_type_dingtalk_refuses_as_a_zip_all_delivered(rig, tmp_path):
    # DingTalk's file upload takes only doc/docx/xls/xlsx/ppt/pptx/zip/pdf/rar: a .csv or .txt sent as
    # "file" was refused ("could not be attached"), and so was a .png, which is an image upload.
    chart, table, notes, report = (
        tmp_path / n for n in ("chart.png", "table.csv", "notes.txt", "report.pdf")
    )
    chart.write_bytes(PNG)
    table.write_text("region,total\nnorth,12\n")
    notes.write_text("remember the milk\n")
    report.write_bytes(b"%PDF-1.4" + b"0" * 300)
    message = rig.channel.to_inbound(rig.fake.build_message("1", "the numbers?", sender_id="alice"))
    assert message is not None

    await rig.channel.open_reply(message).finish("Here you are.", [chart, table, notes, report])

    shown = rig.visible(rig.p2p("alice"))
    assert [(b.kind, b.text) for b in shown] == [
        ("card" if rig.mode == "card" else "markdown", "Here you are."),
        ("image", "chart.png"),
        ("file", "table.csv.zip"),
        ("file", "notes.txt.zip"),
        ("file", "report.pdf"),
    ]
    assert shown[1].data == PNG and shown[4].data == report.read_bytes()
    for bubble, original in ((shown[2], table), (shown[3], notes)):
        with zipfile.ZipFile(io.BytesIO(bubble.data or b"")) as archive:
            assert archive.namelist() == [original.name]
            assert archive.read(original.name) == original.read_bytes()
    assert [c["query"]["type"] for c in rig.fake.calls("/media/upload")] == ["image", "file", "file", "file"]


async def test_a_file_that_cannot_be_uploaded_is_listed_by_name_instead(markdown_rig, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    markdown_rig.fake.fail_next("/media/upload", status=500, times=5)
    message = markdown_rig.channel.to_inbound(
        markdown_rig.fake.build_message("1", "notes?", sender_id="alice")
    )
    assert message is not None

    await markdown_rig.channel.open_reply(message).finish("Notes below.", [notes])

    texts = markdown_rig.final_texts(markdown_rig.p2p("alice"))
    assert texts[0] == "Notes below."
    assert "notes.txt" in texts[1] and "could not be attached" in texts[1]
