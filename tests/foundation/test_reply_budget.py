"""The chat's outbound budget is not spent on edits that change nothing (kills mutant stale-update-sent)."""

from __future__ import annotations

from tests.fakes.openai_server import Reply


async def test_no_edit_repeats_the_text_the_message_already_shows(harness, llm):
    llm.script(Reply(text="a streamed answer in several small pieces", chunk_size=4, delay=0.2))
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


async def test_a_full_first_message_is_not_edited_again_while_the_rest_streams(harness, llm):
    """An answer longer than one message: once the first message is full it settles, and the edits that
    stream the rest into the second message leave it alone."""
    answer = " ".join(f"w{n}" for n in range(1500))  # about 8,000 characters: two messages here
    llm.script(Reply(text=answer, chunk_size=250, delay=0.05))
    await harness.ask("a long one please")
    shown: dict[str, str] = {}
    repeated = []
    for operation, ref, text in harness.chat.calls:
        if operation == "edit" and shown.get(ref) == text:
            repeated.append(ref)
        shown[ref] = text
    messages = harness.chat.in_chat("chat-1")
    assert len(messages) >= 2
    assert repeated.count(messages[0].ref) == 0, "the full first message was edited with the same text"
