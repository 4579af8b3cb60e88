"""The room window's bounds and privacy, on its own (bot/agents/room.py)."""

from __future__ import annotations

from bot.agents.room import MAX_CHARS, RoomLog
from channels.types import InboundMessage, Sender


def said(
    chat: str, n: int, *, private: bool = False, text: str | None = None, bot: bool = False
) -> InboundMessage:
    return InboundMessage(
        provider="telegram",
        workspace="",
        chat=chat,
        sender=Sender(id=str(n), name=f"P{n}", is_bot=bot),
        text=text if text is not None else f"message {n}",
        platform_message_id=str(n),
        is_private=private,
        received_at=float(n),
    )


def test_a_window_is_the_last_n_before_the_message_in_its_own_chat_only() -> None:
    room = RoomLog(depth=3)
    for n in range(1, 10):
        room.record(said("-1", n))
    room.record(said("-2", 100))
    window = room.before(said("-1", 20), 3)
    assert [s.text for s in window] == ["message 7", "message 8", "message 9"]
    assert [s.text for s in room.before(said("-2", 200), 3)] == ["message 100"]


def test_private_chats_bots_and_repeats_are_not_kept_and_a_dm_gets_no_window() -> None:
    room = RoomLog(depth=5)
    room.record(said("42", 1, private=True))
    room.record(said("-1", 2, bot=True))
    room.record(said("-1", 3))
    room.record(said("-1", 3))  # a mention delivered as two events
    assert room.before(said("42", 9, private=True), 5) == []
    assert [s.text for s in room.before(said("-1", 9), 5)] == ["message 3"]


def test_memory_stays_bounded_per_chat_per_message_and_in_chats() -> None:
    room = RoomLog(depth=2, max_chats=3)
    for n in range(1, 50):
        room.record(said("-1", n, text="x" * (MAX_CHARS * 2)))
    for chat in ("-2", "-3", "-4"):
        room.record(said(chat, 60))
    assert room.before(said("-1", 99), 50) == []  # the least recently active chat was dropped
    room.record(said("-5", 1))
    kept = room.before(said("-3", 99), 50)
    assert len(kept) == 1 and len(kept[0].text) <= MAX_CHARS
    for n in range(1, 50):
        room.record(said("-5", n, text="y" * (MAX_CHARS * 2)))
    window = room.before(said("-5", 99), 50)
    assert len(window) == 4 and all(len(s.text) == MAX_CHARS for s in window)  # 2 × depth kept
