"""Voice in on DingTalk: the platform's own ``recognition`` text is the transcript, with no transcriber
configured or called; a spoken /new is the command."""

from __future__ import annotations

import pytest

from tests.fakes.openai_server import last_user_text

pytestmark = pytest.mark.slow  # a whole service + fake DingTalk per test


async def test_recognised_speech_is_answered_without_a_transcriber(markdown_rig, llm):
    markdown_rig.fake.add_file("dl-voice-1", b"#!AMR\n" + b"\x00" * 32, "audio.amr")
    markdown_rig.fake.send_bot_message(
        "1", sender_id="alice", msgtype="audio", download_code="dl-voice-1", recognition="明天的会议几点开始"
    )

    await markdown_rig.wait_text(markdown_rig.p2p("alice"), "echo: 🎙️ 明天的会议几点开始")
    await markdown_rig.harness.idle()

    assert "Files attached" not in last_user_text(llm.completions[-1])
    assert not markdown_rig.fake.calls("/v1.0/robot/messageFiles/download"), "nothing to download"
    texts = markdown_rig.final_texts(markdown_rig.p2p("alice"))
    assert not any("speech.transcribe" in t for t in texts), "no hint: nothing needed transcribing"


async def test_a_recognised_new_starts_a_new_thread(markdown_rig, llm):
    chat = markdown_rig.p2p("alice")
    markdown_rig.fake.send_bot_message("1", "remember the word banana", sender_id="alice")
    await markdown_rig.wait_text(chat, "echo: remember the word banana")
    await markdown_rig.harness.idle()
    markdown_rig.fake.send_bot_message(
        "1", sender_id="alice", msgtype="audio", download_code="dl-2", recognition="/new"
    )
    await markdown_rig.wait_text(chat, "🎙️ Heard: /new")
    await markdown_rig.wait_text(chat, "Started a new conversation")
    markdown_rig.fake.send_bot_message("1", "what was the word?", sender_id="alice")
    await markdown_rig.wait_text(chat, "echo: what was the word?")
    await markdown_rig.harness.idle()

    assert len(llm.completions) == 2
    assert "banana" not in str(llm.completions[-1]["messages"])
