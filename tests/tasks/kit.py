"""Reading task cards as a person reads them in the chat (bot/tasks/card.py renders them), and pressing
their ⏹ Stop as a person would."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from channels.slack.channel import SlackChannel
from tests.agent.helpers import wait_until
from tests.agent.test_sandbox import beat, beating
from tests.channels.slack.conftest import slack_section
from tests.fakes.slack import FakeSlack
from tests.harness import Harness

if TYPE_CHECKING:
    from tests.fakes import slack as slack_fake
    from tests.fakes.telegram import FakeMessage, FakeTelegram

CARD_MARK = "🗂 "
#: The button a running task's card carries.
STOP = "⏹ Stop"


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


async def running_card(tg: FakeTelegram, chat: int, timeout: float = 30) -> FakeMessage:
    """The first task card in a Telegram ``chat`` that shows ⏹ Stop: its job is running."""
    return await tg.wait_until(
        lambda: next((m for m in tg.bot_messages(chat) if is_card(m.text) and m.buttons == [STOP]), None),
        timeout,
    )


async def stop_heartbeat_on_card(
    h: Harness, tg: FakeTelegram, tmp_path: Path, chat: int, ask: str, answer: str, timeout: float = 30
) -> FakeMessage:
    """Ask in ``chat`` for work whose sandbox command keeps ``tests.agent.test_sandbox.HEARTBEAT``
    going; once it beats, press ⏹ Stop on the job's card and wait until the turn has said ``answer``
    and the service is idle. Returns the card that was pressed; whether the heartbeat stopped is the
    caller's to assert."""
    tg.user_message(chat, ask, user_id=chat)
    await wait_until(lambda: beat(tmp_path) != "", timeout=timeout)
    assert await beating(tmp_path, within=10)
    live = await running_card(tg, chat)
    tg.press(chat, live.message_id, STOP, user_id=chat)
    await tg.wait_for_bot_text(chat, answer, timeout=timeout)
    await h.idle(timeout=30)
    return live


async def slack_dm_turn(
    settings_for: Callable[..., Any], ask: str, answer: str
) -> tuple[list[slack_fake.FakeMessage], int, int]:
    """A Slack DM asking ``ask``, answered by a running service made from ``settings_for(channels=…)``.

    Waits for ``answer`` and the service to be idle; returns the DM's task cards, how many times a card
    was posted (``chat.postMessage``: a card updated in place is posted once) and how many messages
    carry the answer."""
    with FakeSlack() as slack:
        settings = settings_for(channels={"slack": slack_section(slack)})
        channel = SlackChannel(settings.channels.slack, settings=settings)
        async with Harness.running(settings, channels={"slack": channel}) as h:  # type: ignore[dict-item]
            await slack.wait_connected()
            slack.dm("U1", ask)
            await slack.wait_for_text(answer, "DU1")
            await h.idle(timeout=30)
            cards = [m for m in slack.channel_messages("DU1") if is_card(m.text)]
            posts = sum(is_card(str(c.args.get("text", ""))) for c in slack.calls_to("chat.postMessage"))
            answers = sum(answer in m.text for m in slack.channel_messages("DU1"))
    return cards, posts, answers
