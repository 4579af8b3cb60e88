"""A reply's state is stored at each new message (never per chunk) and a resumed reply continues in place.

The end-to-end versions kill a real ``serve`` on each platform's fake (``tests/channels/*/test_*resume_in_place.py``);
these pin the rules on the in-memory channel.
"""

from __future__ import annotations

import asyncio

import pytest

from channels.memory import MemoryChannel
from channels.resume import ReplyState
from channels.splitter import split_text
from channels.types import ReplyLimits

LIMIT = 200
TEXT = "\n\n".join(" ".join(f"w{p}x{i}" for i in range(30)) for p in range(6))  # six messages


def chat() -> MemoryChannel:
    return MemoryChannel("memory", limits=ReplyLimits(text_limit=LIMIT, min_edit_interval=0.0))


async def test_each_new_message_is_stored_before_more_is_shown_and_edits_store_nothing():
    channel = chat()
    message = channel.make_message("q")
    stored: list[tuple[int, int]] = []  # (messages in the state, messages the chat showed then)

    async def keep(state: ReplyState) -> None:
        stored.append((len(state.parts), len(channel.in_chat())))

    reply = channel.open_reply(message, on_change=keep)
    await reply.start("…")
    for end in range(10, len(TEXT), 10):  # a chunk at a time, as a model streams
        reply.update(TEXT[:end])
        await asyncio.sleep(0)
    await reply.finish(TEXT)
    chunks = split_text(TEXT, LIMIT)
    assert [m.text for m in channel.in_chat()] == chunks
    assert [n for n, _ in stored] == list(range(1, len(chunks) + 1)), "one write per new message"
    assert all(n == shown for n, shown in stored), "stored before anything more was shown"


async def test_a_resumed_reply_continues_in_its_messages_and_sends_none_twice():
    channel = chat()
    message = channel.make_message("q")
    chunks = split_text(TEXT, LIMIT)
    three = asyncio.Event()
    last: list[ReplyState] = []

    async def keep(state: ReplyState) -> None:
        last[:] = [state]
        if len(state.parts) == 3:
            three.set()

    crashed = channel.open_reply(message, on_change=keep)
    await crashed.start("…")
    crashed.update(TEXT[: len("\n\n".join(chunks[:2])) + 40])  # the third message holds a few words
    await asyncio.wait_for(three.wait(), 10)
    # The process dies here: the crashed reply is never finished (its pump has nothing more to show).
    shown = {m.ref: len(m.history) for m in channel.in_chat()}

    resumed = channel.open_reply(message, resume=last[0])
    await resumed.start("…")
    resumed.update(TEXT[:50])  # the new run's first words: not a rewind of what the chat shows
    await resumed.finish(TEXT)

    after = channel.in_chat()
    assert [m.text for m in after] == chunks, "no chunk twice, none missing"
    assert [len(m.history) for m in after[:2]] == [shown[m.ref] for m in after[:2]], "settled ones untouched"
    assert after[2].history[shown[after[2].ref] :] == [chunks[2]], "the live one got its chunk, once"


def test_a_stored_state_round_trips_and_a_damaged_one_is_refused_with_a_reason():
    state = ReplyState.first_only("m1")
    assert ReplyState.from_json(state.to_json()) == state
    with pytest.raises(ValueError, match="not JSON"):
        ReplyState.from_json("{")
    with pytest.raises(ValueError, match="format version"):
        ReplyState.from_json('{"v": 99, "parts": []}')
    with pytest.raises(ValueError, match="malformed"):
        ReplyState.from_json('{"v": 1, "parts": [["", 1, "x", false]], "platform": ""}')
