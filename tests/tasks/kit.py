"""Reading task cards as a person reads them in the chat (bot/tasks/card.py renders them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.fakes.telegram import FakeMessage, FakeTelegram

CARD_MARK = "🗂 "


def is_card(text: str) -> bool:
    return text.startswith(CARD_MARK)


def card_status(text: str) -> str:
    """The card's status line (``✅ Done``, ``▶️ Running — …``)."""
    return text.split("\n")[1] if is_card(text) and "\n" in text else ""


def card_body(text: str) -> str:
    """What the card shows below its header: the job's output so far, or its result; a plain message
    is returned as it is."""
    if not is_card(text):
        return text
    _head, _, body = text.partition("\n\n")
    return body


def telegram_cards(tg: FakeTelegram, chat: int) -> list[FakeMessage]:
    """The task cards the bot shows in a Telegram ``chat``."""
    return [m for m in tg.bot_messages(chat) if is_card(m.text)]


def telegram_card_posts(tg: FakeTelegram) -> int:
    """How many times a card was posted (``sendMessage``): a card continued in place is posted once."""
    return sum(is_card(str(c["params"].get("text", ""))) for c in tg.calls("sendMessage"))
