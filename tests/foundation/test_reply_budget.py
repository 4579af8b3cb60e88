"""The chat's outbound budget is not spent on edits that change nothing (kills mutant stale-update-sent)."""

from __future__ import annotations

from tests.fakes.openai_server import Reply


async def test_no_edit_repeats_the_text_the_message_already_shows(harness, llm):
    llm.script(Reply(text="a streamed answer in several small pieces", chunk_size=4, delay=0.01))
    await harness.ask("stream please")
    shown: dict[str, str] = {}
    repeated = []
    calls = harness.chat.calls
    for index, (operation, ref, text) in enumerate(calls):
        # The one edit that may repeat the text is the final's, taking the Stop button away.
        final_button_edit = index == len(calls) - 1 and not harness.chat.messages[ref].actions
        if operation == "edit" and shown.get(ref) == text and not final_button_edit:
            repeated.append(text)
        shown[ref] = text
    assert repeated == [], "edits that change nothing still cost a platform call each"
    assert harness.chat.in_chat("chat-1")[-1].text == "a streamed answer in several small pieces"
