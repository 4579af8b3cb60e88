"""The chat's outbound budget is not spent on edits that change nothing (kills mutant stale-update-sent)."""

from __future__ import annotations

from tests.fakes.openai_server import Reply


async def test_no_edit_repeats_the_text_the_message_already_shows(harness, llm):
    llm.script(Reply(text="a streamed answer in several small pieces", chunk_size=4, delay=0.01))
    await harness.ask("stream please")
    shown: dict[str, str] = {}
    repeated = []
    for operation, ref, text in harness.chat.calls:
        if operation == "edit" and shown.get(ref) == text:
            repeated.append(text)
        shown[ref] = text
    assert repeated == [], "edits that change nothing still cost a platform call each"
    assert harness.chat.in_chat("chat-1")[-1].text == "a streamed answer in several small pieces"
