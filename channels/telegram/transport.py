"""Telegram's half of a reply (send / edit / files) and the one place PTB errors become channel errors.

The shared :class:`~channels.reply.ReplyStream` decides *when* to call; this module only knows *how*:
Markdown is rendered to Telegram HTML, a refused markup is resent once as plain text, group replies
quote the message they answer, and forum-topic replies stay in their topic.

Buttons (:class:`~channels.types.Action`) become an inline keyboard whose ``callback_data`` is the
action's command itself (Telegram carries at most 64 bytes of it back in the ``callback_query``), so a
press needs no lookup table a restart would lose. ``editMessageText`` without ``reply_markup`` removes
the keyboard, which is how the Stop button disappears with the final text.
"""

from __future__ import annotations

import asyncio
import logging
import os
import warnings
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol, TypeVar

import telegram.error as tg_errors
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, LinkPreviewOptions, ReplyParameters
from telegram.constants import ChatAction, InlineKeyboardButtonLimit, ParseMode

from channels import errors
from channels.reply import Budget, NativeStream, RateBudget, ReplyTransport
from channels.telegram.markup import markdown_to_html
from channels.types import Action, InboundMessage
from config.channels.telegram import TelegramConfig

log = logging.getLogger(__name__)

# Opt in to PTB's future time-period type now: otherwise every RetryAfter PTB builds emits a
# deprecation warning. Our code reads either form (see retry_seconds).
os.environ.setdefault("PTB_TIMEDELTA", "1")

T = TypeVar("T")

#: Bots may upload up to 50 MB through the public Bot API; photos up to 10 MB.
UPLOAD_LIMIT = 50 * 1024 * 1024
PHOTO_LIMIT = 10 * 1024 * 1024
PHOTO_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".gif"}
#: A draft is a preview that lapses after about 30 s without an update; an unchanged one is re-sent.
DRAFT_KEEPALIVE = 20.0
#: Longest wait honoured inside a file upload (text pacing is the ReplyStream's job).
MAX_FILE_RETRY_WAIT = 30.0

#: InlineKeyboardButton.callback_data: 1-64 bytes of UTF-8 (longer is refused with BUTTON_DATA_INVALID).
CALLBACK_DATA_LIMIT = int(InlineKeyboardButtonLimit.MAX_CALLBACK_DATA)
#: Action styles → InlineKeyboardButton.style (Bot API 9.4; older clients show the default colour).
BUTTON_STYLES = {"primary": "primary", "danger": "danger"}

_NOT_MODIFIED = "message is not modified"
_EDIT_GONE = ("message to edit not found", "message can't be edited", "message_id_invalid")
_PARSE_ERROR = "can't parse entities"


