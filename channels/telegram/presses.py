"""Button presses on Telegram: a ``callback_query`` becomes an :class:`InboundMessage`, then is answered.

Why a press is an ordinary inbound message: it goes through the same durable inbox (store before the
update is confirmed) and the same dedupe as a typed message, so a press Telegram delivers twice acts
once. The message carries the button's ``callback_data`` as its text (it *is* the command, see
:func:`channels.telegram.transport.inline_keyboard`), ``pressed`` = the id of the message the button is
on (what the transport's ``send`` returned), and the same conversation key as the messages of that chat,
forum topic or reply chain — a press normalised into another conversation would find no turn to stop.

Every query is answered with ``answerCallbackQuery`` once it is stored: until then the presser's client
shows a spinner on the button. The answer is empty on purpose; what the press did shows in the chat.
"""

from __future__ import annotations

import logging
from typing import Any

import telegram.error as tg_errors
from telegram import CallbackQuery, MaybeInaccessibleMessage, Message
from telegram.constants import ChatType

from channels.errors import ChannelError
from channels.telegram.transport import TelegramHost, map_error
from channels.types import InboundMessage, Sender

log = logging.getLogger(__name__)

#: Prefix of a press's platform_message_id: callback ids and message ids share the inbox's dedupe key
#: space of a chat, and both are digit strings.
PRESS_ID_PREFIX = "callback:"
#: How long an answerCallbackQuery may take before intake moves on (the spinner then times out itself).
ANSWER_TIMEOUT = 5.0


def press_message(channel: TelegramHost, query: CallbackQuery) -> InboundMessage | None:
    """The press as an inbound message, or None for a query that is no button of ours."""
    message = query.message
    user = query.from_user
    if message is None or query.data is None or not isinstance(query.data, str):
        return None  # inline-mode messages and game buttons: we send neither
    chat = message.chat
    private = chat.type == ChatType.PRIVATE
    topic_thread: int | None = None
    if isinstance(message, Message) and message.is_topic_message:
        topic_thread = message.message_thread_id  # an inaccessible (too old) message says nothing
    context: dict[str, Any] = {"chat_type": chat.type, "callback_query_id": query.id}
    if user.username:
        context["username"] = user.username
    topic: str | None = None
    if not private:
        topic = f"topic:{topic_thread}" if topic_thread is not None else _chain_of(channel, message)
        context["reply_to"] = message.message_id  # a notice about the press quotes the button's message
    if topic_thread is not None:
        context["thread_id"] = topic_thread
    return InboundMessage(
        provider=channel.provider,
        workspace="",
        chat=str(chat.id),
        topic=topic,
        sender=Sender(id=str(user.id), name=user.full_name or user.username, is_bot=user.is_bot),
        text=query.data,
        platform_message_id=f"{PRESS_ID_PREFIX}{query.id}",
        mentioned=True,
        is_private=private,
        context=context,
        pressed=str(message.message_id),
    )


def _chain_of(channel: TelegramHost, message: MaybeInaccessibleMessage) -> str:
    """The reply chain of the bot message a button is on, as the chat's own messages name it.

    The transport remembered every message it sent; after a restart the quoted message (the one the bot
    answered) names the chain as :meth:`TelegramChannel._topic_for` would have.
    """
    chat_id = message.chat.id
    known = channel.chain_of(chat_id, message.message_id)
    if known is not None:
        return known
    quoted = message.reply_to_message if isinstance(message, Message) else None
    if quoted is not None:
        return channel.chain_of(chat_id, quoted.message_id) or f"chain:{quoted.message_id}"
    return f"chain:{message.message_id}"


async def answer(channel: TelegramHost, query: CallbackQuery) -> None:
    """``answerCallbackQuery`` within the bot's budget; a refusal is logged, never raised.

    A query answered before (the same press redelivered after a crash) is refused by Telegram as
    "query is too old … or query ID is invalid": expected, and nothing to retry.
    """
    try:
        await channel.bot_budget.acquire(priority=True)
        await channel.bot.answer_callback_query(query.id, read_timeout=ANSWER_TIMEOUT)
    except tg_errors.TelegramError as exc:
        log.info("Telegram did not take the answer to button press %s: %s", query.id, map_error(exc))
    except ChannelError as exc:  # stopped meanwhile
        log.info("button press %s not answered: %s", query.id, exc)