def retry_seconds(exc: tg_errors.RetryAfter) -> float:
    """``RetryAfter.retry_after`` is an int or a timedelta depending on PTB's PTB_TIMEDELTA switch."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value: Any = exc.retry_after
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


def map_error(exc: tg_errors.TelegramError) -> errors.ChannelError:
    """Translate a python-telegram-bot error into :mod:`channels.errors` (the only such mapping)."""
    message = str(exc)
    lowered = message.lower()
    if isinstance(exc, tg_errors.RetryAfter):
        return errors.RetryAfter(retry_seconds(exc), "Telegram rate limit")
    if isinstance(exc, tg_errors.Conflict):
        return errors.Conflict(f"Telegram 409 Conflict: {message}")
    if isinstance(exc, tg_errors.InvalidToken):
        return errors.Forbidden("Telegram rejected the bot token")
    if isinstance(exc, tg_errors.Forbidden):
        return errors.Forbidden(message)
    if isinstance(exc, tg_errors.ChatMigrated):
        return errors.BadRequest(f"the group was upgraded to a supergroup ({exc.new_chat_id})")
    if isinstance(exc, tg_errors.BadRequest):  # note: a subclass of NetworkError in PTB
        if _NOT_MODIFIED in lowered:
            return errors.MessageNotModified(message)
        if any(marker in lowered for marker in _EDIT_GONE):
            return errors.EditFailed(message)
        return errors.BadRequest(message)
    if isinstance(exc, tg_errors.NetworkError):  # includes TimedOut
        return errors.NetworkError(message or type(exc).__name__)
    return errors.ChannelError(message or type(exc).__name__)


def inline_keyboard(actions: Sequence[Action]) -> InlineKeyboardMarkup | None:
    """One row of callback buttons, or None when no action fits (then nothing is attached).

    An action whose command is longer than Telegram's 64-byte ``callback_data`` is left off with a log
    line rather than sent: Telegram would refuse the whole message, and the command can still be typed.
    """
    row: list[InlineKeyboardButton] = []
    for action in actions:
        size = len(action.command.encode("utf-8"))
        if not 1 <= size <= CALLBACK_DATA_LIMIT:
            log.warning(
                "Telegram button %r left off: its command is %d bytes (callback_data holds 1-%d)",
                action.label,
                size,
                CALLBACK_DATA_LIMIT,
            )
            continue
        style = BUTTON_STYLES.get(action.style or "")
        row.append(InlineKeyboardButton(action.label, callback_data=action.command, style=style))
    return InlineKeyboardMarkup([row]) if row else None


async def _call(action: Callable[[], Awaitable[T]]) -> T:
    try:
        return await action()
    except tg_errors.TelegramError as exc:
        raise map_error(exc) from exc


class TelegramDraft(NativeStream):
    """A private chat's live reply as a ``sendMessageDraft`` preview (Bot API 9.3+, PTB ≥ 22.7).

    Why: an edited message flickers and is re-notified; a draft animates in the user's input area and
    costs no message. A draft is only a preview (it lapses after about 30 s without an update, and
    Telegram accepts drafts only in private chats), so the final text is still sent with
    ``sendMessage`` — which is why :attr:`closes_in_place` is False.
    """

    closes_in_place = False
    keepalive = DRAFT_KEEPALIVE

    def __init__(self, transport: TelegramTransport, draft_id: int) -> None:
        self.transport = transport
        self.draft_id = draft_id

    async def _draft(self, text: str) -> None:
        transport = self.transport
        kwargs = {"message_thread_id": transport.thread_id} if transport.thread_id is not None else {}

        async def call(body: str, mode: str | None) -> Any:
            return await transport.bot.send_message_draft(
                chat_id=transport.chat_id, draft_id=self.draft_id, text=body, parse_mode=mode, **kwargs
            )

        await transport._with_markup(call, text)

    async def begin(self, placeholder: str) -> str | None:
        if placeholder.strip(" .…"):
            # A notice ("⏳ Queued …") may wait minutes and must survive a restart as a message the next
            # run edits into the answer; a lapsing preview cannot. Such a reply takes the edit path.
            raise errors.EditFailed("a notice is sent as a message, not as a draft")
        await self._draft(placeholder)
        return None  # nothing persisted yet: a resumed run has no message to continue

    async def show(self, text: str) -> None:
        await self._draft(text)

    async def close(self, text: str) -> str | None:  # never called (closes_in_place is False)
        return None


class TelegramHost(Protocol):
    """What a reply and a button press need of their channel (a TelegramChannel): its config, bot and
    bot-wide budget, and the reply chains and draft ids it keeps. Typed here rather than by importing the
    channel, which imports this module: no import circle (tests/foundation/test_import_graph.py)."""

    @property
    def provider(self) -> str: ...
    @property
    def config(self) -> TelegramConfig: ...
    @property
    def bot(self) -> Bot: ...
    @property
    def bot_budget(self) -> RateBudget: ...
    def next_draft_id(self) -> int: ...
    def chain_of(self, chat_id: int, message_id: int) -> str | None: ...
    def remember_reply(self, chat_id: int, message_id: int, topic: str | None) -> None: ...


class TelegramTransport(ReplyTransport):
    """Answers one inbound message in its chat, topic or reply chain."""

    supports_actions = True

    def __init__(self, channel: TelegramHost, message: InboundMessage) -> None:
        self.channel = channel
        self.message = message
        self.chat_id = int(message.chat)
        context = message.context or {}
        self.thread_id: int | None = context.get("thread_id")
        self.reply_to: int | None = context.get("reply_to")
        self.typing_interval = channel.config.typing_interval_seconds
        #: The reply's budgets (set by the channel when it opens the reply): files are paced by them too.
        self.budget: Budget | None = None

    @property
    def bot(self) -> Any:
        return self.channel.bot

    def _placement(self) -> dict[str, Any]:
        """Where a new message goes: the forum topic, and (in groups) quoting the user's message."""
        placement: dict[str, Any] = {}
        if self.thread_id is not None:
            placement["message_thread_id"] = self.thread_id
        if self.reply_to is not None:
            placement["reply_parameters"] = ReplyParameters(
                message_id=self.reply_to, allow_sending_without_reply=True
            )
        return placement

    async def _with_markup(self, call: Callable[[str, str | None], Awaitable[T]], text: str) -> T:
        """Send as HTML; if Telegram cannot parse it, resend the original text once without markup."""
        try:
            return await call(markdown_to_html(text), ParseMode.HTML)
        except tg_errors.BadRequest as exc:
            if _PARSE_ERROR not in str(exc).lower():
                raise map_error(exc) from exc
            log.info("Telegram refused the HTML rendering (%s); sending plain text", exc)
        except tg_errors.TelegramError as exc:
            raise map_error(exc) from exc
        return await _call(lambda: call(text, None))

    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str:
        keyboard = None if fallback else inline_keyboard(actions)

        async def call(body: str, mode: str | None) -> Any:
            return await self.bot.send_message(
                chat_id=self.chat_id,
                text=body,
                parse_mode=mode,
                link_preview_options=LinkPreviewOptions(is_disabled=True),
                reply_markup=keyboard,
                **self._placement(),
            )

        sent = await self._with_markup(call, text)
        self.channel.remember_reply(self.chat_id, sent.message_id, self.message.topic)
        return str(sent.message_id)

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        """Replace the text and the keyboard: no ``reply_markup`` (no actions) removes the buttons."""
        keyboard = inline_keyboard(actions)

        async def call(body: str, mode: str | None) -> Any:
            return await self.bot.edit_message_text(
                text=body,
                chat_id=self.chat_id,
                message_id=int(ref),
                parse_mode=mode,
                link_preview_options=LinkPreviewOptions(is_disabled=True),
                reply_markup=keyboard,
            )

        await self._with_markup(call, text)

    async def send_voice(self, audio: bytes) -> None:
        """Ogg/Opus ``audio`` as a voice note (``sendVoice``), placed like the reply's other messages."""
        try:
            await self.bot.send_voice(
                chat_id=self.chat_id, voice=audio, filename="answer.ogg", **self._placement()
            )
        except tg_errors.TelegramError as exc:
            raise map_error(exc) from exc

    async def send_files(self, files: Sequence[Path]) -> None:
        """The stream acquired the budget for the first file; each further upload acquires its own."""
        for index, path in enumerate(files):
            if index and self.budget is not None:
                await self.budget.acquire()
            await self._send_file(Path(path))

    async def _send_file(self, path: Path) -> None:
        size = (await asyncio.to_thread(path.stat)).st_size
        if size > UPLOAD_LIMIT:
            await self.send(
                f"(`{path.name}` is {size // (1024 * 1024)} MB; Telegram bots can send up to 50 MB.)"
            )
            return
        data = await asyncio.to_thread(path.read_bytes)
        as_photo = path.suffix.lower() in PHOTO_SUFFIXES and size <= PHOTO_LIMIT
        waited = False
        while True:
            try:
                if as_photo:
                    sent = await self.bot.send_photo(
                        chat_id=self.chat_id, photo=data, filename=path.name, **self._placement()
                    )
                else:
                    sent = await self.bot.send_document(
                        chat_id=self.chat_id, document=data, filename=path.name, **self._placement()
                    )
            except tg_errors.RetryAfter as exc:
                if waited:
                    raise map_error(exc) from exc
                waited = True
                pause = min(retry_seconds(exc), MAX_FILE_RETRY_WAIT)
                if self.budget is None:
                    await asyncio.sleep(pause)
                else:  # hold the whole chat, not only this upload
                    self.budget.penalize(pause)
                    await self.budget.acquire()
                continue
            except tg_errors.BadRequest as exc:
                if not as_photo:
                    raise map_error(exc) from exc
                # e.g. odd dimensions: Telegram takes any image as a document.
                log.info("sending %s as a photo failed (%s); sending it as a document", path.name, exc)
                as_photo = False
                continue
            except tg_errors.TelegramError as exc:
                raise map_error(exc) from exc
            self.channel.remember_reply(self.chat_id, sent.message_id, self.message.topic)
            return

    def native_stream(self, actions: Sequence[Action] = ()) -> NativeStream | None:
        """Drafts in private chats (where Telegram allows them); groups keep the edited message.

        A draft cannot carry an inline keyboard (``sendMessageDraft`` has no ``reply_markup``), so
        drafts are the operator's choice (``private_drafts: true``, off by default): a private answer
        then streams without its Stop button, and ``/stop`` (in the command menu) does the same there
        (docs/channels/telegram.md).
        """
        if not self.message.is_private or not self.channel.config.private_drafts:
            return None
        return TelegramDraft(self, self.channel.next_draft_id())

    async def typing(self) -> None:
        kwargs = {"message_thread_id": self.thread_id} if self.thread_id is not None else {}
        await _call(
            lambda: self.bot.send_chat_action(chat_id=self.chat_id, action=ChatAction.TYPING, **kwargs)
        )
